//go:build !race

package rewrite

// raceEnabled reports whether the tests run with the race detector.
const raceEnabled = false

//go:build race

package proxy

// raceEnabled lowers the load test's concurrency: the race detector allows
// at most 8128 live goroutines and each stream needs about nine.
const raceEnabled = true

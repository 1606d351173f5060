//go:build race

package reliability

// raceEnabled makes the harness build the proxy binary with -race too, so
// that a data race under fault injection fails the test (exit status 66).
const raceEnabled = true

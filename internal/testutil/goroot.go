package testutil

import (
	"os/exec"
	"strings"
	"sync"
	"testing"
)

var goroot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	return strings.TrimSpace(string(out)), err
})

// GOROOT returns the root of the Go installation that runs the tests, as
// "go env GOROOT" prints it (go test puts that installation's go first on
// PATH). It fails the test when go cannot tell.
func GOROOT(t testing.TB) string {
	t.Helper()
	root, err := goroot()
	if err != nil || root == "" {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return root
}

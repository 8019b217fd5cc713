// Package testwait waits in tests for work done by other goroutines.
package testwait

import (
	"testing"
	"time"
)

// Until polls cond until it holds, failing the test after 10 s. Tests use
// it for work done by goroutines (watchers, samplers), never for timing.
func Until(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

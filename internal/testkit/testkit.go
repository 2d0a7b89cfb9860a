// Package testkit holds what the tests of every package share: one way to wait for
// a condition, and a clock the test moves (Clock). A test never sleeps for a fixed time to let something happen; it
// polls the condition with a deadline, and the deadline is a guard against a hang,
// never an assertion about speed: it is long enough for a machine under full load
// (docs/design.md §9, tests).
package testkit

import (
	"fmt"
	"testing"
	"time"
)

// Deadline bounds every wait. It is not a goal: a condition that needs it is a
// hang, and the test says what it was waiting for.
const Deadline = 60 * time.Second

// Eventually polls cond until it returns nil and returns how long that took; past
// Deadline it fails the test with what it waited for and cond's last error.
func Eventually(t testing.TB, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > Deadline {
			t.Fatalf("%s: not within %v: %v", what, Deadline, err)
		}
		time.Sleep(pause)
		if pause < 20*time.Millisecond {
			pause *= 2
		}
	}
}

// Until is Eventually for a condition that is true or false.
func Until(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	return Eventually(t, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = fmt.Errorf("not yet")

package testkit

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestUntilPollsUntilTrue: the condition is asked again until it holds, and the
// wait returns then, not at the deadline.
func TestUntilPollsUntilTrue(t *testing.T) {
	var calls atomic.Int32
	Until(t, "the third call", func() bool { return calls.Add(1) >= 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("asked %d times, want 3", n)
	}
}

// TestEventuallyReturnsOnSuccess: an error is retried until the condition holds.
func TestEventuallyReturnsOnSuccess(t *testing.T) {
	n := 0
	Eventually(t, "five calls", func() error {
		n++
		if n < 5 {
			return errors.New("not five")
		}
		return nil
	})
	if n != 5 {
		t.Fatalf("%d calls, want 5", n)
	}
}

package httpapi

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testKey struct{}

// TestRequestDeadline: the lazy deadline behaves as context.WithDeadline's
// context for everything a caller can see — Deadline, Err, Done, Value, the
// cancellation of children and their cause, the end of the request — whether or
// not something armed it first (issue 19 item 10, docs/history.md).
func TestRequestDeadline(t *testing.T) {
	t.Parallel()
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	parent := func() (context.Context, context.CancelFunc) {
		return context.WithCancel(context.WithValue(context.Background(), testKey{}, "from the parent"))
	}
	far := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Second)
	for _, tc := range []struct {
		name     string
		deadline time.Time
		act      func(d *requestDeadline, cancelParent context.CancelFunc)
		wantErr  error
	}{
		{"waiting, unarmed", far, func(*requestDeadline, context.CancelFunc) {}, nil},
		{"waiting, armed", far, func(d *requestDeadline, _ context.CancelFunc) { d.Done() }, nil},
		{"passed, unarmed", past, func(*requestDeadline, context.CancelFunc) {}, context.DeadlineExceeded},
		{"passed, armed", past, func(d *requestDeadline, _ context.CancelFunc) { d.Done() }, context.DeadlineExceeded},
		{"parent cancelled, unarmed", far, func(_ *requestDeadline, c context.CancelFunc) { c() }, context.Canceled},
		{"parent cancelled, armed", far, func(d *requestDeadline, c context.CancelFunc) { d.Done(); c() }, context.Canceled},
		{"request ended, unarmed", far, func(d *requestDeadline, _ context.CancelFunc) { d.release() }, context.Canceled},
		{"request ended, armed", far, func(d *requestDeadline, _ context.CancelFunc) { d.Done(); d.release() }, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, cancel := parent()
			defer cancel()
			var d requestDeadline
			ctx := d.start(p, tc.deadline)
			tc.act(&d, cancel)
			if dl, ok := ctx.Deadline(); !ok || !dl.Equal(tc.deadline) {
				t.Errorf("Deadline() = %v %v, want %v", dl, ok, tc.deadline)
			}
			if err := ctx.Err(); err != tc.wantErr {
				t.Errorf("Err() = %v, want %v", err, tc.wantErr)
			}
			if got := ctx.Value(testKey{}); got != "from the parent" {
				t.Errorf("Value = %v", got)
			}
			// A child sees what the deadline says, as it would under WithDeadline.
			child, stop := context.WithCancel(ctx)
			defer stop()
			if done := closed(child.Done()); done != (tc.wantErr != nil) {
				t.Errorf("child done %v, want %v", done, tc.wantErr != nil)
			}
			if done := closed(ctx.Done()); done != (tc.wantErr != nil) {
				t.Errorf("Done() closed %v, want %v", done, tc.wantErr != nil)
			}
			if tc.wantErr != nil && !errors.Is(context.Cause(child), tc.wantErr) {
				t.Errorf("child's cause %v, want %v", context.Cause(child), tc.wantErr)
			}
			d.release()
			if !closed(ctx.Done()) || ctx.Err() == nil {
				t.Errorf("after the request: Done closed %v, Err %v", closed(ctx.Done()), ctx.Err())
			}
		})
	}
}

// TestRequestDeadlineFires: a child made before the deadline is cancelled when
// it passes, with DeadlineExceeded as its cause.
func TestRequestDeadlineFires(t *testing.T) {
	t.Parallel()
	var d requestDeadline
	ctx := d.start(context.Background(), time.Now().Add(20*time.Millisecond))
	defer d.release()
	child, stop := context.WithCancel(ctx)
	defer stop()
	select {
	case <-child.Done():
	case <-time.After(time.Minute):
		t.Fatal("the deadline did not reach the child within a minute")
	}
	if !errors.Is(child.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(child), context.DeadlineExceeded) ||
		ctx.Err() != context.DeadlineExceeded {
		t.Errorf("child %v (cause %v), deadline %v", child.Err(), context.Cause(child), ctx.Err())
	}
}

// TestRequestDeadlineParentEarlier: a parent's earlier deadline is the request's.
func TestRequestDeadlineParentEarlier(t *testing.T) {
	t.Parallel()
	earlier := time.Now().Add(time.Minute)
	p, cancel := context.WithDeadline(context.Background(), earlier)
	defer cancel()
	var d requestDeadline
	ctx := d.start(p, earlier.Add(time.Hour))
	defer d.release()
	if dl, _ := ctx.Deadline(); !dl.Equal(earlier) {
		t.Errorf("Deadline() = %v, want the parent's %v", dl, earlier)
	}
}

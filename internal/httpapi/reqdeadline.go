package httpapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// requestDeadline is an API request's deadline (deadline.go) as a context that
// costs nothing until something waits on it. context.WithDeadline makes a
// context, a timer and an entry in the parent's children on every request — 4
// allocations and about 3 % of a finished-task read's CPU (issue 19 item 10,
// docs/history.md) — although most reads never wait: a finished task, a
// session or a grant from memory. The first Done (which a child context calls
// too) arms it: from then on it is context.WithDeadline's context for the same
// instant and the same parent, with its cause. Before that, Err reads the
// clock, and Value is the parent's. It lives in the request's reqInfo, so it
// needs no allocation of its own.
type requestDeadline struct {
	parent   context.Context
	deadline time.Time

	armed    atomic.Pointer[armedDeadline] // set once, under mu
	mu       sync.Mutex
	released bool // the request ended before anything armed it
}

type armedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// start sets the deadline over parent and returns the request's context.
func (d *requestDeadline) start(parent context.Context, deadline time.Time) context.Context {
	d.parent, d.deadline = parent, deadline
	if earlier, ok := parent.Deadline(); ok && earlier.Before(deadline) {
		d.deadline = earlier // as context.WithDeadline says
	}
	return d
}

// release ends the context when the request ends, as a CancelFunc would.
func (d *requestDeadline) release() {
	d.mu.Lock()
	d.released = true
	a := d.armed.Load()
	d.mu.Unlock()
	if a != nil {
		a.cancel()
	}
}

// arm makes the real context (cancelled at once when the request has ended).
func (d *requestDeadline) arm() context.Context {
	if a := d.armed.Load(); a != nil {
		return a.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.armed.Load(); a != nil {
		return a.ctx
	}
	ctx, cancel := context.WithDeadline(d.parent, d.deadline)
	if d.released {
		cancel()
	}
	d.armed.Store(&armedDeadline{ctx: ctx, cancel: cancel})
	return ctx
}

// Deadline implements context.Context.
func (d *requestDeadline) Deadline() (time.Time, bool) { return d.deadline, true }

// Done implements context.Context; it arms the deadline.
func (d *requestDeadline) Done() <-chan struct{} { return d.arm().Done() }

// Err implements context.Context: the real context's once armed; before, the
// parent's, else Canceled once the request has ended, else DeadlineExceeded
// once the deadline has passed (arming it, so that its cause is there too).
func (d *requestDeadline) Err() error {
	if a := d.armed.Load(); a != nil {
		return a.ctx.Err()
	}
	if err := d.parent.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	released := d.released
	d.mu.Unlock()
	if released || !time.Now().Before(d.deadline) {
		return d.arm().Err()
	}
	return nil
}

// Value implements context.Context: the real context's once armed (it knows
// its own cancellation), the parent's before.
func (d *requestDeadline) Value(key any) any {
	if a := d.armed.Load(); a != nil {
		return a.ctx.Value(key)
	}
	return d.parent.Value(key)
}

// String names the context in a panic or a log, as the context package's do.
func (d *requestDeadline) String() string {
	return "httpapi.requestDeadline(" + d.deadline.String() + ")"
}

package auth

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The queue says when hashing goes idle — the last running hash ended with
// nobody waiting — and the reclaimer returns memory then, at most once a second.
func TestReclaimWhenHashingGoesIdle(t *testing.T) {
	t.Parallel()
	q := newHashQueue(2, 0, time.Second, time.Millisecond)
	idle := make(chan struct{}, 8)
	q.onIdle = func() { idle <- struct{}{} }
	ctx := context.Background()
	r1, _, ok1 := q.acquire(ctx)
	r2, _, ok2 := q.acquire(ctx)
	if !ok1 || !ok2 {
		t.Fatal("no slot")
	}
	r1()
	select {
	case <-idle:
		t.Fatal("idle with a hash still running")
	default:
	}
	r2()
	<-idle // the last one ended: onIdle runs (on its own goroutine)

	clock := newTestClock()
	var freed atomic.Int64
	var scheduled []func()
	r := &reclaimer{free: func() { freed.Add(1) }, now: clock.Now,
		after: func(_ time.Duration, f func()) { scheduled = append(scheduled, f) }}
	r.idle()
	r.idle()
	r.idle()
	if n := freed.Load(); n != 1 || len(scheduled) != 1 {
		t.Fatalf("%d reclaims and %d scheduled within %v, want 1 and 1", n, len(scheduled), reclaimEvery)
	}
	clock.Advance(reclaimEvery)
	scheduled[0]() // the burst's last idle is reclaimed when the second is up
	if n := freed.Load(); n != 2 {
		t.Fatalf("%d reclaims after the scheduled one, want 2", n)
	}
	clock.Advance(reclaimEvery)
	r.idle()
	if n := freed.Load(); n != 3 || len(scheduled) != 1 {
		t.Fatalf("%d reclaims, %d scheduled a second later, want 3 and 1", n, len(scheduled))
	}
}

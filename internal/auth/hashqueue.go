package auth

import (
	"container/list"
	"context"
	"math"
	"runtime"
	"sync"
	"time"
)

// hashQueue bounds concurrent argon2 computations (docs/security.md item 16): each one holds
// Argon2.Memory of RAM and a core, so an unbounded login flood would starve every
// other request and could exhaust memory. A login that finds every slot taken waits
// its turn in a FIFO queue instead of being turned away at once; the queue is
// bounded so that the wait stays near maxWait (or at a fixed length), and a login
// that finds it full is answered 429 with the time the queue needs to drain.
//
// Slots are handed over, not released and re-taken: a finishing hash gives its slot
// to the head of the queue under the lock, so no newcomer can overtake a waiter.
type hashQueue struct {
	slots    int
	fixedLen int           // queue length when > 0; else derived from maxWait and the hash time
	maxWait  time.Duration // the longest expected wait the derived queue admits; < 0: no queue

	// onIdle, when set, is called (outside the lock, on its own goroutine) when
	// the last running hash ends with nobody waiting.
	onIdle func()

	mu      sync.Mutex
	busy    int           // slots in use
	waiting *list.List    // of chan struct{}, closed when the slot is handed over
	hold    time.Duration // moving average of how long a slot is held
}

// defaultHashSlots leaves one core for everything else: authenticated requests must
// go on during a login flood.
func defaultHashSlots() int { return max(1, runtime.GOMAXPROCS(0)-1) }

func newHashQueue(slots, fixedLen int, maxWait, hashTime time.Duration) *hashQueue {
	return &hashQueue{slots: slots, fixedLen: fixedLen, maxWait: maxWait, waiting: list.New(),
		hold: max(hashTime, time.Millisecond)}
}

// full reports whether a newcomer must be turned away: the queue is at its fixed
// length, or the logins ahead of it would take longer than maxWait (one round of
// waiters, a slot each, is always admitted: waiting one hash beats a 429 that says
// come back after one). The caller holds q.mu.
func (q *hashQueue) full() bool {
	n := q.waiting.Len()
	switch {
	case q.fixedLen > 0:
		return n >= q.fixedLen
	case q.maxWait < 0:
		return true
	}
	return n >= q.slots && (q.drain() > q.maxWait || n >= maxDerivedQueue)
}

// maxDerivedQueue caps a queue derived from very fast hashes: each waiter holds a
// goroutine and its request.
const maxDerivedQueue = 1024

// drain is how long a newcomer would wait: a waiter at position p (from 0) gets a
// slot after about p/slots + 1 holds. The caller holds q.mu.
func (q *hashQueue) drain() time.Duration {
	return time.Duration(q.waiting.Len()/q.slots+1) * q.hold
}

// backIn is how long the logins queued now need to get their slots: a turned-away
// login is told to come back then (Retry-After). The caller holds q.mu.
func (q *hashQueue) backIn() time.Duration {
	rounds := max(1, (q.waiting.Len()+q.slots-1)/q.slots)
	return time.Duration(rounds) * q.hold
}

// acquire takes a slot, waiting its turn when the queue has room. When it has none,
// ok is false and retry says when to come back; a cancelled ctx ends the wait with
// ok false and retry 0.
func (q *hashQueue) acquire(ctx context.Context) (release func(), retry time.Duration, ok bool) {
	t, retry, ok := q.enter()
	if !ok {
		return nil, retry, false
	}
	release, ok = t.wait(ctx)
	return release, 0, ok
}

// A ticket is a login's place in line: a slot already, or a place in the queue.
// Taking the ticket first lets a login be turned away before it costs anything
// more (a store read), and lets that read overlap the wait.
type ticket struct {
	q     *hashQueue
	ready chan struct{} // closed when the slot is the ticket's
	elem  *list.Element // its place in q.waiting until then
}

// enter takes a slot if one is free and nobody waits, else a place at the back of
// the queue; when the queue is full, ok is false and retry says when to come back.
func (q *hashQueue) enter() (t *ticket, retry time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t = &ticket{q: q, ready: make(chan struct{})}
	switch {
	case q.busy < q.slots && q.waiting.Len() == 0:
		q.busy++
		close(t.ready)
	case q.full():
		return nil, q.backIn(), false
	default:
		t.elem = q.waiting.PushBack(t.ready)
	}
	return t, 0, true
}

// wait waits for the ticket's turn and returns the function that gives the slot
// back. When ctx ends first, the ticket leaves the line and ok is false.
func (t *ticket) wait(ctx context.Context) (release func(), ok bool) {
	select {
	case <-t.ready:
		return t.q.releaser(), true
	case <-ctx.Done():
		t.leave()
		return nil, false
	}
}

// leave gives up the ticket without using it: its place in the queue, or its slot
// if it has one (passed on to the next in line). The ticket is spent.
func (t *ticket) leave() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-t.ready:
		q.handOn()
	default:
		q.waiting.Remove(t.elem)
	}
}

// releaser returns the function that gives the slot back (once), feeding how long
// it was held into the average the queue's bound is derived from.
func (q *hashQueue) releaser() func() {
	start := time.Now() // a real clock: this measures the machine, not the logic
	var once sync.Once
	return func() {
		once.Do(func() {
			held := time.Since(start)
			q.mu.Lock()
			q.hold = max(q.hold+(held-q.hold)/8, time.Millisecond)
			q.handOn()
			idle := q.busy == 0
			q.mu.Unlock()
			if idle && q.onIdle != nil {
				go q.onIdle()
			}
		})
	}
}

// handOn gives a slot to the head of the queue, or frees it. The caller holds q.mu.
func (q *hashQueue) handOn() {
	if front := q.waiting.Front(); front != nil {
		close(q.waiting.Remove(front).(chan struct{}))
		return
	}
	q.busy--
}

// stats returns the slots in use and the logins waiting, for tests.
func (q *hashQueue) stats() (busy, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy, q.waiting.Len()
}

// retrySeconds rounds a wait up to whole seconds, at least 1, for Retry-After.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

package pvesim

import (
	"container/heap"
	"sync"
	"time"
)

// clock is the emulator's time. Emulated time either runs Speed times faster
// than real time, or (manual mode) moves only when a test calls Advance. Every
// delayed thing the emulator does — a guest powering off, a migration writing its
// next progress line, a lock wait timing out — is an event on this clock, fired in
// order of its emulated due time, one at a time. The callback receives the due
// time, so log timestamps are exact even when the real timer fires late.
type clock struct {
	mu        sync.Mutex
	manual    bool
	speed     float64
	real      func() time.Time
	baseReal  time.Time // real time at the last rebase
	baseEmu   time.Time // emulated time at the last rebase
	manualNow time.Time
	events    eventQueue
	seq       uint64
	running   bool          // the real-time dispatcher goroutine is active
	wake      chan struct{} // tells the dispatcher the head of the queue changed
}

// event is one scheduled callback.
type event struct {
	at        time.Time
	seq       uint64
	fn        func(at time.Time)
	cancelled bool
	index     int
}

func newClock(manual bool, speed float64, start time.Time, real func() time.Time) *clock {
	if real == nil {
		real = time.Now
	}
	if speed <= 0 {
		speed = 1
	}
	if start.IsZero() {
		start = real()
	}
	start = start.Truncate(time.Second)
	return &clock{
		manual:    manual,
		speed:     speed,
		real:      real,
		baseReal:  real(),
		baseEmu:   start,
		manualNow: start,
		wake:      make(chan struct{}, 1),
	}
}

// Now is the current emulated time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *clock) nowLocked() time.Time {
	if c.manual {
		return c.manualNow
	}
	elapsed := c.real().Sub(c.baseReal)
	return c.baseEmu.Add(time.Duration(float64(elapsed) * c.speed))
}

// realDuration converts an emulated span into real time at the current speed.
func (c *clock) realDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.speed)
}

// SetSpeed changes the multiplier from now on; emulated time does not jump.
func (c *clock) SetSpeed(speed float64) {
	if speed <= 0 {
		return
	}
	c.mu.Lock()
	now := c.nowLocked()
	c.baseReal = c.real()
	c.baseEmu = now
	c.speed = speed
	c.mu.Unlock()
	c.poke()
}

// At schedules fn at emulated time at (or as soon as possible if at has passed).
func (c *clock) At(at time.Time, fn func(at time.Time)) *event {
	c.mu.Lock()
	c.seq++
	e := &event{at: at, seq: c.seq, fn: fn}
	heap.Push(&c.events, e)
	isHead := c.events[0] == e
	start := !c.manual && !c.running
	if start {
		c.running = true
	}
	c.mu.Unlock()
	if start {
		go c.dispatch()
	} else if isHead && !c.manual {
		c.poke()
	}
	return e
}

// Cancel stops an event from firing; cancelling a fired event is a no-op.
func (c *clock) Cancel(e *event) {
	if e == nil {
		return
	}
	c.mu.Lock()
	e.cancelled = true
	c.mu.Unlock()
}

func (c *clock) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dispatch fires due events in real-time mode. It exits when the queue is
// empty, so an idle emulator holds no goroutine; At starts it again.
func (c *clock) dispatch() {
	for {
		c.mu.Lock()
		for len(c.events) > 0 && c.events[0].cancelled {
			heap.Pop(&c.events)
		}
		if len(c.events) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		head := c.events[0]
		now := c.nowLocked()
		if !head.at.After(now) {
			heap.Pop(&c.events)
			c.mu.Unlock()
			head.fn(head.at)
			continue
		}
		wait := c.realDuration(head.at.Sub(now))
		c.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.wake:
			t.Stop()
		}
	}
}

// Advance moves a manual clock forward by d, firing every event that falls due
// on the way, in order, each at its own time. Callbacks may schedule further
// events; those that fall inside the window fire too.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.manualNow.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		for len(c.events) > 0 && c.events[0].cancelled {
			heap.Pop(&c.events)
		}
		if len(c.events) == 0 || c.events[0].at.After(target) {
			c.manualNow = target
			c.mu.Unlock()
			return
		}
		e := heap.Pop(&c.events).(*event)
		if e.at.After(c.manualNow) {
			c.manualNow = e.at
		}
		c.mu.Unlock()
		e.fn(e.at)
	}
}

// pending reports how many live events are queued (for tests).
func (c *clock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.events {
		if !e.cancelled {
			n++
		}
	}
	return n
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].seq < q[j].seq
	}
	return q[i].at.Before(q[j].at)
}
func (q eventQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *eventQueue) Push(x any) {
	e := x.(*event)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *eventQueue) Pop() any {
	old := *q
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*q = old[:n-1]
	return e
}

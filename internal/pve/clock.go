package pve

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// PVE's clock and vmgate's are not the same clock. A task's start time in a
// UPID or a task list is PVE's; vmgate may be minutes off it (issue 17 (docs/history.md): a
// search for the task of a lost write compared vmgate's time with PVE's and
// missed the task when vmgate ran more than 5 s ahead). The client therefore
// measures how far PVE's clock is from its own on every answer it reads
// anyway: PVE's Date header. No extra request is made.
//
// One answer bounds the offset: PVE wrote Date (whole seconds, truncated)
// between our request leaving (sent) and its answer arriving (recv), so
//
//	date − recv ≤ offset < date + 1 s − sent
//
// Answers keep narrowing that interval (their intersection) while they agree;
// one that does not fit (a clock stepped on either side) starts a new
// interval, and so does any answer once the interval is older than
// offsetRefresh, so that a slow drift is followed. The estimate is the
// interval's middle: within half a second and half a round trip of the truth.

// offsetRefresh is how long an interval is narrowed before a new one starts.
const offsetRefresh = time.Minute

// clockOffset is the client's estimate of PVE's clock minus its own.
type clockOffset struct {
	last atomic.Pointer[string] // the Date value last used: it changes once a second

	mu     sync.Mutex
	lo, hi time.Duration
	since  time.Time // when the interval began (our clock)
	known  bool
}

// observe takes one answer's Date header, sent and received on the client's
// clock. Answers carrying the Date already used are skipped without a lock or
// a parse: at thousands of answers a second that keeps the cost at one atomic
// load and a string compare.
func (o *clockOffset) observe(date string, sent, recv time.Time) {
	if date == "" || recv.Before(sent) {
		return
	}
	if last := o.last.Load(); last != nil && *last == date {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if last := o.last.Load(); last != nil && *last == date {
		return
	}
	d, err := http.ParseTime(date)
	if err != nil {
		return // not PVE's format: says nothing
	}
	seen := date // a copy of its own: taking date's address would move every call's to the heap
	o.last.Store(&seen)
	lo, hi := d.Sub(recv), d.Add(time.Second).Sub(sent)
	if !o.known || recv.Sub(o.since) > offsetRefresh || lo >= o.hi || hi <= o.lo {
		o.lo, o.hi, o.since, o.known = lo, hi, recv, true
		return
	}
	o.lo, o.hi = max(o.lo, lo), min(o.hi, hi)
}

// get returns the estimate and whether any answer has been seen.
func (o *clockOffset) get() (time.Duration, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.known {
		return 0, false
	}
	return o.lo + (o.hi-o.lo)/2, true
}

// ClockOffset is how far the cluster's clock is ahead of the client's (Config.Now):
// PVE's time is the client's plus the offset (negative when PVE is behind). It
// is measured on the Date header of every answer the client reads, and known
// once one has been read; until then it is 0 and ok is false. Compare PVE's
// times (a UPID's StartTime, a task list's) with PVETime, not with the local
// clock.
func (c *Client) ClockOffset() (offset time.Duration, ok bool) { return c.offset.get() }

// PVETime converts a time on the client's clock to the cluster's clock, as
// well as the client knows the offset (unchanged while it knows none).
func (c *Client) PVETime(t time.Time) time.Time {
	off, _ := c.offset.get()
	return t.Add(off)
}

// PVENow is the cluster's time now, as well as the client knows it: its own
// clock (Config.Now) plus ClockOffset. ok is false while no answer was read.
func (c *Client) PVENow() (now time.Time, ok bool) {
	off, ok := c.offset.get()
	return c.now().Add(off), ok
}

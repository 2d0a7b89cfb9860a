package auth

import (
	"runtime/debug"
	"sync"
	"time"
)

// reclaimEvery bounds how often hashing going idle returns memory to the system.
const reclaimEvery = time.Second

// reclaimAbove is the argon2 memory (KiB) from which hashes are worth a reclaim:
// production's 19 MiB are, tests' few KiB are not.
const reclaimAbove = 4 << 10

// reclaimer gives argon2's memory back to the system once hashing goes idle. Each
// hash allocates Argon2.Memory (19 MiB by default) and drops it at once, but the
// garbage collector paces itself on the heap the hash made live: without a
// collection the dead buffers stay resident until the heap has grown to about
// twice that, and a process that serves reads at a few MiB of live heap would sit
// at 60 MiB and more after a handful of logins (issue 8 (docs/history.md): RSS ≤ 64 MiB). One
// collection, and the freed pages handed back, when the last hash ends — at most
// once a second, the last of a burst always (a reclaim asked for too soon runs
// when the second is up) — keep the resident size near what the reads need.
type reclaimer struct {
	free  func() // debug.FreeOSMemory; tests count instead
	now   func() time.Time
	after func(time.Duration, func()) // time.AfterFunc; tests run it by hand

	mu      sync.Mutex
	last    time.Time
	pending bool // a reclaim is scheduled
}

func newReclaimer() *reclaimer {
	return &reclaimer{free: debug.FreeOSMemory, now: time.Now,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// idle is hashQueue.onIdle.
func (r *reclaimer) idle() {
	r.mu.Lock()
	if r.pending {
		r.mu.Unlock()
		return
	}
	if wait := r.last.Add(reclaimEvery).Sub(r.now()); wait > 0 {
		r.pending = true
		r.mu.Unlock()
		r.after(wait, r.run)
		return
	}
	r.last = r.now()
	r.mu.Unlock()
	r.free()
}

// run is a scheduled reclaim.
func (r *reclaimer) run() {
	r.mu.Lock()
	r.pending, r.last = false, r.now()
	r.mu.Unlock()
	r.free()
}

package auth

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// seenWriter keeps the last use of sessions (LastSeenAt) and of API tokens
// (LastUsedAt, LastUsedFrom) roughly current without a store write per request:
// Authenticate notes each use, and one credential's use is written at most once
// per interval on this replica (login and refresh write a session's themselves).
// The check on the request path is a lock-free map read; the writes go to the
// store in the background, batched, one batch at a time. The last use is what
// lists show, nothing decides on it, so a write that fails is logged and dropped,
// and so are uses noted while more than max credentials wait to be written.
type seenWriter struct {
	interval time.Duration
	max      int
	write    func(ctx context.Context, uses []lastUse) error
	log      *slog.Logger
	timeout  time.Duration

	last    sync.Map // session id → *atomic.Int64, unix nanoseconds of the last use queued
	tracked atomic.Int64

	mu       sync.Mutex
	pending  map[string]lastUse
	flushing bool
	idle     *sync.Cond // signalled when a flush ends with nothing pending
}

// lastUse is one credential's use, as seenWriter hands it to the store.
type lastUse struct {
	ID   string
	At   time.Time
	From string // the client address (API tokens); "" for sessions
}

func newSeenWriter(interval time.Duration, max int, write func(context.Context, []lastUse) error,
	log *slog.Logger) *seenWriter {
	w := &seenWriter{interval: interval, max: max, write: write, log: log, timeout: 5 * time.Second,
		pending: map[string]lastUse{}}
	w.idle = sync.NewCond(&w.mu)
	return w
}

// note records that credential sid was used at now from address from.
func (w *seenWriter) note(sid string, now time.Time, from string) {
	ns := now.UnixNano()
	v, ok := w.last.Load(sid)
	if !ok {
		if w.tracked.Load() >= int64(w.max) {
			w.sweep(now)
		}
		var loaded bool
		v, loaded = w.last.LoadOrStore(sid, new(atomic.Int64))
		if !loaded {
			w.tracked.Add(1)
		}
	}
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && ns-prev < int64(w.interval) {
		return
	}
	if !last.CompareAndSwap(prev, ns) {
		return // another request of the same session queued it just now
	}
	w.mu.Lock()
	if len(w.pending) < w.max {
		w.pending[sid] = lastUse{ID: sid, At: now, From: from}
	}
	start := !w.flushing
	w.flushing = true
	w.mu.Unlock()
	if start {
		go w.flush()
	}
}

// seen marks sid as written at now by the caller itself (login, refresh).
func (w *seenWriter) seen(sid string, now time.Time) {
	v, loaded := w.last.LoadOrStore(sid, new(atomic.Int64))
	if !loaded {
		w.tracked.Add(1)
	}
	v.(*atomic.Int64).Store(now.UnixNano())
}

// flush writes what is pending until nothing is.
func (w *seenWriter) flush() {
	for {
		w.mu.Lock()
		if len(w.pending) == 0 {
			w.flushing = false
			w.idle.Broadcast()
			w.mu.Unlock()
			return
		}
		batch := make([]lastUse, 0, len(w.pending))
		for _, u := range w.pending {
			batch = append(batch, u)
		}
		w.pending = map[string]lastUse{}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		if err := w.write(ctx, batch); err != nil {
			w.log.LogAttrs(ctx, slog.LevelWarn, "write last uses", slog.Int("credentials", len(batch)),
				slog.String("error", err.Error()))
		}
		cancel()
	}
}

// wait blocks until nothing is pending or being written (tests, shutdown).
func (w *seenWriter) wait() {
	w.mu.Lock()
	for w.flushing {
		w.idle.Wait()
	}
	w.mu.Unlock()
}

// sweep forgets sessions whose last use is older than the interval: their next
// use is written anyway, as if they had never been seen. If that frees too little
// (max sessions all used within the interval), everything is forgotten: the cost
// is one extra write per session.
func (w *seenWriter) sweep(now time.Time) {
	cut := now.Add(-w.interval).UnixNano()
	w.last.Range(func(k, v any) bool {
		if v.(*atomic.Int64).Load() < cut {
			w.last.Delete(k)
			w.tracked.Add(-1)
		}
		return true
	})
	if w.tracked.Load() >= int64(w.max) {
		w.last.Clear()
		w.tracked.Store(0)
	}
}

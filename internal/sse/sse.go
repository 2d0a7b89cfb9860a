// Package sse writes server-sent events (text/event-stream) for the front ends'
// live streams of a task: the JSON API's (internal/httpapi) and the web UI's
// (internal/webui). A Stream sends its headers once, writes each event with a
// deadline of its own (so a stream may outlive the server's WriteTimeout, a stuck
// client still cannot hold a write forever), flushes at once, and writes a comment
// every ping interval so that proxies keep a quiet stream open. It knows no task
// and no session: what to send, and when to stop, is the caller's. A Limiter
// (limits.go), shared by the front ends, caps how many streams one user and one
// session hold open at once (docs/security.md item 34), counting them by the ids it is
// given.
package sse

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// WriteTimeout bounds each write of a stream.
const WriteTimeout = 30 * time.Second

// Stream is one open event stream. Its methods are safe for concurrent use (the
// pinger writes beside the caller).
type Stream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	mu   sync.Mutex
	stop chan struct{}
	once sync.Once
	ping sync.WaitGroup // the pinger, which Close waits for
}

// Start answers 200 with the stream's headers (no caching, no proxy buffering)
// and pings every ping until Close or ctx ends. alive, when not nil, is asked
// before each ping; false stops the pinging (the caller ends the stream).
func Start(ctx context.Context, w http.ResponseWriter, ping time.Duration, alive func() bool) *Stream {
	s := &Stream{w: w, rc: http.NewResponseController(w), stop: make(chan struct{})}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	s.mu.Lock()
	w.WriteHeader(http.StatusOK)
	s.mu.Unlock()
	s.ping.Go(func() {
		t := time.NewTicker(ping)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if (alive != nil && !alive()) || s.Write(": ping\n\n") != nil {
					return
				}
			}
		}
	})
	return s
}

// Event writes one event with its data (one line: JSON has no raw newline).
func (s *Stream) Event(name, data string) error {
	return s.Write("event: " + name + "\ndata: " + data + "\n\n")
}

// Retry writes one event with a reconnection delay for the client (the SSE retry
// field) before its data.
func (s *Stream) Retry(name string, retry time.Duration, data string) error {
	return s.Write(fmt.Sprintf("event: %s\nretry: %d\ndata: %s\n\n", name, retry.Milliseconds(), data))
}

// Write writes text as it is and flushes it.
func (s *Stream) Write(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rc.SetWriteDeadline(time.Now().Add(WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := fmt.Fprint(s.w, text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// Close stops the pinging and waits until the pinger has stopped, so that nothing
// writes to the stream once its handler returns (which ends the stream). The
// handler must call it before it returns.
func (s *Stream) Close() {
	s.once.Do(func() { close(s.stop) })
	s.ping.Wait()
}

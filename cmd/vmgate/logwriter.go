package main

import (
	"io"
	"sync"
	"time"
)

// logFlushEvery is how long a log line may wait in logWriter's buffer.
const logFlushEvery = 100 * time.Millisecond

// logBufferLimit is how much logWriter holds before it writes at once.
const logBufferLimit = 64 << 10

// logWriter buffers the server's log lines and writes them out at most every
// logFlushEvery (or once logBufferLimit bytes wait), instead of one write
// system call per line: with one line per request that was a third of a cheap
// request's system calls (issue 8). slog hands each record over in one Write,
// so lines are never torn. Close writes what is left; a crash loses at most the
// last logFlushEvery of lines.
type logWriter struct {
	out io.Writer

	mu     sync.Mutex
	buf    []byte
	err    error // the first write error: reported by the next Write
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

func newLogWriter(out io.Writer) *logWriter {
	w := &logWriter{out: out, buf: make([]byte, 0, logBufferLimit), stop: make(chan struct{}), done: make(chan struct{})}
	go w.flusher()
	return w
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.out.Write(p)
	}
	if err := w.err; err != nil {
		w.err = nil
		return 0, err
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= logBufferLimit {
		w.flushLocked()
	}
	return len(p), nil
}

func (w *logWriter) flushLocked() {
	if len(w.buf) == 0 {
		return
	}
	if _, err := w.out.Write(w.buf); err != nil && w.err == nil {
		w.err = err
	}
	w.buf = w.buf[:0]
}

func (w *logWriter) flusher() {
	defer close(w.done)
	t := time.NewTicker(logFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.mu.Lock()
			w.flushLocked()
			w.mu.Unlock()
		}
	}
}

// Close writes what is buffered; later writes go straight out.
func (w *logWriter) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.flushLocked()
	err := w.err
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	return err
}

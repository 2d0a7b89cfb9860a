package main

import (
	"io"
	"sync"
	"time"
)

// logFlushEvery is how long a log line may wait in logWriter's buffer.
const logFlushEvery = 100 * time.Millisecond

// logBufferLimit is how much logWriter holds before it asks for a write at once;
// logBufferMax is how much it holds before a Write waits for one (backpressure:
// lines are never dropped).
const (
	logBufferLimit = 64 << 10
	logBufferMax   = 4 << 20
)

// logWriter buffers the server's log lines and writes them out at most every
// logFlushEvery (sooner once logBufferLimit bytes wait), instead of one write
// system call per line: with one line per request that was a third of a cheap
// request's system calls (issue 8 (docs/history.md)). slog hands each record over in one Write, so
// lines are never torn. The output is written outside the lock, from a buffer
// swapped out whole, so a request logging its line never waits for the disk
// unless logBufferMax bytes are already waiting. Close writes what is left; a
// crash loses at most the last logFlushEvery of lines.
type logWriter struct {
	out io.Writer

	mu      sync.Mutex
	buf     []byte
	spare   []byte
	err     error      // the first write error: reported by the next Write
	drained *sync.Cond // signalled after each write of the output
	closed  bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	wmu  sync.Mutex // one write of the output at a time, in order
}

func newLogWriter(out io.Writer) *logWriter {
	w := &logWriter{out: out, buf: make([]byte, 0, logBufferLimit), spare: make([]byte, 0, logBufferLimit),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.drained = sync.NewCond(&w.mu)
	go w.flusher()
	return w
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed { // no flusher any more: written at once, after what was buffered
		w.buf = append(w.buf, p...)
		w.mu.Unlock()
		w.flush()
		return len(p), nil
	}
	if err := w.err; err != nil {
		w.err = nil
		w.mu.Unlock()
		return 0, err
	}
	for len(w.buf) >= logBufferMax && !w.closed {
		w.drained.Wait()
	}
	w.buf = append(w.buf, p...)
	full := len(w.buf) >= logBufferLimit
	w.mu.Unlock()
	if full {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// flush writes what is buffered, outside the lock.
func (w *logWriter) flush() {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	out := w.buf
	w.buf, w.spare = w.spare[:0], nil
	w.mu.Unlock()
	var err error
	if len(out) > 0 {
		_, err = w.out.Write(out)
	}
	w.mu.Lock()
	if err != nil && w.err == nil {
		w.err = err
	}
	if cap(out) <= logBufferMax {
		w.spare = out[:0]
	}
	w.drained.Broadcast()
	w.mu.Unlock()
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
		case <-w.wake:
		}
		w.flush()
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
	w.drained.Broadcast()
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	w.flush()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

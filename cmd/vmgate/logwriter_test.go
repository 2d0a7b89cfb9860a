package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer safe for the flusher and the test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int // writes
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	return l.b.Write(p)
}

// TestLogWriter: every line reaches the output whole and in order once the
// writer is closed, in fewer writes than lines, and writes after Close go
// straight through.
func TestLogWriter(t *testing.T) {
	t.Parallel()
	out := &lockedBuffer{}
	w := newLogWriter(out)
	var want strings.Builder
	const lines = 5000
	for i := range lines {
		line := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i%200))
		want.WriteString(line)
		if n, err := w.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("write %d: %d %v", i, n, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	got, writes := out.b.String(), out.n
	out.mu.Unlock()
	if got != want.String() {
		t.Fatalf("the output is not the lines in order (%d bytes, want %d)", len(got), want.Len())
	}
	if writes >= lines {
		t.Fatalf("%d writes for %d lines: nothing was buffered", writes, lines)
	}
	w.Write([]byte("after\n"))
	if !strings.HasSuffix(out.b.String(), "after\n") {
		t.Fatal("a line written after Close was held back")
	}
}

// gatedWriter blocks every write until its gate is open, as a stalled disk would.
type gatedWriter struct {
	gate    chan struct{}
	entered chan struct{}
	lockedBuffer
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.lockedBuffer.Write(p)
}

// A line logged while the output is stalled is buffered, not waited for: requests
// never wait for the disk (below logBufferMax).
func TestLogWriterDoesNotWaitForTheOutput(t *testing.T) {
	t.Parallel()
	out := &gatedWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	w := newLogWriter(out)
	big := strings.Repeat("b", logBufferLimit) + "\n"
	w.Write([]byte(big)) // asks for a write at once
	<-out.entered        // the flusher is stuck in the output
	for i := range 100 {
		w.Write([]byte(fmt.Sprintf("line %d\n", i))) // returns: buffered
	}
	close(out.gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := out.b.String()
	if !strings.HasPrefix(got, big) || !strings.HasSuffix(got, "line 99\n") || strings.Count(got, "line ") != 100 {
		t.Fatalf("output of %d bytes lacks lines or their order", len(got))
	}
}

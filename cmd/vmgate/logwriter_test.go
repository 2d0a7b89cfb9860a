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

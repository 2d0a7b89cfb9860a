package sse

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStream: the headers once, events as written, pings while quiet, and no ping
// once alive says no.
func TestStream(t *testing.T) {
	t.Parallel()
	pinged := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls := 0
		s := Start(r.Context(), w, time.Millisecond, func() bool {
			calls++
			if calls == 2 {
				close(pinged)
				return false
			}
			return true
		})
		defer s.Close()
		if err := s.Event("task", `{"a":1}`); err != nil {
			t.Error(err)
		}
		<-release
		s.Retry("shutdown", 2*time.Second, "{}")
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-store" ||
		resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("headers %v", resp.Header)
	}
	select {
	case <-pinged:
	case <-time.After(10 * time.Second):
		t.Fatal("no ping")
	}
	close(release)
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	pings := 0
	for sc.Scan() {
		switch sc.Text() {
		case "":
		case ": ping": // whenever the ticker fired
			pings++
		default:
			lines = append(lines, sc.Text())
		}
	}
	got := strings.Join(lines, "|")
	if got != "event: task|data: {\"a\":1}|event: shutdown|retry: 2000|data: {}" || pings != 1 {
		t.Fatalf("stream: %s, %d pings", got, pings)
	}
}

// TestStreamStopsPinging: Close and the request's end both stop the pinger.
func TestStreamStopsPinging(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	w := httptest.NewRecorder()
	s := Start(ctx, w, time.Hour, nil)
	s.Close()
	s.Close() // twice is fine
	cancel()
	if err := s.Event("end", "{}"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(w.Body.String(), "event: end\ndata: {}\n\n") {
		t.Fatalf("body %q", w.Body.String())
	}
}

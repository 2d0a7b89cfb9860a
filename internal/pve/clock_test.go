package pve

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestClockOffsetFromDate: the client learns PVE's clock from the Date header
// of the answers it reads, whatever side is ahead, to within the header's
// second and the round trip; before any answer it knows nothing.
func TestClockOffsetFromDate(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 3, 14, 10, 0, 0, 250e6, time.UTC)
	for _, offset := range []time.Duration{-60 * time.Second, -10 * time.Second, 0, 10 * time.Second, 60 * time.Second} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			clock := &testClock{now: local}
			srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
				// PVE's clock: ours plus the offset, the header truncated to the second.
				w.Header().Set("Date", clock.Now().Add(offset).UTC().Format(http.TimeFormat))
				clock.Advance(300 * time.Millisecond) // the answer's way back
				writeData(w, []any{})
			})
			c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}, Now: clock.Now})
			if _, ok := c.ClockOffset(); ok {
				t.Fatal("an offset is known before any answer")
			}
			for range 3 {
				if _, err := c.Nodes(context.Background()); err != nil {
					t.Fatal(err)
				}
				clock.Advance(700 * time.Millisecond)
			}
			got, ok := c.ClockOffset()
			if !ok || got < offset-time.Second || got > offset+time.Second {
				t.Fatalf("ClockOffset = %v, %v; want %v ± 1 s", got, ok, offset)
			}
			at := clock.Now()
			if d := c.PVETime(at).Sub(at.Add(offset)); d < -time.Second || d > time.Second {
				t.Errorf("PVETime is %v off PVE's clock", d)
			}
		})
	}
}

// TestClockOffsetFollowsAStep: a clock that steps (an NTP correction on either
// side) is followed at the next answer that does not fit; an unparsable Date
// says nothing.
func TestClockOffsetFollowsAStep(t *testing.T) {
	t.Parallel()
	var o clockOffset
	t0 := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	date := func(pve time.Time) string { return pve.UTC().Format(http.TimeFormat) }
	o.observe(date(t0.Add(5*time.Second)), t0, t0.Add(10*time.Millisecond))
	if got, _ := o.get(); got < 4*time.Second || got > 6*time.Second {
		t.Fatalf("offset %v, want about 5 s", got)
	}
	t1 := t0.Add(2 * time.Second)
	o.observe(date(t1.Add(-30*time.Second)), t1, t1.Add(10*time.Millisecond))
	if got, _ := o.get(); got < -31*time.Second || got > -29*time.Second {
		t.Fatalf("after a step: offset %v, want about -30 s", got)
	}
	o.observe("yesterday", t1.Add(time.Second), t1.Add(2*time.Second))
	if got, _ := o.get(); got < -31*time.Second || got > -29*time.Second {
		t.Fatalf("an unparsable Date moved the offset to %v", got)
	}
}

// TestNotSent: only what proves that PVE never got a write counts as not
// sent; an ambiguous write or an answer of PVE's never does.
func TestNotSent(t *testing.T) {
	t.Parallel()
	refused := &Error{StatusCode: 500, Message: "VM 100 is locked (backup)"}
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no endpoint", &NotSentError{Err: &UnavailableError{Method: "POST", Path: "/p"}}, true},
		{"deadline before sending", &NotSentError{Err: ErrTimeout}, true},
		{"bad argument", ErrInvalidArgument, true},
		{"595", &NodeOfflineError{Node: "pve1", Err: &Error{StatusCode: 595}}, true},
		{"596", &NodeOfflineError{Node: "pve1", Err: &Error{StatusCode: 596}}, false},
		{"ambiguous", &AmbiguousError{Err: ErrTimeout}, false},
		{"ambiguous, 596", &AmbiguousError{Err: &NodeOfflineError{Node: "pve1", Err: &Error{StatusCode: 596}}}, false},
		{"PVE refused", refused, false},
		{"bad answer", ErrBadResponse, false},
	} {
		if got := NotSent(tt.err); got != tt.want {
			t.Errorf("%s: NotSent(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestWriteToNoEndpointIsNotSent: a write no endpoint could take is marked as
// never sent, and still reads as unavailable.
func TestWriteToNoEndpointIsNotSent(t *testing.T) {
	t.Parallel()
	c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: deadAddr(t)}}})
	_, err := c.Start(context.Background(), VMOn("pve1", 100), StartOptions{})
	if !NotSent(err) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v: want not sent and unavailable", err)
	}
	_, err = c.Nodes(context.Background())
	var ns *NotSentError
	if errors.As(err, &ns) {
		t.Errorf("a read is marked not sent: %v", err)
	}
}

// BenchmarkClockOffsetObserve is the cost the offset adds to every answer, from
// many callers at once: almost every answer carries the Date seen before.
func BenchmarkClockOffsetObserve(b *testing.B) {
	var o clockOffset
	t0 := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	date := t0.Format(http.TimeFormat)
	o.observe(date, t0, t0.Add(time.Millisecond))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.observe(date, t0, t0.Add(time.Millisecond))
		}
	})
}

package dbclock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/errs"
)

// TestOffsets: the database's clock -60, -10, +10 and +60 s off this
// replica's (injected): the gauge shows how far the replica is ahead, 10 s is
// logged as a warning and leaves the replica ready, 60 s is logged as an error
// and makes Ready fail with clock_skew.
func TestOffsets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		db    time.Duration // the database's clock less the replica's
		level string
		ready bool
	}{
		{-60 * time.Second, "ERROR", false},
		{-10 * time.Second, "WARN", true},
		{10 * time.Second, "WARN", true},
		{60 * time.Second, "ERROR", false},
		{2 * time.Second, "", true},
	} {
		t.Run(tt.db.String(), func(t *testing.T) {
			t.Parallel()
			var log bytes.Buffer
			m := New(Config{Measure: func(context.Context) (time.Duration, error) { return tt.db, nil },
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err := m.Ready(context.Background()); err != nil {
				t.Fatalf("ready before any measurement: %v", err)
			}
			if err := m.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			if off, ok := m.Offset(); !ok || off != -tt.db {
				t.Errorf("Offset = %v, %v; want %v", off, ok, -tt.db)
			}
			if got := gauge(t, m); got != (-tt.db).Seconds() {
				t.Errorf("gauge = %v, want %v", got, (-tt.db).Seconds())
			}
			if tt.level == "" && log.Len() != 0 || tt.level != "" && !strings.Contains(log.String(), "level="+tt.level) {
				t.Errorf("log %q, want level %q", log.String(), tt.level)
			}
			err := m.Ready(context.Background())
			if e, ok := errs.As(err); tt.ready != (err == nil) || !tt.ready && (!ok || e.Kind != errs.Unavailable ||
				e.Reason != ReasonClockSkew || e.RetryAfter <= 0) {
				t.Errorf("Ready = %v, want ready %v", err, tt.ready)
			}
		})
	}
}

// TestRunMeasuresEveryInterval: Run measures at once and again each time its
// clock says the interval has passed; a failed measurement keeps the last
// offset; a clock set right makes the replica ready again.
func TestRunMeasuresEveryInterval(t *testing.T) {
	t.Parallel()
	answers := []error{nil, errors.New("database gone"), nil}
	offsets := []time.Duration{45 * time.Second, 0, time.Second}
	waiting := make(chan time.Duration) // Run waits: its measurement is kept
	ticks := make(chan time.Time)
	m := New(Config{
		Measure: func(context.Context) (time.Duration, error) {
			off, err := offsets[0], answers[0]
			offsets, answers = offsets[1:], answers[1:]
			return off, err
		},
		After: func(d time.Duration) <-chan time.Time {
			waiting <- d
			return ticks
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	step := func(want bool) {
		t.Helper()
		if d := <-waiting; d != DefaultEvery {
			t.Errorf("waits %v between measurements, want %v", d, DefaultEvery)
		}
		if err := m.Ready(ctx); (err == nil) != want {
			t.Fatalf("Ready = %v, want ready %v", err, want)
		}
	}
	step(false) // measured at start: 45 s
	ticks <- time.Time{}
	step(false) // the measurement failed: the last offset stays
	ticks <- time.Time{}
	step(true) // set right
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// gauge reads the Monitor's one series as a scrape would.
func gauge(t *testing.T, m *Monitor) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "vmgate_db_clock_offset_seconds" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, %v", mfs, err)
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}

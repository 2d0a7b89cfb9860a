package audit

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

func newTrail(t *testing.T, now time.Time) (*Trail, store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(st, Options{Now: func() time.Time { return now }}), st
}

// TestRecordAttribution: Record fills what the record leaves empty from the request
// facts, the actor as a whole or not at all; Append writes the record as given.
func TestRecordAttribution(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tr, _ := newTrail(t, now)
	ctx := WithRequest(context.Background(), "198.51.100.7", "req-9", "curl/8")
	ctx = WithActor(ctx, 7, "ann@example.org", "sess-1")
	if f := FactsFrom(ctx); f.UserAgent != "curl/8" || f.Address != "198.51.100.7" || f.UserID != 7 {
		t.Fatalf("facts %+v", f)
	}
	// The request's actor fills a record that names nobody.
	tr.Record(ctx, store.AuditRecord{Action: "x.attributed", Result: "ok"})
	// A record about someone else keeps its user; the address and request id are
	// still the request's.
	tr.Record(ctx, store.AuditRecord{Action: "x.other", UserID: 9, UserEmail: "bob@example.org", Result: "ok"})
	// A record that names the caller is completed with the caller's session.
	tr.Record(ctx, store.AuditRecord{Action: "x.self", UserID: 7, Result: "ok"})
	// Append writes as given.
	tr.Append(ctx, store.AuditRecord{Action: "x.given", UserID: 9, Address: "192.0.2.1", Result: "ok"})
	// No facts, nothing filled.
	tr.Record(context.Background(), store.AuditRecord{Action: "x.bare", Result: "ok"})

	recs, err := tr.List(context.Background(), 10, 0)
	if err != nil || len(recs) != 5 {
		t.Fatalf("list: %d records (%v)", len(recs), err)
	}
	want := []Entry{
		{Action: "x.bare", Result: "ok"},
		{Action: "x.given", UserID: 9, Address: "192.0.2.1", Result: "ok"},
		{Action: "x.self", UserID: 7, UserEmail: "ann@example.org", SessionID: "sess-1", Address: "198.51.100.7",
			RequestID: "req-9", Result: "ok"},
		{Action: "x.other", UserID: 9, UserEmail: "bob@example.org", Address: "198.51.100.7", RequestID: "req-9", Result: "ok"},
		{Action: "x.attributed", UserID: 7, UserEmail: "ann@example.org", SessionID: "sess-1", Address: "198.51.100.7",
			RequestID: "req-9", Result: "ok"},
	}
	for i, got := range recs {
		if !got.At.Equal(now) {
			t.Errorf("%s: at %v, want %v", got.Action, got.At, now)
		}
		if got.Count != 1 {
			t.Errorf("%s: count %d", got.Action, got.Count)
		}
		got.ID, got.At, got.Count = 0, time.Time{}, 0
		if got != want[i] {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
}

// TestRecordOutlivesCancellation: the action happened, so its record is written even
// when the request has gone.
func TestRecordOutlivesCancellation(t *testing.T) {
	t.Parallel()
	tr, st := newTrail(t, time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tr.Record(ctx, store.AuditRecord{Action: "x.late", Result: "ok"})
	if recs, _ := st.ListAudit(context.Background(), 1, 0); len(recs) != 1 || recs[0].Action != "x.late" {
		t.Errorf("records %+v", recs)
	}
	var nilTrail *Trail
	nilTrail.Record(ctx, store.AuditRecord{Action: "x.dropped"}) // must not panic
}

func TestResult(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{errs.R(errs.Conflict, "last_admin", "x"), "last_admin"},
		{errs.E(errs.NotFound, "x"), "not_found"},
		{errors.New("boom"), "internal"},
	} {
		if got := Result(c.err); got != c.want {
			t.Errorf("Result(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fullTrail is a trail on a SQLite store whose disk the ballast fills.
func fullTrail(t *testing.T, o Options) (*Trail, store.Store, *storetest.Ballast, *lockedBuffer) {
	t.Helper()
	st, ballast := storetest.OpenFullableSQLite(t, filepath.Join(t.TempDir(), "audit.db"), 8, store.Options{})
	logs := &lockedBuffer{}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return New(st, o), st, ballast, logs
}

// big is a record whose params need pages of their own: a full database has
// no room for it.
func big(action string, at time.Time) store.AuditRecord {
	return store.AuditRecord{Action: action, At: at, Result: "ok", Params: `{"pad":"` + strings.Repeat("p", 6000) + `"}`}
}

// actions lists the store's records, oldest first.
func actions(t *testing.T, st store.Store) []string {
	t.Helper()
	recs, err := st.AuditRange(context.Background(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Action)
	}
	return out
}

// TestSpoolKeepsRecordsWhileTheStoreIsFull: while the store's disk is full,
// records are kept in memory (and logged in full), a flush leaves them while
// the store still refuses, and once it takes writes they are written in the
// order they happened, each with its own time, behind them a record that came
// meanwhile; the chain verifies.
func TestSpoolKeepsRecordsWhileTheStoreIsFull(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	tr, st, ballast, logs := fullTrail(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	tr.Append(ctx, store.AuditRecord{Action: "x.before", Result: "ok"})
	ballast.Fill()
	for i, a := range []string{"x.first", "x.second", "x.third"} {
		tr.Append(ctx, big(a, now.Add(time.Duration(i)*time.Second)))
	}
	if n := tr.Spooled(); n != 3 {
		t.Fatalf("%d records spooled, want 3", n)
	}
	if n := strings.Count(logs.String(), "audit record kept in memory until the store takes writes again"); n != 3 {
		t.Errorf("%d spooled records logged, want 3:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "x.second") || !strings.Contains(logs.String(), "disk is full") {
		t.Errorf("the log lacks the record or why it was kept:\n%s", logs)
	}
	tr.Flush(ctx)
	if n := tr.Spooled(); n != 3 {
		t.Fatalf("after a flush into the full store: %d spooled, want 3", n)
	}
	ballast.Empty()
	// The store takes writes again, but a new record waits behind the spooled ones.
	tr.Append(ctx, store.AuditRecord{Action: "x.meanwhile", Result: "ok"})
	if n := tr.Spooled(); n != 4 {
		t.Fatalf("a record that came while others waited: %d spooled, want 4", n)
	}
	tr.Flush(ctx)
	if n := tr.Spooled(); n != 0 {
		t.Fatalf("after the store recovered: %d spooled", n)
	}
	want := []string{"x.before", "x.first", "x.second", "x.third", "x.meanwhile"}
	if got := actions(t, st); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	recs, _ := st.AuditRange(ctx, 0, 100)
	if !recs[2].At.Equal(now.Add(time.Second)) {
		t.Errorf("x.second was written with %v, want its own time %v", recs[2].At, now.Add(time.Second))
	}
	if v, err := Verify(ctx, st, nil); err != nil || v.Rows != 5 {
		t.Errorf("the chain after the spool: %+v %v", v, err)
	}
}

// TestSpoolIsBounded: a full spool keeps the oldest records; the others are
// counted (how many, when, which actions), logged, and written as one
// audit.dropped record after the kept ones once the store takes writes.
func TestSpoolIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	tr, st, ballast, logs := fullTrail(t, Options{Now: func() time.Time { return now }, MaxSpool: 2})
	ctx := context.Background()
	ballast.Fill()
	for i, a := range []string{"x.a", "x.b", "vm.start", "vm.start", "auth.login_failed"} {
		tr.Append(ctx, big(a, now.Add(time.Duration(i)*time.Minute)))
	}
	if n := tr.Spooled(); n != 2 {
		t.Fatalf("%d spooled, want the bound 2", n)
	}
	if n := strings.Count(logs.String(), "audit record lost"); n != 3 {
		t.Errorf("%d lost records logged, want 3:\n%s", n, logs)
	}
	ballast.Empty()
	tr.Flush(ctx)
	want := []string{"x.a", "x.b", "audit.dropped"}
	if got := actions(t, st); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	recs, _ := st.AuditRange(ctx, 0, 100)
	dropped := recs[2]
	var p struct {
		Count   int64            `json:"count"`
		From    time.Time        `json:"from"`
		To      time.Time        `json:"to"`
		Actions map[string]int64 `json:"actions"`
	}
	if err := json.Unmarshal([]byte(dropped.Params), &p); err != nil {
		t.Fatal(err)
	}
	if dropped.Count != 3 || dropped.Result != "failed" || p.Count != 3 || !p.From.Equal(now.Add(2*time.Minute)) ||
		!p.To.Equal(now.Add(4*time.Minute)) || p.Actions["vm.start"] != 2 || p.Actions["auth.login_failed"] != 1 {
		t.Errorf("the audit.dropped record: %+v, params %+v", dropped, p)
	}
}

// TestSpoolAtStop: a trail that stops while the store still takes no writes
// logs every record it could not write.
func TestSpoolAtStop(t *testing.T) {
	t.Parallel()
	tr, _, ballast, logs := fullTrail(t, Options{FlushEvery: time.Hour})
	ballast.Fill()
	tr.Append(context.Background(), big("x.unwritten", time.Time{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- tr.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "audit record not written before the stop") || !strings.Contains(logs.String(), "x.unwritten") {
		t.Errorf("the stop did not log the spooled record:\n%s", logs)
	}
	if n := tr.Spooled(); n != 0 {
		t.Errorf("%d records still spooled after the stop", n)
	}
}

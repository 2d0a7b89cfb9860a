package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// clock is an injected, movable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func foldTrail(t *testing.T, o Options) (*Trail, store.Store, *clock) {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	o.Now = c.Now
	return New(st, o), st, c
}

func denied(session, target string) store.AuditRecord {
	return store.AuditRecord{Action: "access.denied", UserID: 5, UserEmail: "e@example.org", SessionID: session,
		Target: target, Result: "denied", Reason: "this action needs the admin role", Address: "192.0.2.5", RequestID: "r-" + target}
}

// counts sums the Count of every record of action by session.
func counts(t *testing.T, tr *Trail, action string) (rows map[string]int, total map[string]int64) {
	t.Helper()
	recs, err := tr.Query(context.Background(), Filter{Action: action, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rows, total = map[string]int{}, map[string]int64{}
	for _, r := range recs {
		rows[r.SessionID]++
		total[r.SessionID] += r.Count
	}
	return rows, total
}

// TestDenialsAreFolded (docs/security.md item 30): one session's denials in one minute cost
// two rows, the first at once and one counting the rest when the minute is over;
// every denial is counted, none is dropped.
func TestDenialsAreFolded(t *testing.T) {
	t.Parallel()
	tr, _, c := foldTrail(t, Options{})
	ctx := context.Background()
	for i := range 100 {
		tr.Append(ctx, denied("s1", fmt.Sprint("GET /api/v1/users/", i%3)))
		if i%10 == 0 {
			tr.Append(ctx, denied("s2", "GET /api/v1/audit"))
		}
	}
	// A denial without a session (nobody logged in) is not folded.
	for range 3 {
		tr.Append(ctx, store.AuditRecord{Action: "access.denied", Result: "denied"})
	}
	rows, total := counts(t, tr, "access.denied")
	if rows["s1"] != 1 || total["s1"] != 1 || rows["s2"] != 1 || rows[""] != 3 {
		t.Fatalf("during the minute: rows %v, counts %v", rows, total)
	}
	// Nothing is due within the minute.
	c.add(30 * time.Second)
	for _, row := range tr.folds.due(c.Now(), false) {
		t.Errorf("written early: %+v", row)
	}
	c.add(31 * time.Second)
	for _, row := range tr.folds.due(c.Now(), false) {
		tr.write(ctx, row)
	}
	rows, total = counts(t, tr, "access.denied")
	if rows["s1"] != 2 || total["s1"] != 100 || rows["s2"] != 2 || total["s2"] != 10 {
		t.Fatalf("after the minute: rows %v, counts %v; want 2 rows each, counting 100 and 10", rows, total)
	}
	if tr.folds.pending() != 0 {
		t.Errorf("%d folds kept after their minute", tr.folds.pending())
	}
	recs, _ := tr.Query(ctx, Filter{Action: "access.denied", Limit: 10})
	var folded Entry
	for _, r := range recs {
		if r.SessionID == "s1" && r.Count > 1 {
			folded = r
		}
	}
	var p struct {
		Folded  bool      `json:"folded"`
		From    time.Time `json:"from"`
		To      time.Time `json:"to"`
		Targets []string  `json:"targets"`
	}
	if err := json.Unmarshal([]byte(folded.Params), &p); err != nil {
		t.Fatal(err)
	}
	if folded.Target != "(several)" || !p.Folded || len(p.Targets) != 3 || !p.To.Equal(p.From.Add(time.Minute)) ||
		folded.UserID != 5 || folded.Reason == "" || folded.RequestID == "" || folded.Address != "192.0.2.5" {
		t.Errorf("folded row %+v, params %+v", folded, p)
	}
	// The next minute starts a new first row.
	tr.Append(ctx, denied("s1", "GET /api/v1/users"))
	if rows, _ := counts(t, tr, "access.denied"); rows["s1"] != 3 {
		t.Errorf("the next minute's first denial: %d rows", rows["s1"])
	}
}

// TestFoldsAreBoundedAndFlushed (docs/security.md item 30): a full table writes its oldest count early; Flush
// and the end of Run write every count; nothing is lost.
func TestFoldsAreBoundedAndFlushed(t *testing.T) {
	t.Parallel()
	tr, _, c := foldTrail(t, Options{MaxFolds: 2, FlushEvery: time.Hour})
	ctx := context.Background()
	for _, s := range []string{"a", "b"} {
		for range 5 {
			tr.Append(ctx, denied(s, "x"))
		}
		c.add(time.Millisecond)
	}
	tr.Append(ctx, denied("c", "x")) // the table is full: a's count goes first
	if tr.folds.pending() != 2 {
		t.Errorf("%d folds kept, want at most 2", tr.folds.pending())
	}
	_, total := counts(t, tr, "access.denied")
	if total["a"] != 5 || total["b"] != 1 || total["c"] != 1 {
		t.Fatalf("after the table filled: %v", total)
	}
	for range 4 {
		tr.Append(ctx, denied("c", "x"))
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- tr.Run(runCtx) }()
	cancel() // a shutdown
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, total := counts(t, tr, "access.denied"); total["a"] != 5 || total["b"] != 5 || total["c"] != 5 {
		t.Fatalf("after the shutdown: %v, want 5 each", total)
	}
	if tr.folds.pending() != 0 {
		t.Errorf("%d folds left after the shutdown", tr.folds.pending())
	}
}

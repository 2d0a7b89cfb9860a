package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// wantChain walks every audit row oldest first and fails t unless each row's
// chain value is AuditChainValue of its contents and its prev is the row
// before's (the checkpoint's for the first), ids have no gaps, and the head is
// the last row. It returns the rows.
func wantChain(t *testing.T, s store.Store, what string) []store.AuditRecord {
	t.Helper()
	c, err := s.AuditChain(t.Context())
	ok(t, err, what+": chain state")
	var all []store.AuditRecord
	for after := int64(0); ; {
		page, err := s.AuditRange(t.Context(), after, 7)
		ok(t, err, what+": range")
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
	prev, id := c.CheckpointChain, c.CheckpointID
	for _, a := range all {
		if a.ID != id+1 || a.Prev != prev || a.Chain != store.AuditChainValue(a) {
			t.Fatalf("%s: row %d (after %d): prev %q chain %q, want prev %q chain %q", what, a.ID, id, a.Prev, a.Chain,
				prev, store.AuditChainValue(a))
		}
		prev, id = a.Chain, a.ID
	}
	if c.HeadID != id || c.HeadChain != prev {
		t.Fatalf("%s: head %d %q, want %d %q", what, c.HeadID, c.HeadChain, id, prev)
	}
	return all
}

// testAuditChain: every append links to the row before it through its chain
// value; the canonical form covers every field.
func testAuditChain(t *testing.T, s store.Store) {
	ctx := t.Context()
	c, err := s.AuditChain(ctx)
	ok(t, err, "chain of an empty store")
	same(t, c, store.AuditChainState{}, "chain of an empty store")
	var recs []store.AuditRecord
	for i := range 5 {
		r, err := s.AppendAudit(ctx, store.AuditRecord{At: at(time.Duration(i) * time.Second), Action: "access.denied",
			UserID: 3, UserEmail: "ü@example.com", SessionID: "s", Result: "denied", Reason: "needs the admin role",
			Target: "GET /api/v1/users", Count: int64(i), Address: "2001:db8::1", RequestID: fmt.Sprint("r", i)})
		ok(t, err, "append")
		recs = append(recs, r)
	}
	same(t, recs[0].Prev, "", "the first row's prev")
	same(t, recs[1].Count, int64(1), "a count below 1")
	same(t, recs[4].Count, int64(4), "a count of 4")
	all := wantChain(t, s, "after five appends")
	same(t, all, recs, "rows as appended")

	// Every field is in the canonical form: changing any changes the value.
	base := recs[2]
	for name, edit := range map[string]func(*store.AuditRecord){
		"id": func(a *store.AuditRecord) { a.ID++ }, "at": func(a *store.AuditRecord) { a.At = a.At.Add(time.Millisecond) },
		"user": func(a *store.AuditRecord) { a.UserID++ }, "email": func(a *store.AuditRecord) { a.UserEmail += "x" },
		"session": func(a *store.AuditRecord) { a.SessionID = "t" }, "address": func(a *store.AuditRecord) { a.Address = "" },
		"request": func(a *store.AuditRecord) { a.RequestID = "r9" }, "action": func(a *store.AuditRecord) { a.Action = "x" },
		"target": func(a *store.AuditRecord) { a.Target = "" }, "cluster": func(a *store.AuditRecord) { a.ClusterID = 1 },
		"node": func(a *store.AuditRecord) { a.Node = "n" }, "vmid": func(a *store.AuditRecord) { a.VMID = 100 },
		"params": func(a *store.AuditRecord) { a.Params = "{}" }, "result": func(a *store.AuditRecord) { a.Result = "ok" },
		"reason": func(a *store.AuditRecord) { a.Reason = "" }, "upid": func(a *store.AuditRecord) { a.UPID = "U" },
		"count": func(a *store.AuditRecord) { a.Count = 9 }, "prev": func(a *store.AuditRecord) { a.Prev = "" },
		// Netstrings keep field borders: moving a byte from one field to the next is a change.
		"border": func(a *store.AuditRecord) { a.UserEmail, a.SessionID = a.UserEmail+"s", "" },
	} {
		a := base
		edit(&a)
		if store.AuditChainValue(a) == base.Chain {
			t.Errorf("changing %s keeps the chain value", name)
		}
	}
}

// testAuditChainRace: appends racing from many goroutines (many connections of
// the pool on PostgreSQL) still form one chain without gaps.
func testAuditChainRace(t *testing.T, s store.Store) {
	const n = 24
	race(t, s, n, func(i int) {
		if _, err := s.AppendAudit(t.Context(), store.AuditRecord{Action: "x.race", Target: fmt.Sprint(i)}); err != nil {
			t.Errorf("append %d: %v", i, err)
		}
	})
	if all := wantChain(t, s, "after racing appends"); len(all) != n {
		t.Fatalf("%d rows, want %d", len(all), n)
	}
}

// testAuditQuery: filters by actor, action, cluster, result and time, and pages
// by id, newest first.
func testAuditQuery(t *testing.T, s store.Store) {
	ctx := t.Context()
	var mu sync.Mutex
	ids := map[string][]int64{}
	add := func(key string, a store.AuditRecord) {
		r, err := s.AppendAudit(ctx, a)
		ok(t, err, "append")
		mu.Lock()
		ids[key] = append([]int64{r.ID}, ids[key]...) // newest first
		mu.Unlock()
	}
	for i := range 4 {
		d := time.Duration(i) * time.Hour
		add("u1", store.AuditRecord{At: at(d), UserID: 1, Action: "vm.start", ClusterID: 7, Result: "ok"})
		add("u2", store.AuditRecord{At: at(d + time.Minute), UserID: 2, Action: "access.denied", ClusterID: 8, Result: "denied"})
	}
	q := func(f store.AuditFilter) []int64 {
		t.Helper()
		recs, err := s.QueryAudit(ctx, f)
		ok(t, err, "query")
		out := []int64{}
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return out
	}
	same(t, q(store.AuditFilter{UserID: 1}), ids["u1"], "by user")
	same(t, q(store.AuditFilter{Action: "access.denied"}), ids["u2"], "by action")
	same(t, q(store.AuditFilter{ClusterID: 7}), ids["u1"], "by cluster")
	same(t, q(store.AuditFilter{Result: "denied", UserID: 2}), ids["u2"], "by result and user")
	same(t, q(store.AuditFilter{UserID: 1, Result: "denied"}), []int64{}, "nothing matches")
	same(t, q(store.AuditFilter{UserID: 1, From: at(time.Hour), To: at(3 * time.Hour)}), ids["u1"][1:3], "from (inclusive) to (exclusive)")
	same(t, q(store.AuditFilter{UserID: 2, Limit: 2}), ids["u2"][:2], "first page")
	same(t, q(store.AuditFilter{UserID: 2, Limit: 2, BeforeID: ids["u2"][1]}), ids["u2"][2:], "next page")
}

// testAuditPrune: retention deletes the oldest rows only while they are old,
// moves the checkpoint to the last one deleted, and what is left still chains
// from it, appends after the prune included.
func testAuditPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i := range 10 {
		_, err := s.AppendAudit(ctx, store.AuditRecord{At: ago(time.Duration(20-i) * 24 * time.Hour), Action: "x.old"})
		ok(t, err, "append")
	}
	// A fresh row in the middle stops the pruning there: the trail loses only its head.
	_, err := s.AppendAudit(ctx, store.AuditRecord{At: ago(time.Hour), Action: "x.fresh"})
	ok(t, err, "append")
	_, err = s.AppendAudit(ctx, store.AuditRecord{At: ago(30 * 24 * time.Hour), Action: "x.skewed"})
	ok(t, err, "append")
	before := wantChain(t, s, "before the prune")

	res, err := s.Prune(ctx, pruneNow, store.PruneOptions{AuditOlderThan: 15 * 24 * time.Hour, Batch: 2})
	ok(t, err, "prune")
	same(t, res.Audit, int64(5), "audit rows pruned") // 20 to 16 days old; 15 days is not older than 15 days
	left := wantChain(t, s, "after the prune")
	same(t, left, before[5:], "rows left")
	c, err := s.AuditChain(ctx)
	ok(t, err, "chain state")
	same(t, c.CheckpointID, before[4].ID, "checkpoint id")
	same(t, c.CheckpointChain, before[4].Chain, "checkpoint chain value")

	_, err = s.AppendAudit(ctx, store.AuditRecord{Action: "x.after"})
	ok(t, err, "append after the prune")
	wantChain(t, s, "after an append")
	res, err = s.Prune(ctx, pruneNow, store.PruneOptions{AuditOlderThan: 15 * 24 * time.Hour})
	ok(t, err, "prune again")
	same(t, res.Audit, int64(0), "audit rows pruned again")

	// Everything old goes; the checkpoint then is the head, and the chain goes on.
	res, err = s.Prune(ctx, pruneNow.Add(365*24*time.Hour), store.PruneOptions{AuditOlderThan: time.Hour})
	ok(t, err, "prune everything")
	if all := wantChain(t, s, "after pruning everything"); len(all) != 0 {
		t.Fatalf("%d rows left", len(all))
	}
	_, err = s.AppendAudit(ctx, store.AuditRecord{Action: "x.new"})
	ok(t, err, "append to an empty trail")
	wantChain(t, s, "after the first append to an empty trail")
}

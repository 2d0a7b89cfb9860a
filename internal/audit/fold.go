package audit

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// maxFoldTargets is how many distinct targets a folded row names; the rest are
// counted in moreTargets.
const maxFoldTargets = 8

// foldable reports whether rec is a denial of an authenticated session: the kind
// of record a logged-in user can provoke on every request.
func foldable(rec store.AuditRecord) bool {
	return rec.SessionID != "" && (rec.Action == "access.denied" || rec.Result == "denied")
}

type foldKey struct {
	session string
	action  string
}

// fold counts the denials of one session and action in one window after the
// first, which was written at once.
type fold struct {
	window  time.Time // the window's start
	last    store.AuditRecord
	count   int64 // denials folded, not written yet
	targets []string
	more    int    // distinct targets past maxFoldTargets (an upper bound: not deduplicated)
	seq     uint64 // when the fold began, among the folder's folds: breaks ties between windows
}

// folder keeps the folds; see the package doc. It is safe for concurrent use.
type folder struct {
	window time.Duration
	max    int

	mu    sync.Mutex
	folds map[foldKey]*fold
	seq   uint64 // the last fold's seq
}

func newFolder(window time.Duration, max int) *folder {
	return &folder{window: window, max: max, folds: map[foldKey]*fold{}}
}

// add takes a foldable record. It returns whether rec itself is to be written now
// (the first of its session's window), and the folded rows to write first (a
// window of the same key that is over, or the oldest fold when the table is full).
func (f *folder) add(rec store.AuditRecord) (write bool, flushed []store.AuditRecord) {
	key := foldKey{rec.SessionID, rec.Action}
	win := rec.At.UTC().Truncate(f.window)
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.folds[key]; ok {
		if cur.window.Equal(win) {
			cur.count++
			cur.last = rec
			cur.addTarget(rec.Target)
			return false, nil
		}
		if row, ok := cur.row(f.window); ok {
			flushed = append(flushed, row)
		}
		delete(f.folds, key)
	}
	for len(f.folds) >= f.max {
		oldest := f.oldest()
		if row, ok := f.folds[oldest].row(f.window); ok {
			flushed = append(flushed, row)
		}
		delete(f.folds, oldest)
	}
	f.seq++
	f.folds[key] = &fold{window: win, last: rec, seq: f.seq}
	return true, flushed
}

// oldest is the key of the fold with the earliest window; the caller holds mu.
// oldest is the fold of the earliest window; among folds of one window, the one
// begun first. Never map order: which count is written early must not be luck.
func (f *folder) oldest() foldKey {
	var (
		key  foldKey
		best *fold
	)
	for k, v := range f.folds {
		if best == nil || v.window.Before(best.window) || (v.window.Equal(best.window) && v.seq < best.seq) {
			key, best = k, v
		}
	}
	return key
}

func (d *fold) addTarget(target string) {
	for _, t := range d.targets {
		if t == target {
			return
		}
	}
	if len(d.targets) < maxFoldTargets {
		d.targets = append(d.targets, target)
	} else {
		d.more++
	}
}

// row is the counted row of the fold, when it folded anything: the last denial's
// attribution (its request id and address among them), its time, and Count. Its
// target is the one target, or "(several)" with all of them in params.
func (d *fold) row(window time.Duration) (store.AuditRecord, bool) {
	if d.count == 0 {
		return store.AuditRecord{}, false
	}
	rec := d.last
	rec.ID, rec.Count = 0, d.count
	if len(d.targets) > 1 || d.more > 0 {
		rec.Target = "(several)"
	}
	p := struct {
		Folded      bool      `json:"folded"`
		From        time.Time `json:"from"`
		To          time.Time `json:"to"`
		Targets     []string  `json:"targets"`
		MoreTargets int       `json:"moreTargets,omitempty"`
	}{true, d.window, d.window.Add(window), d.targets, d.more}
	b, _ := json.Marshal(p)
	rec.Params = string(b)
	return rec, true
}

// due removes and returns the rows of the folds whose window is over at now (all
// of them when all), and forgets the folds that folded nothing.
func (f *folder) due(now time.Time, all bool) []store.AuditRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rows []store.AuditRecord
	for k, d := range f.folds {
		if !all && now.Before(d.window.Add(f.window)) {
			continue
		}
		if row, ok := d.row(f.window); ok {
			rows = append(rows, row)
		}
		delete(f.folds, k)
	}
	return rows
}

// pending is how many folds are kept (tests, gauges).
func (f *folder) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.folds)
}

// Run writes the folded rows of windows that are over, and the spooled records
// the store could not take before, every Options.FlushEvery, until ctx ends;
// then it writes every fold still counting (Flush), so a shutdown loses no
// count, and logs the spooled records the store still does not take.
func (t *Trail) Run(ctx context.Context) error {
	if t == nil {
		return nil
	}
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.Flush(context.WithoutCancel(ctx))
			t.abandonSpool(context.WithoutCancel(ctx))
			return nil
		case <-tick.C:
			t.flushSpool(ctx)
			for _, row := range t.folds.due(t.now(), false) {
				t.write(ctx, row)
			}
		}
	}
}

// Flush writes the spooled records the store takes now, then every fold's
// count, whether its window is over or not.
func (t *Trail) Flush(ctx context.Context) {
	if t == nil {
		return
	}
	t.flushSpool(ctx)
	for _, row := range t.folds.due(t.now(), true) {
		t.write(ctx, row)
	}
}

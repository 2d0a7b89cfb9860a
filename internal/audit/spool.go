package audit

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// The spool (issue 17 (docs/history.md), docs/decisions/0036): a record the store cannot take
// now — its disk is full, it is read-only, it does not answer: an error of kind
// Unavailable — is kept in memory, in order, and written when the store takes
// writes again (Run tries every FlushEvery; Flush tries at once). While records
// wait, newer ones queue behind them, so the chain keeps the order in which
// things happened; each keeps its own time.
//
// The spool is bounded (Options.MaxSpool records, Options.MaxSpoolBytes); when
// it is full a record is not kept, and the records lost are counted, their
// time span and actions with them, and written as one "audit.dropped" record
// after the spooled ones: a gap in the trail is always said. Every spooled
// record is also logged in full when it is spooled, so that a process killed
// before the store recovers leaves it in the log; a graceful stop tries the
// store once more and logs what it could not write.

// Defaults of the spool's bounds.
const (
	DefaultMaxSpool      = 10_000
	DefaultMaxSpoolBytes = 16 << 20
)

// spool holds the records waiting for the store; it is safe for concurrent use.
type spool struct {
	max, maxBytes int

	mu    sync.Mutex
	recs  []store.AuditRecord
	bytes int
	lost  lostRecords
	// flushing serialises the writers of the spool, so records leave in order.
	flushing sync.Mutex
}

// lostRecords counts the records a full spool could not keep.
type lostRecords struct {
	count    int64
	from, to time.Time
	actions  map[string]int64
}

// maxLostActions bounds the actions an audit.dropped record names; the rest are
// counted under "(other)".
const maxLostActions = 32

// size is about what a record costs the spool.
func size(r store.AuditRecord) int {
	return 256 + len(r.UserEmail) + len(r.SessionID) + len(r.Action) + len(r.Node) + len(r.Target) + len(r.Params) +
		len(r.Result) + len(r.Reason) + len(r.UPID) + len(r.Address) + len(r.RequestID)
}

// held reports whether records wait in the spool.
func (s *spool) held() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs) > 0 || s.lost.count > 0
}

// add keeps rec at the end, or counts it lost when the spool is full; it
// reports whether rec was kept.
func (s *spool) add(rec store.AuditRecord) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := size(rec)
	if len(s.recs) >= s.max || s.bytes+n > s.maxBytes {
		l := &s.lost
		if l.count == 0 || rec.At.Before(l.from) {
			l.from = rec.At
		}
		if rec.At.After(l.to) {
			l.to = rec.At
		}
		l.count++
		if l.actions == nil {
			l.actions = map[string]int64{}
		}
		if _, ok := l.actions[rec.Action]; ok || len(l.actions) < maxLostActions {
			l.actions[rec.Action]++
		} else {
			l.actions["(other)"]++
		}
		return false
	}
	s.recs = append(s.recs, rec)
	s.bytes += n
	return true
}

// len is how many records wait.
func (s *spool) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// first returns the oldest waiting record.
func (s *spool) first() (store.AuditRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recs) == 0 {
		return store.AuditRecord{}, false
	}
	return s.recs[0], true
}

// drop removes the oldest waiting record (written, or never writable).
func (s *spool) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes -= size(s.recs[0])
	s.recs[0] = store.AuditRecord{}
	s.recs = s.recs[1:]
	if len(s.recs) == 0 {
		s.recs = nil // let the backing array go
	}
}

// takeLost returns the record that says how many records were lost, once no
// spooled record waits before it; ok is false when none were lost.
func (s *spool) takeLost(at time.Time) (store.AuditRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lost
	if l.count == 0 || len(s.recs) > 0 {
		return store.AuditRecord{}, false
	}
	s.lost = lostRecords{}
	p, _ := json.Marshal(map[string]any{"count": l.count, "from": l.from.UTC(), "to": l.to.UTC(), "actions": l.actions})
	return store.AuditRecord{At: at, Action: "audit.dropped", Target: "audit", Params: string(p), Result: "failed",
		Reason: "the store took no writes and the audit spool was full: these records were not kept", Count: l.count}, true
}

// putLost gives back a lost count whose record could not be written.
func (s *spool) putLost(rec store.AuditRecord) {
	var p struct {
		From    time.Time        `json:"from"`
		To      time.Time        `json:"to"`
		Actions map[string]int64 `json:"actions"`
	}
	_ = json.Unmarshal([]byte(rec.Params), &p) // written by takeLost
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.lost
	l.count += rec.Count
	if l.from.IsZero() || p.From.Before(l.from) {
		l.from = p.From
	}
	if p.To.After(l.to) {
		l.to = p.To
	}
	if l.actions == nil {
		l.actions = map[string]int64{}
	}
	for a, n := range p.Actions {
		l.actions[a] += n
	}
}

// spoolable reports whether a failed write is the store not taking writes now
// (full, read-only, unreachable), as opposed to a record it will never take.
func spoolable(err error) bool { return errs.KindOf(err) == errs.Unavailable }

// keep spools rec, whose write failed with err (nil: records were waiting
// already), and logs it in full.
func (t *Trail) keep(ctx context.Context, rec store.AuditRecord, err error) {
	why := "records wait for the store before it"
	if err != nil {
		why = err.Error()
	}
	body, _ := json.Marshal(rec)
	if t.spool.add(rec) {
		t.log.LogAttrs(ctx, slog.LevelWarn, "audit record kept in memory until the store takes writes again",
			slog.String("action", rec.Action), slog.String("request_id", rec.RequestID), slog.String("why", why),
			slog.String("record", string(body)))
		return
	}
	t.log.LogAttrs(ctx, slog.LevelError, "audit record lost: the store takes no writes and the audit spool is full",
		slog.String("action", rec.Action), slog.String("request_id", rec.RequestID), slog.String("why", why),
		slog.String("record", string(body)))
}

// flushSpool writes the waiting records in order, until the store refuses one;
// then the count of lost records, if any. A record the store will never take
// (not Unavailable) is logged and dropped, as an unspooled one would be.
func (t *Trail) flushSpool(ctx context.Context) {
	s := t.spool
	s.flushing.Lock()
	defer s.flushing.Unlock()
	ctx = context.WithoutCancel(ctx)
	for {
		rec, ok := s.first()
		if !ok {
			break
		}
		if _, err := t.st.AppendAudit(ctx, rec); err != nil {
			if spoolable(err) {
				return
			}
			t.log.LogAttrs(ctx, slog.LevelError, "audit write failed", slog.String("action", rec.Action),
				slog.String("request_id", rec.RequestID), slog.String("error", err.Error()))
		}
		s.drop()
	}
	if rec, ok := s.takeLost(t.now()); ok {
		if _, err := t.st.AppendAudit(ctx, rec); err != nil {
			if spoolable(err) {
				s.putLost(rec)
				return
			}
			t.log.LogAttrs(ctx, slog.LevelError, "audit write failed", slog.String("action", rec.Action),
				slog.String("error", err.Error()))
		}
	}
}

// abandonSpool logs, at a stop, every record the store never took.
func (t *Trail) abandonSpool(ctx context.Context) {
	for {
		rec, ok := t.spool.first()
		if !ok {
			break
		}
		body, _ := json.Marshal(rec)
		t.log.LogAttrs(ctx, slog.LevelError, "audit record not written before the stop: the store took no writes",
			slog.String("action", rec.Action), slog.String("record", string(body)))
		t.spool.drop()
	}
	if rec, ok := t.spool.takeLost(t.now()); ok {
		t.log.LogAttrs(ctx, slog.LevelError, "audit records lost: the store took no writes and the audit spool was full",
			slog.Int64("count", rec.Count), slog.String("params", rec.Params))
	}
}

// Spooled is how many records wait for the store to take writes again.
func (t *Trail) Spooled() int {
	if t == nil {
		return 0
	}
	return t.spool.len()
}

// Package audit is vmgate's audit trail as the use cases see it: one Trail that
// writes records to the store and lists them for admins, and the request facts that
// travel in a context from an adapter to the use cases.
//
// An adapter (internal/httpapi, later internal/webui) knows who is asking and from
// where; a use case knows what was done and how it ended. The adapter attaches the
// request's facts to the context once (WithRequest, then WithActor after it
// authenticated the caller); the use case builds the record of what it did and
// hands it to Trail.Record, which fills in the actor, session, client address and
// request id from the context. No adapter fills an audit record, and no use case
// needs to be told the client address.
//
// Some records carry their own attribution and are written as given with
// Trail.Append: a task's end names who started it although nobody may be asking
// any more, and a certificate mismatch is noticed by vmgate itself. auth's security
// events go through Record like the use cases' (a failed login names no actor:
// nobody has authenticated).
//
// # What every record holds
//
// The actor (user id and e-mail, none for a failed login or vmgate's own records),
// the actor's session, the client address, the request id, the action, its target,
// the result and the reason for it (Record fills the reason of a result that is
// not "ok" with the result itself when the use case gave none).
//
// # The chain
//
// The store chains the records: each row carries a value over its canonical form
// and the row before's value, and Verify walks the chain and names the first row
// that was changed, inserted or removed. From the row the chain was keyed from on
// (a store's first open with the key file) the value is an HMAC under a key only
// the key file opens (store.AuditChainMAC), before it a SHA-256
// (store.AuditChainValue), so a writer of the database alone cannot rewrite the
// chain consistently (docs/decisions/0042). Retention prunes the oldest rows and
// leaves a checkpoint the rest verifies from.
//
// # Folded denials
//
// A session that is refused again and again (access.denied, or any record whose
// result is "denied") could otherwise add a row per request. The first denial of a
// session and action in each minute is written at once; the ones after it in that
// minute are counted in memory and written as one row whose Count says how many
// it stands for, when the minute is over (Run), on Flush, or when the table of
// counts is full (the oldest first): never dropped silently. See fold.go.
//
// # A store that takes no writes
//
// A record the store cannot take now (its disk is full, it is read-only or
// unreachable) is kept in memory, in order, bounded, and written when the store
// takes writes again; records lost to the bound are counted in an
// "audit.dropped" record. See spool.go.
package audit

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Facts are what an adapter knows of the request a use case runs for.
type Facts struct {
	UserID    int64  // the authenticated caller; 0 before authentication
	UserEmail string // the caller's e-mail as the session knows it
	SessionID string // the caller's session
	Address   string // the client address, after trusted-proxy resolution
	RequestID string // the request id the adapter answers with
	// UserAgent is the client's User-Agent header. It travels with the other facts
	// but is not written yet: store.AuditRecord has no field for it.
	UserAgent string
}

type factsKey struct{}

// WithFacts returns ctx carrying f, replacing any facts it carried.
func WithFacts(ctx context.Context, f Facts) context.Context {
	return context.WithValue(ctx, factsKey{}, f)
}

// WithRequest returns ctx carrying the facts of an unauthenticated request: the
// client address, the request id and the User-Agent.
func WithRequest(ctx context.Context, address, requestID, userAgent string) context.Context {
	f := FactsFrom(ctx)
	f.Address, f.RequestID, f.UserAgent = address, requestID, userAgent
	return WithFacts(ctx, f)
}

// WithActor returns ctx with the authenticated caller added to the facts it carries.
func WithActor(ctx context.Context, userID int64, email, sessionID string) context.Context {
	f := FactsFrom(ctx)
	f.UserID, f.UserEmail, f.SessionID = userID, email, sessionID
	return WithFacts(ctx, f)
}

// FactsFrom returns the facts ctx carries; none gives the zero Facts.
func FactsFrom(ctx context.Context) Facts {
	f, _ := ctx.Value(factsKey{}).(Facts)
	return f
}

// Store is what a Trail needs of the store; every store.Store is one.
type Store interface {
	AppendAudit(ctx context.Context, a store.AuditRecord) (store.AuditRecord, error)
	QueryAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditRecord, error)
}

// Options tune a Trail; the zero Options are fine.
type Options struct {
	Logger *slog.Logger     // where a failed write is reported; default: discard
	Now    func() time.Time // the time of a record that has none; default time.Now
	// FoldWindow is the span over which one session's denials are folded into a
	// counted row (default 1 min).
	FoldWindow time.Duration
	// MaxFolds bounds the sessions whose denials are being counted at once
	// (default 10 000); beyond it the oldest count is written early.
	MaxFolds int
	// FlushEvery is how often Run writes the counts of windows that are over, and
	// tries the store again for the records it could not take (default 10 s).
	FlushEvery time.Duration
	// MaxSpool and MaxSpoolBytes bound the records kept in memory while the
	// store takes no writes (spool.go; defaults DefaultMaxSpool,
	// DefaultMaxSpoolBytes).
	MaxSpool      int
	MaxSpoolBytes int
}

// Trail writes and lists audit records. It is safe for concurrent use. A nil *Trail
// drops every record, so a use case built without one still runs.
type Trail struct {
	st    Store
	log   *slog.Logger
	now   func() time.Time
	folds *folder
	every time.Duration
	spool *spool
}

// New returns the trail kept in st. Run it (in the background) so that folded
// denials are written when their minute is over, and Flush it at shutdown.
func New(st Store, o Options) *Trail {
	t := &Trail{st: st, log: o.Logger, now: o.Now, every: o.FlushEvery}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.every <= 0 {
		t.every = 10 * time.Second
	}
	if o.FoldWindow <= 0 {
		o.FoldWindow = time.Minute
	}
	if o.MaxFolds <= 0 {
		o.MaxFolds = 10_000
	}
	t.folds = newFolder(o.FoldWindow, o.MaxFolds)
	t.spool = &spool{max: o.MaxSpool, maxBytes: o.MaxSpoolBytes}
	if t.spool.max <= 0 {
		t.spool.max = DefaultMaxSpool
	}
	if t.spool.maxBytes <= 0 {
		t.spool.maxBytes = DefaultMaxSpoolBytes
	}
	return t
}

// Record writes rec attributed to the request ctx carries. A record that names
// nobody (no user id, e-mail or session) gets the caller's three; a record that names
// the caller by user id gets the caller's e-mail and session where it has none; a
// record about somebody else keeps its user as it is, so that a record never mixes
// two people. An empty address and request id are the request's. A zero At is now.
//
// A failed write is never returned: the action being audited has happened (or
// failed) already, and the caller's answer must not depend on the audit store.
// A record the store cannot take now (full, read-only, unreachable) is kept in
// memory and written when it can (spool.go); any other failure is logged. The
// write outlives ctx's cancellation for the same reason.
func (t *Trail) Record(ctx context.Context, rec store.AuditRecord) {
	if t == nil {
		return
	}
	f := FactsFrom(ctx)
	switch {
	case rec.UserID == 0 && rec.UserEmail == "" && rec.SessionID == "":
		rec.UserID, rec.UserEmail, rec.SessionID = f.UserID, f.UserEmail, f.SessionID
	case rec.UserID != 0 && rec.UserID == f.UserID:
		if rec.UserEmail == "" {
			rec.UserEmail = f.UserEmail
		}
		if rec.SessionID == "" {
			rec.SessionID = f.SessionID
		}
	}
	if rec.Address == "" {
		rec.Address = f.Address
	}
	if rec.RequestID == "" {
		rec.RequestID = f.RequestID
	}
	t.Append(ctx, rec)
}

// Append writes rec as given (a zero At is now), for records that carry their own
// attribution or none; see the package doc. A result other than "ok" without a
// reason gets the result as its reason. A repeated denial of one session may be
// folded into a counted row (see the package doc). Failures are logged as with
// Record.
func (t *Trail) Append(ctx context.Context, rec store.AuditRecord) {
	if t == nil {
		return
	}
	if rec.At.IsZero() {
		rec.At = t.now()
	}
	if rec.Reason == "" && rec.Result != "ok" {
		rec.Reason = rec.Result
	}
	if foldable(rec) {
		write, flushed := t.folds.add(rec)
		for _, f := range flushed {
			t.write(ctx, f)
		}
		if !write {
			return
		}
	}
	t.write(ctx, rec)
}

// write stores rec. While records wait in the spool it joins them, behind; a
// write the store cannot take now is spooled; any other failure is logged.
func (t *Trail) write(ctx context.Context, rec store.AuditRecord) {
	if t.spool.held() {
		t.keep(ctx, rec, nil)
		return
	}
	if _, err := t.st.AppendAudit(context.WithoutCancel(ctx), rec); err != nil {
		if spoolable(err) {
			t.keep(ctx, rec, err)
			return
		}
		t.log.LogAttrs(ctx, slog.LevelError, "audit write failed", slog.String("action", rec.Action),
			slog.String("request_id", rec.RequestID), slog.String("error", err.Error()))
	}
}

// Entry is one audit record as an admin reads it.
type Entry struct {
	ID        int64
	At        time.Time
	UserID    int64
	UserEmail string
	SessionID string
	Action    string
	ClusterID int64
	Node      string
	VMID      int64
	Target    string
	Params    string // JSON
	Result    string
	Reason    string
	UPID      string
	Address   string
	RequestID string
	Count     int64 // how many events the record stands for (more than 1: folded denials)
}

// Filter selects records for Query; zero fields do not filter.
type Filter struct {
	UserID    int64  // the actor
	Action    string // exact
	ClusterID int64
	Result    string // exact
	From, To  time.Time
	Before    int64 // paging: only records with a smaller id (0: from the newest)
	Limit     int   // default 50, at most 1000
}

// List returns up to limit records, newest first, with ids below before (0: from the
// newest).
func (t *Trail) List(ctx context.Context, limit int, before int64) ([]Entry, error) {
	return t.Query(ctx, Filter{Limit: limit, Before: before})
}

// Query returns the records f selects, newest first.
func (t *Trail) Query(ctx context.Context, f Filter) ([]Entry, error) {
	recs, err := t.st.QueryAudit(ctx, store.AuditFilter{UserID: f.UserID, Action: f.Action, ClusterID: f.ClusterID,
		Result: f.Result, From: f.From, To: f.To, BeforeID: f.Before, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(recs))
	for _, a := range recs {
		out = append(out, Entry{ID: a.ID, At: a.At, UserID: a.UserID, UserEmail: a.UserEmail, SessionID: a.SessionID,
			Action: a.Action, ClusterID: a.ClusterID, Node: a.Node, VMID: a.VMID, Target: a.Target, Params: a.Params,
			Result: a.Result, Reason: a.Reason, UPID: a.UPID, Address: a.Address, RequestID: a.RequestID, Count: a.Count})
	}
	return out, nil
}

// Reason is a record's reason for the error an action ended with: "" for nil, the
// client-safe message of an *errs.Error, "internal error" for anything else.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errs.As(err); ok {
		return e.Message
	}
	return "internal error"
}

// Result is a record's result for the error an action ended with: "ok" for nil, the
// error's reason for an *errs.Error, "internal" for anything else.
func Result(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := errs.As(err); ok {
		return e.ReasonOrDefault()
	}
	return "internal"
}

// Params renders v as a record's params (JSON); "" if it cannot be rendered.
func Params(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

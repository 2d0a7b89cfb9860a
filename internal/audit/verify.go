package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// ChainReader is what Verify reads; every store.Store is one.
type ChainReader interface {
	AuditChain(ctx context.Context) (store.AuditChainState, error)
	AuditRange(ctx context.Context, after int64, limit int) ([]store.AuditRecord, error)
}

// Verdict is what Verify found of an intact chain.
type Verdict struct {
	Rows         int64  // rows walked
	FirstID      int64  // the oldest row (0 when none)
	HeadID       int64  // the newest row, as the chain's head says
	HeadChain    string // its chain value: record it elsewhere to detect a rewritten chain later
	CheckpointID int64  // the last row retention pruned (0: none)
	// KeyedFrom is the first row chained with the audit key, checked with the key
	// file (0: the chain is not keyed, and a writer of the database alone could
	// have rewritten it consistently). The rows before it verify by the unkeyed
	// rule and are anchored by it.
	KeyedFrom int64
	// KeyedAt is when the chain was keyed: the time of the row that begins the
	// keyed chain (store.ChainKeyedAction), zero when retention pruned it.
	KeyedAt time.Time
}

// The kinds of break Verify names.
const (
	Changed  = "changed"  // a row's contents (or its link) no longer match its chain value
	Inserted = "inserted" // a row that was not appended through the chain
	Removed  = "removed"  // rows that were appended are missing
	// Rekeyed: the record of where the keyed chain begins, or the sealed key, was
	// changed or removed in the database (to pass keyed rows off as unkeyed ones).
	Rekeyed = "rekeyed"
)

// ErrKeyFileNeeded is Verify's error for a keyed chain when it was given no key
// file: the keyed rows cannot be checked without it.
var ErrKeyFileNeeded = errors.New("the audit chain is keyed: verifying it needs vmgate's key file (--secret-key-file)")

// ChainBreak is the first place the chain does not hold.
type ChainBreak struct {
	Kind string // Changed, Inserted, Removed or Rekeyed
	// ID is the row named: the changed or inserted row, or for Removed the first
	// missing id (FromID to ToID are missing).
	ID           int64
	FromID, ToID int64 // Removed: the missing ids; Rekeyed: FromID is where the chain says keying began
	AfterID      int64 // the last row that verified (0: none, or the checkpoint's)
}

// Error implements error.
func (b *ChainBreak) Error() string {
	switch b.Kind {
	case Removed:
		if b.FromID == b.ToID {
			return fmt.Sprintf("audit chain broken: row %d was removed (after row %d)", b.FromID, b.AfterID)
		}
		return fmt.Sprintf("audit chain broken: rows %d to %d were removed (after row %d)", b.FromID, b.ToID, b.AfterID)
	case Inserted:
		return fmt.Sprintf("audit chain broken: row %d was inserted (after row %d)", b.ID, b.AfterID)
	case Rekeyed:
		if b.ID == b.FromID {
			return fmt.Sprintf("audit chain broken: the record of its keying (keyed from row %d) or its sealed key "+
				"was changed in the database", b.FromID)
		}
		return fmt.Sprintf("audit chain broken: row %d began the keyed chain, and the chain's keying record says "+
			"row %d: the keying record was changed in the database", b.ID, b.FromID)
	}
	return fmt.Sprintf("audit chain broken: row %d was changed (after row %d)", b.ID, b.AfterID)
}

// verifyPage is how many rows Verify reads at a time.
const verifyPage = 1000

// Verify walks the audit chain from its checkpoint to its head and returns its
// verdict, or a *ChainBreak naming the first row that was changed, inserted or
// removed (any other error is the store's). A row is sound when its chain value
// is store.AuditChainValue of its contents and its prev is the chain value of the
// row before (of the checkpoint, for the first row after a prune). At the first
// row that is not, the row's own value and its neighbours tell what happened:
//
//   - it links to the row before but its value does not match: changed;
//   - it links to the row before the one before: that one was inserted (with a
//     value computed to fit);
//   - its value matches but it links to nothing seen: the rows between were
//     removed (ids are given without gaps, so the missing ones are named), or,
//     with no id missing, the row before was changed and its value computed anew;
//   - neither matches and the next row links to the row before: inserted;
//     otherwise changed;
//   - a row past the head (that the head has not reached since): inserted.
//
// After the last row, the head must be that row: a head further on means the
// newest rows were removed.
//
// From the row the chain was keyed from (store.AuditChainState.KeyedFrom) on, a
// row's value is an HMAC under the audit key, which only the key file keyFile
// opens: without it no value can be computed for a changed row, so a writer of
// the database alone cannot rewrite the chain consistently, neither the keyed rows
// nor the unkeyed ones before them (the first keyed row's value covers the link to
// the last unkeyed one). The sealed key is bound to where keying began, so moving
// that record to pass keyed rows off as unkeyed makes the key not open: Rekeyed.
// A keyed chain without keyFile is ErrKeyFileNeeded; a key sealed with another key
// file is an error naming both. A chain that is not keyed (no vmgate with a key
// file opened it yet) verifies by the unkeyed rule alone, and a row in it that
// says it began a keyed chain is Rekeyed. Record HeadChain elsewhere (the server
// logs it every hour) and compare it later: that also reveals a chain stripped of
// its keying and rewritten whole.
func Verify(ctx context.Context, r ChainReader, keyFile *seal.Sealer) (Verdict, error) {
	c, err := r.AuditChain(ctx)
	if err != nil {
		return Verdict{}, err
	}
	v := Verdict{HeadID: c.HeadID, HeadChain: c.HeadChain, CheckpointID: c.CheckpointID, KeyedFrom: c.KeyedFrom}
	key, err := auditKey(c, keyFile)
	if err != nil {
		return v, err
	}
	w := walker{expect: c.CheckpointChain, lastID: c.CheckpointID, chain: c, key: key}
	var page []store.AuditRecord
	after := c.CheckpointID
	next := func() (store.AuditRecord, bool, error) {
		if len(page) == 0 {
			var err error
			if page, err = r.AuditRange(ctx, after, verifyPage); err != nil {
				return store.AuditRecord{}, false, err
			}
			if len(page) == 0 {
				return store.AuditRecord{}, false, nil
			}
			after = page[len(page)-1].ID
		}
		a := page[0]
		page = page[1:]
		return a, true, nil
	}
	// A deletion can leave rows with ids at or below the checkpoint; AuditRange
	// starts after it, so they are never read: the checkpoint says they went.
	cur, ok, err := next()
	if err != nil {
		return v, err
	}
	for ok {
		if cur.ID > c.HeadID {
			// Past the head read at the start: appended since (the head has
			// moved over it), or slipped in without moving the head.
			now, err := r.AuditChain(ctx)
			if err != nil {
				return v, err
			}
			if now.HeadID < cur.ID {
				return v, &ChainBreak{Kind: Inserted, ID: cur.ID, AfterID: w.lastID}
			}
			break
		}
		nxt, more, err := next()
		if err != nil {
			return v, err
		}
		var peek *store.AuditRecord
		if more {
			peek = &nxt
		}
		if b := w.step(cur, peek); b != nil {
			return v, b
		}
		if cur.Action == store.ChainKeyedAction {
			if cur.ID != c.KeyedFrom {
				return v, &ChainBreak{Kind: Rekeyed, ID: cur.ID, FromID: c.KeyedFrom, AfterID: w.beforeID}
			}
			v.KeyedAt = cur.At
		}
		if v.FirstID == 0 {
			v.FirstID = cur.ID
		}
		v.Rows++
		cur, ok = nxt, more
	}
	if w.lastID < c.HeadID {
		return v, &ChainBreak{Kind: Removed, ID: w.lastID + 1, FromID: w.lastID + 1, ToID: c.HeadID, AfterID: w.lastID}
	}
	if w.expect != c.HeadChain {
		// The last row verified but is not the head's: the head row itself was
		// changed together with its successors' links, or the head was edited.
		return v, &ChainBreak{Kind: Changed, ID: w.lastID, AfterID: w.beforeID}
	}
	return v, nil
}

// auditKey opens the chain's key with the key file: nil for a chain that is not
// keyed.
func auditKey(c store.AuditChainState, keyFile *seal.Sealer) ([]byte, error) {
	if c.KeyedFrom == 0 {
		return nil, nil
	}
	if keyFile == nil {
		return nil, fmt.Errorf("%w (keyed from row %d)", ErrKeyFileNeeded, c.KeyedFrom)
	}
	id := seal.KeyIDOf(c.KeySealed)
	if id != "" && !keyFile.Holds(id) {
		return nil, fmt.Errorf("the audit chain's key was sealed with key file %s, and the one given is %s: "+
			"give the key file vmgate runs with (--secret-key-file)", id, keyFile.CurrentID())
	}
	key, err := keyFile.Open(c.KeySealed, seal.AuditKeyAAD(strconv.FormatInt(c.KeyedFrom, 10)))
	if err != nil {
		return nil, &ChainBreak{Kind: Rekeyed, ID: c.KeyedFrom, FromID: c.KeyedFrom, AfterID: c.CheckpointID}
	}
	return key, nil
}

// walker is Verify's state: what the next row must link to.
type walker struct {
	expect   string // the chain value the next row's prev must be
	lastID   int64  // the last sound row (or the checkpoint)
	before   string // the expect before the last sound row
	beforeID int64
	seen     bool // a row was accepted

	chain store.AuditChainState // which rows are keyed
	key   []byte                // the audit key, when the chain is keyed
}

func (w *walker) step(a store.AuditRecord, next *store.AuditRecord) *ChainBreak {
	self := store.AuditChainValueIn(w.chain, w.key, a) == a.Chain
	linked := a.Prev == w.expect
	switch {
	case linked && self:
		w.before, w.beforeID = w.expect, w.lastID
		w.expect, w.lastID, w.seen = a.Chain, a.ID, true
		return nil
	case linked:
		return &ChainBreak{Kind: Changed, ID: a.ID, AfterID: w.lastID}
	case w.seen && a.Prev == w.before:
		// a follows the row before the last one: the last one was slipped in
		// (with a value computed to fit, and room made by renumbering a).
		return &ChainBreak{Kind: Inserted, ID: w.lastID, AfterID: w.beforeID}
	case self && a.ID > w.lastID+1:
		return &ChainBreak{Kind: Removed, ID: w.lastID + 1, FromID: w.lastID + 1, ToID: a.ID - 1, AfterID: w.lastID}
	case self && w.seen:
		// a is sound but does not follow the last row, which is sound too: that
		// row was changed and its value computed anew (or a's link was rewritten,
		// which is the rarer edit). The first row that differs is the last one.
		return &ChainBreak{Kind: Changed, ID: w.lastID, AfterID: w.beforeID}
	case self:
		// The first row after the checkpoint does not follow it.
		return &ChainBreak{Kind: Changed, ID: a.ID, AfterID: w.lastID}
	case next != nil && next.Prev == w.expect:
		return &ChainBreak{Kind: Inserted, ID: a.ID, AfterID: w.lastID}
	}
	return &ChainBreak{Kind: Changed, ID: a.ID, AfterID: w.lastID}
}

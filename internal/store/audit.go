package store

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
)

const auditColumns = `id, at, user_id, user_email, session_id, action, cluster_id, node, vmid, target,
	params, result, upid, address, request_id, reason, count, prev, chain`

func scanAudit(sc scanner) (AuditRecord, error) {
	var a AuditRecord
	err := sc.Scan(&a.ID, timeCol{&a.At}, &a.UserID, &a.UserEmail, &a.SessionID, &a.Action, &a.ClusterID,
		&a.Node, &a.VMID, &a.Target, &a.Params, &a.Result, &a.UPID, &a.Address, &a.RequestID, &a.Reason, &a.Count,
		&a.Prev, &a.Chain)
	return a, err
}

// AuditChainVersion names the canonical form AuditChainValue hashes; it is the
// first field hashed, so a later form can never be mistaken for this one.
const AuditChainVersion = "vmgate-audit-1"

// AuditChainKeyedVersion names the form AuditChainMAC authenticates: the same
// fields, under another first field, so that no keyed value can pass for an
// unkeyed one or the reverse.
const AuditChainKeyedVersion = "vmgate-audit-2"

// AuditKeySize is the length of the audit chain's key.
const AuditKeySize = 32

// AuditChainValue is the chain value of a: the lower-case hex SHA-256 of its
// canonical form, which is the concatenation of these fields, each as a netstring
// (its length in bytes in decimal ASCII, ':', the bytes, ','), in this order:
//
//	AuditChainVersion, Prev, ID, At, UserID, UserEmail, SessionID, Address,
//	RequestID, Action, Target, ClusterID, Node, VMID, Params, Result, Reason,
//	UPID, Count
//
// Integers are written in decimal ASCII without a sign for positive values; At is
// written in UTC as RFC 3339 with nanoseconds (time.RFC3339Nano; the store keeps
// milliseconds); strings are their bytes as stored. Prev is the chain value of
// the row before (the checkpoint's after a prune, "" for the first row ever), so
// a row changed, inserted or removed breaks the chain from there on.
// docs/decisions/0016 describes the form for a verifier written elsewhere.
func AuditChainValue(a AuditRecord) string {
	h := sha256.New()
	writeCanonical(h, AuditChainVersion, a)
	return hex.EncodeToString(h.Sum(nil))
}

// AuditChainMAC is the chain value of a row of a keyed chain (from
// AuditChainState.KeyedFrom on): the lower-case hex HMAC-SHA256 under key of the
// canonical form AuditChainValue hashes, with AuditChainKeyedVersion as its first
// field. Without the key, which only the key file opens, no value can be computed
// for a changed row, so a writer of the database alone cannot rewrite the chain
// consistently from any row on (docs/security.md item 30; docs/decisions/0042).
func AuditChainMAC(key []byte, a AuditRecord) string {
	h := hmac.New(sha256.New, key)
	writeCanonical(h, AuditChainKeyedVersion, a)
	return hex.EncodeToString(h.Sum(nil))
}

// AuditChainValueIn is the chain value row a has in a chain in state c: keyed
// with key from c.KeyedFrom on, AuditChainValue before.
func AuditChainValueIn(c AuditChainState, key []byte, a AuditRecord) string {
	if c.Keyed(a.ID) {
		return AuditChainMAC(key, a)
	}
	return AuditChainValue(a)
}

// writeCanonical writes a's canonical form, under version, to h.
func writeCanonical(h hash.Hash, version string, a AuditRecord) {
	var buf []byte
	put := func(s string) {
		buf = strconv.AppendInt(buf[:0], int64(len(s)), 10)
		buf = append(buf, ':')
		buf = append(buf, s...)
		buf = append(buf, ',')
		h.Write(buf)
	}
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, f := range []string{version, a.Prev, i(a.ID), a.At.UTC().Format(time.RFC3339Nano), i(a.UserID),
		a.UserEmail, a.SessionID, a.Address, a.RequestID, a.Action, a.Target, i(a.ClusterID), a.Node, i(a.VMID),
		a.Params, a.Result, a.Reason, a.UPID, i(a.Count)} {
		put(f)
	}
}

// AppendAudit implements Store: in one transaction it locks the chain's head
// (audit_chain's row: FOR UPDATE on PostgreSQL, the write transaction on SQLite),
// gives the record the next id and its chain value (the HMAC under the audit key
// once the chain is keyed: AuditChainValueIn), inserts it and moves the head.
// Appends from every replica are so serialized into one chain. A zero At is now, a
// Count below 1 is 1; ID, Prev and Chain are the store's. A store opened without
// the key file cannot append to a keyed chain (Unavailable).
func (s *sqlStore) AppendAudit(ctx context.Context, a AuditRecord) (AuditRecord, error) {
	a.At = s.stamp(a.At)
	if a.Count < 1 {
		a.Count = 1
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		head, err := s.lockAuditChain(ctx, tx)
		if err != nil {
			return err
		}
		// The id follows the head, and the newest row if one was slipped in past
		// the head (verify names it): an append never fails on a taken id.
		var newest int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM audit`).Scan(&newest); err != nil {
			return err
		}
		a.ID, a.Prev = max(head.HeadID, newest)+1, head.HeadChain
		if err := s.chainKeyFor(head); err != nil {
			return err
		}
		a.Chain = AuditChainValueIn(head, s.auditKey, a)
		if err := s.insertAudit(ctx, tx, a); err != nil {
			return err
		}
		// The events the recorded action causes are written with it (WithOutbox).
		return s.insertOutbox(ctx, tx, outboxOf(ctx))
	})
	if err != nil {
		return AuditRecord{}, s.fail(err, "append audit record", "append audit record")
	}
	return a, nil
}

// insertAudit inserts the chained row a and moves the head to it; the caller
// holds the chain's lock (tx).
func (s *sqlStore) insertAudit(ctx context.Context, tx *sql.Tx, a AuditRecord) error {
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO audit (`+auditColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)`,
		a.ID, s.t(a.At), a.UserID, a.UserEmail, a.SessionID, a.Action, a.ClusterID, a.Node, a.VMID, a.Target,
		a.Params, a.Result, a.UPID, a.Address, a.RequestID, a.Reason, a.Count, a.Prev, a.Chain); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `UPDATE audit_chain SET head_id = $1, head_chain = $2 WHERE id = 1`, a.ID, a.Chain)
	return err
}

// errAuditKeyMissing refuses an append to a keyed chain by a store opened
// without the key file: its row would break the chain.
var errAuditKeyMissing = errs.R(errs.Unavailable, errs.ReasonStoreUnavailable,
	"the audit chain is keyed and this process was started without vmgate's key file (--secret-key-file)")

// chainKeyFor checks that this store can append to the chain in state c: it holds
// the audit key when the chain is keyed, and the chain is keyed from the row it
// was keyed from when this store opened it. A keying record moved since (the
// database edited under a running vmgate) is refused rather than followed.
func (s *sqlStore) chainKeyFor(c AuditChainState) error {
	switch {
	case c.KeyedFrom == 0 && s.auditKeyedFrom == 0:
		return nil
	case c.KeyedFrom > 0 && s.auditKey == nil:
		return errAuditKeyMissing
	case c.KeyedFrom == 0:
		return fmt.Errorf("the audit chain's keying record (keyed from row %d) was removed from the database "+
			"since this vmgate opened it: run vmgate admin audit verify", s.auditKeyedFrom)
	case c.KeyedFrom != s.auditKeyedFrom && s.auditKeyedFrom != 0:
		return fmt.Errorf("the audit chain's keying record changed in the database since this vmgate opened it "+
			"(keyed from row %d, now %d): run vmgate admin audit verify", s.auditKeyedFrom, c.KeyedFrom)
	}
	return nil
}

// ChainKeyedAction is the action of the row that begins a keyed chain: the first
// row chained with the audit key, written when a store first opens the chain with
// the key file. Its time is when the keying happened.
const ChainKeyedAction = "audit.chain_keyed"

// keyAuditChain gives this store the audit chain's key (Options.Sealer): at the
// first open with a key file it draws a random key, seals it bound to the next
// row's id (keyed_from) and appends the row that begins the keyed chain, all in
// one transaction under the chain's lock, so replicas opening together key the
// chain once; later opens unseal the key. A key that does not open with this key
// file (another key file, or the keying record edited) stops the open: appending
// would break the chain.
func (s *sqlStore) keyAuditChain(ctx context.Context, sl *seal.Sealer) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		c, err := s.lockAuditChain(ctx, tx)
		if err != nil {
			return err
		}
		if c.KeyedFrom > 0 {
			key, err := sl.Open(c.KeySealed, seal.AuditKeyAAD(strconv.FormatInt(c.KeyedFrom, 10)))
			if err != nil {
				return fmt.Errorf("open the audit chain's key (keyed from row %d): %w", c.KeyedFrom, err)
			}
			s.auditKey, s.auditKeyedFrom = key, c.KeyedFrom
			return nil
		}
		var newest int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM audit`).Scan(&newest); err != nil {
			return err
		}
		key := make([]byte, AuditKeySize)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("draw the audit chain's key: %w", err)
		}
		c.KeyedFrom = max(c.HeadID, newest) + 1
		sealed, err := sl.Seal(key, seal.AuditKeyAAD(strconv.FormatInt(c.KeyedFrom, 10)))
		if err != nil {
			return fmt.Errorf("seal the audit chain's key: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE audit_chain SET keyed_from = $1, key_sealed = $2 WHERE id = 1`,
			c.KeyedFrom, sealed); err != nil {
			return err
		}
		a := AuditRecord{ID: c.KeyedFrom, At: s.stamp(time.Time{}), Action: ChainKeyedAction, Target: "audit_chain", Result: "ok",
			Reason: "the audit chain is keyed from this row on; the rows before it verify by the unkeyed rule",
			Params: fmt.Sprintf(`{"keyedFrom":%d,"sealKey":%q}`, c.KeyedFrom, sl.CurrentID()), Count: 1, Prev: c.HeadChain}
		a.Chain = AuditChainMAC(key, a)
		if err := s.insertAudit(ctx, tx, a); err != nil {
			return err
		}
		s.auditKey, s.auditKeyedFrom = key, c.KeyedFrom
		return nil
	})
}

// lockAuditChain reads audit_chain's row, locking it until tx ends.
func (s *sqlStore) lockAuditChain(ctx context.Context, tx *sql.Tx) (AuditChainState, error) {
	c, err := scanAuditChain(tx.QueryRowContext(ctx, auditChainQuery+s.d.forUpdate))
	if err != nil {
		return c, fmt.Errorf("lock the audit chain: %w", err)
	}
	return c, nil
}

const auditChainQuery = `SELECT head_id, head_chain, checkpoint_id, checkpoint_chain, checkpoint_at, keyed_from, key_sealed
	FROM audit_chain WHERE id = 1`

func scanAuditChain(sc scanner) (AuditChainState, error) {
	var c AuditChainState
	err := sc.Scan(&c.HeadID, &c.HeadChain, &c.CheckpointID, &c.CheckpointChain, timeCol{&c.CheckpointAt}, &c.KeyedFrom,
		&c.KeySealed)
	return c, err
}

// AuditChain implements Store.
func (s *sqlStore) AuditChain(ctx context.Context) (AuditChainState, error) {
	c, err := scanAuditChain(s.rdb.QueryRowContext(ctx, auditChainQuery))
	if err != nil {
		return c, fmt.Errorf("read the audit chain: %w", err)
	}
	return c, nil
}

// AuditRange implements Store. A limit of 0 or less means 1000; at most 10 000
// come back.
func (s *sqlStore) AuditRange(ctx context.Context, after int64, limit int) ([]AuditRecord, error) {
	return queryAll(ctx, s.rdb, "read audit records", scanAudit,
		`SELECT `+auditColumns+` FROM audit WHERE id > $1 ORDER BY id LIMIT $2`, after, clampLimit(limit, 1000, 10_000))
}

// adoptAuditChain chains, once, the audit rows written before the chain existed
// (migration 0016): in one transaction under the chain's lock, every row in id
// order gets prev and chain, and the head moves to the last. Later starts find
// adopted set and do nothing, so a row whose chain is blanked later is never
// laundered back into the chain.
func (s *sqlStore) adoptAuditChain(ctx context.Context) error {
	// Read first: once adopted, nothing is written, so that a store opens on a
	// database that takes no writes.
	var adopted int
	if err := s.rdb.QueryRowContext(ctx, `SELECT adopted FROM audit_chain WHERE id = 1`).Scan(&adopted); err == nil && adopted == 1 {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := s.lockAuditChain(ctx, tx); err != nil {
			return err
		}
		var adopted int
		if err := tx.QueryRowContext(ctx, `SELECT adopted FROM audit_chain WHERE id = 1`).Scan(&adopted); err != nil {
			return err
		}
		if adopted == 1 {
			return nil
		}
		rows, err := queryAll(ctx, tx, "read audit records", scanAudit, `SELECT `+auditColumns+` FROM audit ORDER BY id`)
		if err != nil {
			return err
		}
		prev := ""
		var headID int64
		for _, a := range rows {
			a.Prev, a.Reason = prev, ""
			a.Count = max(a.Count, 1)
			a.Chain = AuditChainValue(a)
			if _, err := tx.ExecContext(ctx, `UPDATE audit SET prev = $2, chain = $3 WHERE id = $1`, a.ID, a.Prev, a.Chain); err != nil {
				return err
			}
			prev, headID = a.Chain, a.ID
		}
		_, err = tx.ExecContext(ctx, `UPDATE audit_chain SET head_id = $1, head_chain = $2, adopted = 1 WHERE id = 1`, headID, prev)
		return err
	})
}

// ListAudit implements Store. A limit of 0 or less means 50; at most 500 come back.
func (s *sqlStore) ListAudit(ctx context.Context, limit int, before int64) ([]AuditRecord, error) {
	return s.QueryAudit(ctx, AuditFilter{Limit: clampLimit(limit, 50, 500), BeforeID: before})
}

// QueryAudit implements Store.
func (s *sqlStore) QueryAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.BeforeID > 0 {
		add("id < ?", f.BeforeID)
	}
	if f.UserID != 0 {
		add("user_id = ?", f.UserID)
	}
	if f.Action != "" {
		add("action = ?", f.Action)
	}
	if f.ClusterID != 0 {
		add("cluster_id = ?", f.ClusterID)
	}
	if f.Result != "" {
		add("result = ?", f.Result)
	}
	if !f.From.IsZero() {
		add("at >= ?", s.t(ms(f.From)))
	}
	if !f.To.IsZero() {
		add("at < ?", s.t(ms(f.To)))
	}
	q := `SELECT ` + auditColumns + ` FROM audit`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	args = append(args, clampLimit(f.Limit, 50, 1000))
	q += ` ORDER BY id DESC LIMIT $` + strconv.Itoa(len(args))
	return queryAll(ctx, s.rdb, "list audit records", scanAudit, q, args...)
}

// pruneAudit deletes, in batches, the oldest audit rows while they are older than
// cutoff, and moves the checkpoint to the last row deleted, in the same
// transaction as the deletion and under the chain's lock: the first row left
// then verifies against the checkpoint. Like the change feed, the trail only ever
// loses its head, and the first row newer than cutoff stops the pruning.
func (s *sqlStore) pruneAudit(ctx context.Context, cutoff, now time.Time, batch int) (int64, error) {
	var total int64
	for {
		bctx, cancel := context.WithTimeout(ctx, s.timeout)
		var n int64
		full := false
		err := s.inTx(bctx, func(tx *sql.Tx) error {
			c, err := s.lockAuditChain(bctx, tx)
			if err != nil {
				return err
			}
			rows, err := queryAll(bctx, tx, "read audit records", func(sc scanner) (AuditRecord, error) {
				var a AuditRecord
				return a, sc.Scan(&a.ID, timeCol{&a.At}, &a.Chain)
			}, `SELECT id, at, chain FROM audit WHERE id > $1 ORDER BY id LIMIT $2`, c.CheckpointID, batch)
			if err != nil {
				return err
			}
			var last AuditRecord
			for _, a := range rows {
				if !a.At.Before(cutoff) {
					break
				}
				last = a
				n++
			}
			if n == 0 {
				return nil
			}
			full = n == int64(batch)
			if _, err := tx.ExecContext(bctx, `DELETE FROM audit WHERE id <= $1`, last.ID); err != nil {
				return err
			}
			_, err = tx.ExecContext(bctx, `
				UPDATE audit_chain SET checkpoint_id = $1, checkpoint_chain = $2, checkpoint_at = $3 WHERE id = 1`,
				last.ID, last.Chain, s.t(now))
			return err
		})
		cancel()
		if err != nil {
			return total, fmt.Errorf("prune audit records: %w", err)
		}
		total += n
		if !full {
			return total, nil
		}
	}
}

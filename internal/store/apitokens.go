package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// ChangeAPIToken: an API token of user UserID was deleted (revoked). Drop every
// token of that user held in memory; the next use reads the store again. (A
// token's creation feeds nothing: nobody can hold what did not exist; its owner's
// deletion, disabling or loss of a grant is ChangeUser or ChangeGrant.)
const ChangeAPIToken ChangeKind = "api_token"

// APIToken is a credential for scripts (docs/security.md item 32): it stands for its user
// until it expires or is deleted, within Grants. The secret is never stored, only
// its SHA-256 (SecretHash), so a copy of the database authenticates nobody.
type APIToken struct {
	ID         string // public: lists and URLs name the token by it
	UserID     int64
	Name       string // unique per user
	SecretHash []byte // SHA-256 of the whole secret; unique
	// Grants limit the token to these clusters and roles; nil means every grant of
	// its owner. Either way the owner's current grant is the ceiling at each use.
	Grants       []APITokenGrant
	CreatedAt    time.Time
	ExpiresAt    time.Time
	LastUsedAt   time.Time // zero: never used
	LastUsedFrom string    // the client address of that use
}

// APITokenGrant is a token's role on one cluster.
type APITokenGrant struct {
	ClusterID int64  `json:"clusterId"`
	Role      string `json:"role"` // GrantOperator or GrantViewer
}

// APITokenUse says that token ID was used at At from address From (TouchAPITokens).
type APITokenUse struct {
	ID   string
	At   time.Time
	From string
}

const apiTokenColumns = `id, user_id, name, secret_hash, grants, created_at, expires_at, last_used_at, last_used_from`

func scanAPIToken(sc scanner) (APIToken, error) {
	var (
		t      APIToken
		grants string
	)
	err := sc.Scan(&t.ID, &t.UserID, &t.Name, &t.SecretHash, &grants, timeCol{&t.CreatedAt}, timeCol{&t.ExpiresAt},
		timeCol{&t.LastUsedAt}, &t.LastUsedFrom)
	if err != nil {
		return t, err
	}
	if grants != "" {
		if err := json.Unmarshal([]byte(grants), &t.Grants); err != nil {
			return t, fmt.Errorf("api token %s: grants: %w", t.ID, err)
		}
	}
	return t, nil
}

// apiTokenMissing is the NotFound of a token; it names nothing.
func apiTokenMissing() error { return errs.E(errs.NotFound, "API token not found") }

// CreateAPIToken implements Store. A zero CreatedAt is now. A duplicate ID, secret
// hash or (user, name) is Conflict; a missing user NotFound.
func (s *sqlStore) CreateAPIToken(ctx context.Context, t APIToken) (APIToken, error) {
	grants := ""
	if t.Grants != nil {
		b, err := json.Marshal(t.Grants)
		if err != nil {
			return APIToken{}, fmt.Errorf("create api token: %w", err)
		}
		grants = string(b)
	}
	created, err := scanAPIToken(s.wdb.QueryRowContext(ctx, `
		INSERT INTO api_tokens (id, user_id, name, secret_hash, grants, created_at, expires_at, last_used_at, last_used_from)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		RETURNING `+apiTokenColumns,
		t.ID, t.UserID, t.Name, t.SecretHash, grants, s.t(s.stamp(t.CreatedAt)), s.t(t.ExpiresAt), s.t(t.LastUsedAt),
		t.LastUsedFrom))
	if err != nil {
		return APIToken{}, s.fail(err, "create api token", "a token with this name already exists")
	}
	return created, nil
}

// APITokenByHash implements Store.
func (s *sqlStore) APITokenByHash(ctx context.Context, hash []byte) (APIToken, error) {
	t, err := scanAPIToken(s.rdb.QueryRowContext(ctx,
		`SELECT `+apiTokenColumns+` FROM api_tokens WHERE secret_hash = $1`, hash))
	if err != nil {
		return APIToken{}, s.failRow(err, "read api token", apiTokenMissing())
	}
	return t, nil
}

// UserAPITokens implements Store.
func (s *sqlStore) UserAPITokens(ctx context.Context, userID int64) ([]APIToken, error) {
	return queryAll(ctx, s.rdb, "list api tokens", scanAPIToken, `
		SELECT `+apiTokenColumns+` FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC, id`, userID)
}

// DeleteAPIToken implements Store. A token that is not userID's is NotFound, like
// one that does not exist.
func (s *sqlStore) DeleteAPIToken(ctx context.Context, userID int64, id string) error {
	return s.deleteOne(ctx, "delete api token", apiTokenMissing(), Change{Kind: ChangeAPIToken, UserID: userID},
		`DELETE FROM api_tokens WHERE user_id = $1 AND id = $2`, userID, id)
}

// TouchAPITokens implements Store. LastUsedAt only moves forward, and
// LastUsedFrom with it.
func (s *sqlStore) TouchAPITokens(ctx context.Context, uses []APITokenUse) error {
	if len(uses) == 0 {
		return nil
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, u := range uses {
			if _, err := tx.ExecContext(ctx, `
				UPDATE api_tokens SET last_used_at = $2, last_used_from = $3
				WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)`, u.ID, s.t(s.stamp(u.At)), u.From); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("touch %d api tokens: %w", len(uses), err)
	}
	return nil
}

// pruneAPITokens deletes tokens that expired before cutoff. An expired token
// authenticates nobody already; this only keeps the table small.
func (s *sqlStore) pruneAPITokens(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	return s.pruneBatches(ctx, "api tokens", `
		DELETE FROM api_tokens
		WHERE expires_at < $1 AND id IN (SELECT id FROM api_tokens WHERE expires_at < $1 LIMIT $2)`,
		s.t(cutoff), batch)
}

package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// Offline is the part of auth that needs no signing key, for the administration
// commands (`vmgate admin user`): they work on the database before the server's
// first start, without the key file that seals the signing keys a Service needs,
// or beside running servers. It hashes new passwords under the same policy, in
// this process (one command, one hash: no queue), and ends a user's sessions in
// the store, whose change feed tells every running server (docs/design.md §3.1).
// It is safe for concurrent use.
type Offline struct {
	st  OfflineStore
	cfg OfflineConfig
}

// OfflineStore is what Offline uses of the store; every store.Store is one.
type OfflineStore interface {
	RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error)
}

// OfflineConfig tunes an Offline; the zero value is the production one.
type OfflineConfig struct {
	Argon2 Params           // default DefaultParams(), as the server's
	Now    func() time.Time // default time.Now
	// Audit receives the end of a user's sessions (auth.sessions_revoked), as
	// Config.Audit does. Default: none.
	Audit func(ctx context.Context, rec store.AuditRecord)
}

// NewOffline returns the Offline of st.
func NewOffline(st OfflineStore, cfg OfflineConfig) (*Offline, error) {
	cfg.Argon2 = orDefault(cfg.Argon2, DefaultParams())
	if err := cfg.Argon2.Validate(); err != nil {
		return nil, fmt.Errorf("auth offline config: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Audit == nil {
		cfg.Audit = func(context.Context, store.AuditRecord) {}
	}
	return &Offline{st: st, cfg: cfg}, nil
}

// HashNewPassword is Service.HashNewPassword without the hashing queue.
func (o *Offline) HashNewPassword(_ context.Context, email, password string) (string, error) {
	if err := CheckPasswordPolicy(NormalizeEmail(email), password); err != nil {
		return "", err
	}
	return HashPassword(password, o.cfg.Argon2)
}

// RevokeUser is Service.RevokeUser for a process that keeps no session cache:
// the servers drop the sessions when the change feed reaches them.
func (o *Offline) RevokeUser(ctx context.Context, userID int64, why string) (int, error) {
	ids, err := endUserSessions(ctx, o.st, o.audit, o.cfg.Now(), userID, "", why)
	return len(ids), err
}

func (o *Offline) audit(ctx context.Context, rec store.AuditRecord) {
	if rec.At.IsZero() {
		rec.At = o.cfg.Now()
	}
	o.cfg.Audit(ctx, rec)
}

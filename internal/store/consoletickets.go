package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// ConsoleTicket is vmgate's one-use pass to a console's WebSocket (issue 21,
// docs/security.md item 37): issued to a caller for one guest and one type of
// console, valid for seconds, redeemed once on any replica. The store keeps only
// Hash, the SHA-256 of the secret the caller holds.
type ConsoleTicket struct {
	Hash       string // hex SHA-256 of the ticket's secret; unique
	UserID     int64
	SessionID  string // the login session it was issued to; "" for an API token
	APITokenID string // the API token it was issued to; "" for a login session
	ClusterID  int64
	Node       string
	VMID       int64
	GuestKind  string // GuestQemu or GuestLXC
	Type       string // "vnc" or "term"
	CreatedAt  time.Time
	ExpiresAt  time.Time
}

// ConsoleTickets keeps console tickets. The SQL stores implement it; it is not
// part of Store so that the fakes of Store need not.
type ConsoleTickets interface {
	// CreateConsoleTicket keeps t, and forgets every ticket expired before
	// t.CreatedAt (nobody can redeem those). A hash kept already is Conflict.
	CreateConsoleTicket(ctx context.Context, t ConsoleTicket) error
	// RedeemConsoleTicket returns the ticket of hash and forgets it in the same
	// statement, so that of two replicas redeeming one ticket at once exactly one
	// gets it. A ticket unknown, redeemed before, or expired at now is NotFound.
	RedeemConsoleTicket(ctx context.Context, hash string, now time.Time) (ConsoleTicket, error)
}

var _ ConsoleTickets = (*sqlStore)(nil)

const consoleTicketColumns = `hash, user_id, session_id, api_token_id, cluster_id, node, vmid, guest_kind, console_type,
	created_at, expires_at`

// CreateConsoleTicket implements ConsoleTickets.
func (s *sqlStore) CreateConsoleTicket(ctx context.Context, t ConsoleTicket) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM console_tickets WHERE expires_at < $1`,
			s.t(s.stamp(t.CreatedAt))); err != nil {
			return fmt.Errorf("forget expired console tickets: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO console_tickets (`+consoleTicketColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			t.Hash, t.UserID, t.SessionID, t.APITokenID, t.ClusterID, t.Node, t.VMID, t.GuestKind, t.Type,
			s.t(s.stamp(t.CreatedAt)), s.t(ms(t.ExpiresAt)))
		return s.fail(err, "keep a console ticket", "console ticket issued twice")
	})
}

// RedeemConsoleTicket implements ConsoleTickets.
func (s *sqlStore) RedeemConsoleTicket(ctx context.Context, hash string, now time.Time) (ConsoleTicket, error) {
	var t ConsoleTicket
	err := s.wdb.QueryRowContext(ctx, `DELETE FROM console_tickets WHERE hash = $1 RETURNING `+consoleTicketColumns, hash).
		Scan(&t.Hash, &t.UserID, &t.SessionID, &t.APITokenID, &t.ClusterID, &t.Node, &t.VMID, &t.GuestKind, &t.Type,
			timeCol{&t.CreatedAt}, timeCol{&t.ExpiresAt})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return ConsoleTicket{}, consoleTicketMissing()
	case err != nil:
		return ConsoleTicket{}, fmt.Errorf("redeem a console ticket: %w", err)
	case !now.Before(t.ExpiresAt):
		return ConsoleTicket{}, consoleTicketMissing()
	}
	return t, nil
}

func consoleTicketMissing() error {
	return errs.E(errs.NotFound, "console ticket unknown, used or expired")
}

var _ ConsoleTickets = (*bounded)(nil)

// CreateConsoleTicket implements ConsoleTickets with the store's deadline.
func (b *bounded) CreateConsoleTicket(ctx context.Context, t ConsoleTicket) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.CreateConsoleTicket(ctx, t) })
}

// RedeemConsoleTicket implements ConsoleTickets with the store's deadline.
func (b *bounded) RedeemConsoleTicket(ctx context.Context, hash string, now time.Time) (ConsoleTicket, error) {
	return call(b, ctx, func(ctx context.Context) (ConsoleTicket, error) { return b.s.RedeemConsoleTicket(ctx, hash, now) })
}

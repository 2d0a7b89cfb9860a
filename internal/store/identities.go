package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// Identity is who a user is at an OpenID Provider (issue 23, docs/decisions/0109):
// the provider's issuer and the subject it gives the user. A single sign-on login
// finds its user by these two, never by e-mail alone.
type Identity struct {
	Issuer  string
	Subject string
	UserID  int64
	// Email and Groups are the claims of the last login, as the provider gave them.
	Email  string
	Groups []string
	// MappedAdmin says that the user's admin role came from a group mapping: it
	// goes when no group of a later login maps to admin. An admin role given by
	// hand is never taken by a login.
	MappedAdmin bool
	CreatedAt   time.Time
	LastLoginAt time.Time
}

// GroupMapping gives the members of a provider's group a role and grants, at each
// of their single sign-on logins.
type GroupMapping struct {
	ID        int64
	Group     string
	Role      string // RoleAdmin or RoleUser
	Grants    []MappedGrant
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MappedGrant is one grant a group mapping gives.
type MappedGrant struct {
	ClusterID int64      `json:"clusterId"`
	Role      string     `json:"role"` // GrantOperator or GrantViewer
	Scope     GrantScope `json:"scope,omitzero"`
}

// OIDCLogin is a single sign-on under way at the provider, kept by the hash of its
// state until the callback takes it (once).
type OIDCLogin struct {
	StateHash    string
	Nonce        string
	Verifier     string // the PKCE code verifier sent with the code
	Browser      string // hash of the cookie binding the login to its browser
	Next         string // the web UI's page to go to afterwards
	CLIRedirect  string // the CLI's loopback redirect, when the CLI started the login
	CLIChallenge string // the CLI's PKCE challenge (S256)
	CLIState     string // the CLI's own state, handed back to its redirect
	ExpiresAt    time.Time
}

// OIDCHandoff is a single sign-on finished for the CLI: a one-time code (stored by
// its hash) that the CLI exchanges, with its PKCE verifier, for a session.
type OIDCHandoff struct {
	CodeHash     string
	UserID       int64
	CLIChallenge string
	ExpiresAt    time.Time
}

// GrantChange is what SyncMappedGrants did to one grant.
type GrantChange struct {
	ClusterID int64
	Role      string     // the role put; "" when the grant was removed
	Scope     GrantScope // the scope put (zero: the whole cluster)
	Was       string     // the role before; "" when there was no mapped grant
	WasScope  GrantScope // the scope before
}

// Identities is what single sign-on persists. The Store that Open returns is one
// (a type assertion finds it); it is kept apart from Store so that the fakes of
// Store need nothing new.
type Identities interface {
	// IdentityFor returns the identity (issuer, subject); NotFound when none.
	IdentityFor(ctx context.Context, issuer, subject string) (Identity, error)
	// UserIdentities returns the identities of a user, by issuer and subject.
	UserIdentities(ctx context.Context, userID int64) ([]Identity, error)
	// CreateIdentityUser creates u (without a password) and its identity id in one
	// transaction. Conflict when the e-mail or the identity exists.
	CreateIdentityUser(ctx context.Context, u User, id Identity) (User, error)
	// NoteIdentityLogin stores the claims of a login: e-mail, groups, MappedAdmin
	// and LastLoginAt of id. NotFound when the identity does not exist.
	NoteIdentityLogin(ctx context.Context, id Identity) error
	// SyncMappedGrants makes the grants that group mappings gave userID be want
	// (one per cluster, each with its scope), in one transaction, and returns
	// what changed. A grant that no mapping put, or whose role or scope an admin
	// changed since a mapping put it, is the admin's: it is left as it is and no longer counted as mapped. A
	// cluster that no longer exists is skipped.
	SyncMappedGrants(ctx context.Context, userID int64, want []MappedGrant) ([]GrantChange, error)

	// GroupMappings returns every group mapping, by ID.
	GroupMappings(ctx context.Context) ([]GroupMapping, error)
	// GroupMapping returns one; NotFound when missing.
	GroupMapping(ctx context.Context, id int64) (GroupMapping, error)
	// CreateGroupMapping stores m (ID, CreatedAt and UpdatedAt set).
	CreateGroupMapping(ctx context.Context, m GroupMapping) (GroupMapping, error)
	// UpdateGroupMapping replaces group, role and grants of m.ID; NotFound when missing.
	UpdateGroupMapping(ctx context.Context, m GroupMapping) (GroupMapping, error)
	// DeleteGroupMapping deletes it; NotFound when missing. The grants it gave go
	// at each member's next login.
	DeleteGroupMapping(ctx context.Context, id int64) error

	// CreateOIDCLogin stores l unless max unexpired logins exist (Conflict then);
	// it first forgets the logins expired at now.
	CreateOIDCLogin(ctx context.Context, l OIDCLogin, now time.Time, max int) error
	// TakeOIDCLogin deletes and returns the login of stateHash if it has not
	// expired at now; NotFound otherwise. A state serves once.
	TakeOIDCLogin(ctx context.Context, stateHash string, now time.Time) (OIDCLogin, error)
	// CreateOIDCHandoff stores h, forgetting the handoffs expired at now.
	CreateOIDCHandoff(ctx context.Context, h OIDCHandoff, now time.Time) error
	// TakeOIDCHandoff deletes and returns the handoff of codeHash if it has not
	// expired at now; NotFound otherwise.
	TakeOIDCHandoff(ctx context.Context, codeHash string, now time.Time) (OIDCHandoff, error)
}

const identityColumns = `issuer, subject, user_id, email, claimed_groups, mapped_admin, created_at, last_login_at`

func scanIdentity(sc scanner) (Identity, error) {
	var (
		id     Identity
		groups string
	)
	if err := sc.Scan(&id.Issuer, &id.Subject, &id.UserID, &id.Email, &groups, &id.MappedAdmin,
		timeCol{&id.CreatedAt}, timeCol{&id.LastLoginAt}); err != nil {
		return Identity{}, err
	}
	if err := json.Unmarshal([]byte(groups), &id.Groups); err != nil {
		return Identity{}, fmt.Errorf("identity groups: %w", err)
	}
	return id, nil
}

func groupsJSON(groups []string) string {
	if groups == nil {
		groups = []string{}
	}
	b, _ := json.Marshal(groups) // strings always marshal
	return string(b)
}

// IdentityFor implements Identities.
func (s *sqlStore) IdentityFor(ctx context.Context, issuer, subject string) (Identity, error) {
	id, err := scanIdentity(s.rdb.QueryRowContext(ctx,
		`SELECT `+identityColumns+` FROM identities WHERE issuer = $1 AND subject = $2`, issuer, subject))
	if err != nil {
		return Identity{}, s.failRow(err, "read identity", errs.E(errs.NotFound, "no such identity"))
	}
	return id, nil
}

// UserIdentities implements Identities.
func (s *sqlStore) UserIdentities(ctx context.Context, userID int64) ([]Identity, error) {
	return queryAll(ctx, s.rdb, "read identities", scanIdentity,
		`SELECT `+identityColumns+` FROM identities WHERE user_id = $1 ORDER BY issuer, subject`, userID)
}

// CreateIdentityUser implements Identities.
func (s *sqlStore) CreateIdentityUser(ctx context.Context, u User, id Identity) (User, error) {
	var created User
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		now := s.t(s.nowMS())
		var err error
		created, err = scanUser(tx.QueryRowContext(ctx, `
			INSERT INTO users (email, nickname, password_hash, role, disabled, created_at, updated_at)
			VALUES ($1, $2, '', $3, $4, $5, $5)
			RETURNING `+userColumns,
			strings.ToLower(u.Email), u.Nickname, u.Role, u.Disabled, now))
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO identities (issuer, subject, user_id, email, claimed_groups, mapped_admin, created_at, last_login_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $7)`,
			id.Issuer, id.Subject, created.ID, id.Email, groupsJSON(id.Groups), id.MappedAdmin, now); err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, userChanged(created.ID))
	})
	if err != nil {
		return User{}, s.fail(err, "create user of an identity", "a user with this e-mail or this identity already exists")
	}
	return created, nil
}

// NoteIdentityLogin implements Identities.
func (s *sqlStore) NoteIdentityLogin(ctx context.Context, id Identity) error {
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE identities SET email = $3, claimed_groups = $4, mapped_admin = $5, last_login_at = $6
		WHERE issuer = $1 AND subject = $2`,
		id.Issuer, id.Subject, id.Email, groupsJSON(id.Groups), id.MappedAdmin, s.t(s.stamp(id.LastLoginAt)))
	if err != nil {
		return s.fail(err, "note identity login", "note identity login")
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return errs.E(errs.NotFound, "no such identity")
	}
	return nil
}

// SyncMappedGrants implements Identities.
func (s *sqlStore) SyncMappedGrants(ctx context.Context, userID int64, want []MappedGrant) ([]GrantChange, error) {
	var changes []GrantChange
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		changes = nil
		mapped, err := queryAll(ctx, tx, "read mapped grants", func(sc scanner) (MappedGrant, error) {
			var g MappedGrant
			return g, sc.Scan(&g.ClusterID, &g.Role, scopeCol{&g.Scope})
		}, `SELECT cluster_id, role, scope FROM mapped_grants WHERE user_id = $1 ORDER BY cluster_id`, userID)
		if err != nil {
			return nil, err
		}
		current, err := queryAll(ctx, tx, "read grants", scanGrant,
			`SELECT `+grantColumns+` FROM grants WHERE user_id = $1 ORDER BY cluster_id`, userID)
		if err != nil {
			return nil, err
		}
		have := map[int64]Grant{}
		for _, g := range current {
			have[g.ClusterID] = g
		}
		wanted := map[int64]bool{}
		for _, g := range want {
			wanted[g.ClusterID] = true
		}
		mine := map[int64]MappedGrant{} // grants a mapping put that are still as it put them
		var fed []Change
		for _, m := range mapped {
			g, ok := have[m.ClusterID]
			if ok && g.Role == m.Role && g.Scope.Equal(m.Scope) {
				mine[m.ClusterID] = m
				continue
			}
			// Gone, or its role or scope changed by an admin since: no longer the mapping's.
			if _, err := tx.ExecContext(ctx, `DELETE FROM mapped_grants WHERE user_id = $1 AND cluster_id = $2`,
				userID, m.ClusterID); err != nil {
				return nil, err
			}
		}
		for _, m := range mapped {
			was, ok := mine[m.ClusterID]
			if !ok || wanted[m.ClusterID] {
				continue
			}
			for _, q := range []string{`DELETE FROM grants WHERE user_id = $1 AND cluster_id = $2`,
				`DELETE FROM mapped_grants WHERE user_id = $1 AND cluster_id = $2`} {
				if _, err := tx.ExecContext(ctx, q, userID, m.ClusterID); err != nil {
					return nil, err
				}
			}
			changes = append(changes, GrantChange{ClusterID: m.ClusterID, Was: was.Role, WasScope: was.Scope})
			fed = append(fed, grantChanged(userID, m.ClusterID))
		}
		for _, g := range want {
			was, isMine := mine[g.ClusterID]
			if _, held := have[g.ClusterID]; held && !isMine {
				continue // the admin's grant
			}
			if isMine && was.Role == g.Role && was.Scope.Equal(g.Scope) {
				continue
			}
			var exists int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM clusters WHERE id = $1`, g.ClusterID).Scan(&exists); err != nil {
				return nil, err
			}
			if exists == 0 {
				continue
			}
			scope, err := encodeScope(g.Scope)
			if err != nil {
				return nil, err
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO grants (user_id, cluster_id, role, created_at, scope) VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (user_id, cluster_id) DO UPDATE SET role = excluded.role, scope = excluded.scope`,
				userID, g.ClusterID, g.Role, s.t(s.nowMS()), scope); err != nil {
				return nil, err
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO mapped_grants (user_id, cluster_id, role, scope) VALUES ($1, $2, $3, $4)
				ON CONFLICT (user_id, cluster_id) DO UPDATE SET role = excluded.role, scope = excluded.scope`,
				userID, g.ClusterID, g.Role, scope); err != nil {
				return nil, err
			}
			changes = append(changes, GrantChange{ClusterID: g.ClusterID, Role: g.Role, Scope: g.Scope, Was: was.Role,
				WasScope: was.Scope})
			fed = append(fed, grantChanged(userID, g.ClusterID))
		}
		return s.appendChanges(ctx, tx, time.Time{}, fed...)
	})
	if err != nil {
		return nil, s.fail(err, "apply mapped grants", "apply mapped grants")
	}
	return changes, nil
}

const groupMappingColumns = `id, grp, role, grants, created_at, updated_at`

func scanGroupMapping(sc scanner) (GroupMapping, error) {
	var (
		m      GroupMapping
		grants string
	)
	if err := sc.Scan(&m.ID, &m.Group, &m.Role, &grants, timeCol{&m.CreatedAt}, timeCol{&m.UpdatedAt}); err != nil {
		return GroupMapping{}, err
	}
	if err := json.Unmarshal([]byte(grants), &m.Grants); err != nil {
		return GroupMapping{}, fmt.Errorf("group mapping %d grants: %w", m.ID, err)
	}
	if m.Grants == nil {
		m.Grants = []MappedGrant{}
	}
	return m, nil
}

func grantsJSON(gs []MappedGrant) string {
	if gs == nil {
		gs = []MappedGrant{}
	}
	b, _ := json.Marshal(gs) // plain fields always marshal
	return string(b)
}

func mappingMissing(id int64) error { return errs.E(errs.NotFound, "group mapping %d not found", id) }

// GroupMappings implements Identities.
func (s *sqlStore) GroupMappings(ctx context.Context) ([]GroupMapping, error) {
	return queryAll(ctx, s.rdb, "list group mappings", scanGroupMapping,
		`SELECT `+groupMappingColumns+` FROM group_mappings ORDER BY id`)
}

// GroupMapping implements Identities.
func (s *sqlStore) GroupMapping(ctx context.Context, id int64) (GroupMapping, error) {
	m, err := scanGroupMapping(s.rdb.QueryRowContext(ctx,
		`SELECT `+groupMappingColumns+` FROM group_mappings WHERE id = $1`, id))
	if err != nil {
		return GroupMapping{}, s.failRow(err, "read group mapping", mappingMissing(id))
	}
	return m, nil
}

// CreateGroupMapping implements Identities.
func (s *sqlStore) CreateGroupMapping(ctx context.Context, m GroupMapping) (GroupMapping, error) {
	created, err := scanGroupMapping(s.wdb.QueryRowContext(ctx, `
		INSERT INTO group_mappings (grp, role, grants, created_at, updated_at) VALUES ($1, $2, $3, $4, $4)
		RETURNING `+groupMappingColumns, m.Group, m.Role, grantsJSON(m.Grants), s.t(s.nowMS())))
	if err != nil {
		return GroupMapping{}, s.fail(err, "create group mapping", "create group mapping")
	}
	return created, nil
}

// UpdateGroupMapping implements Identities.
func (s *sqlStore) UpdateGroupMapping(ctx context.Context, m GroupMapping) (GroupMapping, error) {
	updated, err := scanGroupMapping(s.wdb.QueryRowContext(ctx, `
		UPDATE group_mappings SET grp = $2, role = $3, grants = $4, updated_at = $5 WHERE id = $1
		RETURNING `+groupMappingColumns, m.ID, m.Group, m.Role, grantsJSON(m.Grants), s.t(s.nowMS())))
	if err != nil {
		return GroupMapping{}, s.failRow(err, "update group mapping", mappingMissing(m.ID))
	}
	return updated, nil
}

// DeleteGroupMapping implements Identities.
func (s *sqlStore) DeleteGroupMapping(ctx context.Context, id int64) error {
	res, err := s.wdb.ExecContext(ctx, `DELETE FROM group_mappings WHERE id = $1`, id)
	if err != nil {
		return s.fail(err, "delete group mapping", "delete group mapping")
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return mappingMissing(id)
	}
	return nil
}

// CreateOIDCLogin implements Identities.
func (s *sqlStore) CreateOIDCLogin(ctx context.Context, l OIDCLogin, now time.Time, max int) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM oidc_logins WHERE expires_at <= $1`, s.t(ms(now))); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM oidc_logins`).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return errs.E(errs.Conflict, "too many single sign-on logins under way")
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO oidc_logins (state_hash, nonce, verifier, browser, next, cli_redirect, cli_challenge, cli_state, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			l.StateHash, l.Nonce, l.Verifier, l.Browser, l.Next, l.CLIRedirect, l.CLIChallenge, l.CLIState, s.t(ms(l.ExpiresAt)))
		return err
	})
	if errs.KindOf(err) == errs.Conflict {
		return err
	}
	return s.fail(err, "store a single sign-on login", "a single sign-on login with this state exists")
}

// TakeOIDCLogin implements Identities.
func (s *sqlStore) TakeOIDCLogin(ctx context.Context, stateHash string, now time.Time) (OIDCLogin, error) {
	var l OIDCLogin
	err := s.wdb.QueryRowContext(ctx, `
		DELETE FROM oidc_logins WHERE state_hash = $1
		RETURNING state_hash, nonce, verifier, browser, next, cli_redirect, cli_challenge, cli_state, expires_at`,
		stateHash).Scan(&l.StateHash, &l.Nonce, &l.Verifier, &l.Browser, &l.Next, &l.CLIRedirect, &l.CLIChallenge,
		&l.CLIState, timeCol{&l.ExpiresAt})
	missing := errs.E(errs.NotFound, "no single sign-on login with this state")
	if err != nil {
		return OIDCLogin{}, s.failRow(err, "take a single sign-on login", missing)
	}
	if !now.Before(l.ExpiresAt) {
		return OIDCLogin{}, missing
	}
	return l, nil
}

// CreateOIDCHandoff implements Identities.
func (s *sqlStore) CreateOIDCHandoff(ctx context.Context, h OIDCHandoff, now time.Time) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM oidc_handoffs WHERE expires_at <= $1`, s.t(ms(now))); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO oidc_handoffs (code_hash, user_id, cli_challenge, expires_at) VALUES ($1, $2, $3, $4)`,
			h.CodeHash, h.UserID, h.CLIChallenge, s.t(ms(h.ExpiresAt)))
		return err
	})
	return s.fail(err, "store a single sign-on handoff", "a handoff with this code exists")
}

// TakeOIDCHandoff implements Identities.
func (s *sqlStore) TakeOIDCHandoff(ctx context.Context, codeHash string, now time.Time) (OIDCHandoff, error) {
	var h OIDCHandoff
	err := s.wdb.QueryRowContext(ctx, `
		DELETE FROM oidc_handoffs WHERE code_hash = $1 RETURNING code_hash, user_id, cli_challenge, expires_at`,
		codeHash).Scan(&h.CodeHash, &h.UserID, &h.CLIChallenge, timeCol{&h.ExpiresAt})
	missing := errs.E(errs.NotFound, "no single sign-on handoff with this code")
	if err != nil {
		return OIDCHandoff{}, s.failRow(err, "take a single sign-on handoff", missing)
	}
	if !now.Before(h.ExpiresAt) {
		return OIDCHandoff{}, missing
	}
	return h, nil
}

// LinkIdentity implements IdentityLinks.
func (s *sqlStore) LinkIdentity(ctx context.Context, issuer, subject string, userID int64) (Identity, error) {
	var linked Identity
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		var was int64
		err := tx.QueryRowContext(ctx, `SELECT user_id FROM identities WHERE issuer = $1 AND subject = $2`, issuer, subject).Scan(&was)
		if err != nil && err != sql.ErrNoRows {
			return nil, err
		}
		now := s.t(s.nowMS())
		linked, err = scanIdentity(tx.QueryRowContext(ctx, `
			INSERT INTO identities (issuer, subject, user_id, email, claimed_groups, mapped_admin, created_at, last_login_at)
			VALUES ($1, $2, $3, '', '[]', $4, $5, $5)
			ON CONFLICT (issuer, subject) DO UPDATE SET user_id = excluded.user_id, mapped_admin = excluded.mapped_admin
			RETURNING `+identityColumns, issuer, subject, userID, false, now))
		if err != nil {
			return nil, err
		}
		changes := []Change{userChanged(userID)}
		if was != 0 && was != userID {
			changes = append(changes, userChanged(was))
		}
		return s.appendChanges(ctx, tx, time.Time{}, changes...)
	})
	if err != nil {
		return Identity{}, s.fail(err, "link identity", "link identity")
	}
	return linked, nil
}

// IdentityLinks is how an admin says which user an identity is (docs/decisions/0109).
type IdentityLinks interface {
	// LinkIdentity makes (issuer, subject) the identity of userID, creating it or
	// taking it from the user it had (whose mapped admin role it no longer
	// carries). NotFound when the user does not exist.
	LinkIdentity(ctx context.Context, issuer, subject string, userID int64) (Identity, error)
}

var _ IdentityLinks = (*bounded)(nil)

// LinkIdentity implements IdentityLinks.
func (b *bounded) LinkIdentity(ctx context.Context, issuer, subject string, userID int64) (Identity, error) {
	return call(b, ctx, func(ctx context.Context) (Identity, error) { return b.s.LinkIdentity(ctx, issuer, subject, userID) })
}

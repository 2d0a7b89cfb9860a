package accounts

import (
	"context"
	"fmt"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/store"
)

// Host runs the account use cases of the host's administrator: `vmgate admin
// user`, for bootstrap and recovery, and the server's dev mode, which makes its own
// admin. Whoever can open vmgate's database is trusted as an admin without a
// login, so no caller is checked; every other rule is the one the API and the web
// UI go through (createUser, lastAdminGuard, the end of the user's sessions), and
// every change is audited with Via in its params (the records name no actor:
// nobody logged in). It is safe for concurrent use.
type Host struct {
	st    Store
	auth  HostCredentials
	audit *audit.Trail
	via   string
}

// HostConfig is what NewHost needs. Store and Auth are required (*auth.Offline
// where no server runs); a nil Audit records nothing; Via names the way in for the
// audit trail ("cli", "dev").
type HostConfig struct {
	Store Store
	Auth  HostCredentials
	Audit *audit.Trail
	Via   string
}

// NewHost builds the host's use cases.
func NewHost(cfg HostConfig) *Host {
	return &Host{st: cfg.Store, auth: cfg.Auth, audit: cfg.Audit, via: cfg.Via}
}

// CreateUser adds a user under the rules of Service.CreateUser, audited as
// user.create.
func (h *Host) CreateUser(ctx context.Context, in NewUser) (User, error) {
	u, err := createUser(ctx, h.st, h.auth, h.audit, in, h.via)
	if err != nil {
		return User{}, err
	}
	return view(u), nil
}

// DisableUser disables the user with e-mail email and ends their sessions at once
// (docs/security.md item 11): it returns the user and how many sessions ended.
// Disabling the last enabled admin is 409 last_admin, as through the API: the
// host's administrator creates another admin first. An unknown e-mail is NotFound.
// A user disabled already is disabled again, and any session left of theirs ended.
// Audited as user.disable.
func (h *Host) DisableUser(ctx context.Context, email string) (User, int, error) {
	u, err := h.st.UserByEmail(ctx, auth.NormalizeEmail(email))
	if err != nil {
		return User{}, 0, fmt.Errorf("disable user %s: %w", email, err)
	}
	if err := lastAdminGuard(ctx, h.st, u); err != nil {
		return User{}, 0, err
	}
	u.Disabled = true
	disabled, err := h.st.UpdateUser(ctx, u)
	if err != nil {
		return User{}, 0, fmt.Errorf("disable user %d: %w", u.ID, err)
	}
	u = disabled
	ended, err := h.auth.RevokeUser(ctx, u.ID, auth.WhyDisabled)
	if err != nil {
		return User{}, 0, err
	}
	h.audit.Record(ctx, store.AuditRecord{Action: "user.disable", Target: userTarget(u.ID),
		Params: audit.Params(map[string]any{"via": h.via}), Result: "ok"})
	return view(u), ended, nil
}

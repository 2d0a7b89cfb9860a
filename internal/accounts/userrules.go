package accounts

import (
	"context"
	"fmt"
	"net/mail"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// NewUser is what CreateUser needs.
type NewUser struct {
	Email    string
	Nickname string
	Password string
	Role     string // RoleAdmin or RoleUser; empty is RoleUser
}

// createUser is the one way a user is made, whoever asks (Service.CreateUser for an
// admin, Host.CreateUser for the host's administrator). The role is checked first
// (empty is RoleUser) and a bad one refused unaudited; then the e-mail (a plain
// address, at most 254 bytes, stored in auth.NormalizeEmail's form), the nickname
// (trimmed, at most 100 printable characters) and the password policy (auth) hold,
// and a duplicate e-mail is Conflict. Every attempt past the role is audited as
// user.create, with via in its params when given.
func createUser(ctx context.Context, st Store, creds HostCredentials, trail *audit.Trail, in NewUser,
	via string) (store.User, error) {
	if in.Role == "" {
		in.Role = RoleUser
	}
	if err := checkRole(in.Role); err != nil {
		return store.User{}, err
	}
	u, err := newUser(ctx, st, creds, in)
	params := map[string]any{"role": in.Role, "nickname": in.Nickname}
	if via != "" {
		params["via"] = via
	}
	// The target is the e-mail as asked for: a failed attempt has no user id.
	trail.Record(ctx, store.AuditRecord{Action: "user.create", Target: "user:" + auth.NormalizeEmail(in.Email),
		Params: audit.Params(params), Result: audit.Result(err)})
	return u, err
}

// newUser checks in and stores the user, its password hashed by creds.
func newUser(ctx context.Context, st Store, creds HostCredentials, in NewUser) (store.User, error) {
	email := auth.NormalizeEmail(in.Email)
	if err := checkEmail(email); err != nil {
		return store.User{}, err
	}
	nickname := strings.TrimSpace(in.Nickname)
	if err := checkNickname(nickname); err != nil {
		return store.User{}, err
	}
	hash, err := creds.HashNewPassword(ctx, email, in.Password)
	if err != nil {
		return store.User{}, err
	}
	u, err := st.CreateUser(ctx, store.User{Email: email, Nickname: nickname, PasswordHash: hash, Role: in.Role})
	if err != nil {
		return store.User{}, fmt.Errorf("create user %s: %w", email, err)
	}
	return u, nil
}

// checkEmail accepts a plain address (no display name), at most 254 bytes.
func checkEmail(email string) error {
	a, err := mail.ParseAddress(email)
	if err != nil || a.Name != "" || a.Address != email || len(email) > 254 {
		return errs.E(errs.Invalid, "email must be a plain e-mail address")
	}
	return nil
}

// checkNickname accepts up to 100 printable characters.
func checkNickname(nick string) error {
	if utf8.RuneCountInString(nick) > 100 || strings.IndexFunc(nick, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return errs.E(errs.Invalid, "nickname must be at most 100 printable characters")
	}
	return nil
}

// lastAdminGuard refuses a change that would leave no enabled admin: nobody could
// manage vmgate through its API afterwards. Two admins removing each other at the
// same instant can both pass it: the store has no compare-and-swap for users, and
// `vmgate admin user create` is the way back.
func lastAdminGuard(ctx context.Context, st Store, u store.User) error {
	if u.Role != RoleAdmin || u.Disabled {
		return nil
	}
	users, err := st.ListUsers(ctx)
	if err != nil {
		return err
	}
	for _, o := range users {
		if o.ID != u.ID && o.Role == RoleAdmin && !o.Disabled {
			return nil
		}
	}
	return errs.R(errs.Conflict, errs.ReasonLastAdmin, "user %d is the last enabled admin", u.ID)
}

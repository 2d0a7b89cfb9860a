package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
)

// The errors a client sees. One message for every login failure and one for every
// token failure (docs/security.md items 1, 14); the cause goes to the log only.
func errCredentials() *errs.Error {
	return errs.E(errs.Unauthenticated, "invalid credentials")
}

func errThrottled(wait time.Duration) *errs.Error {
	return &errs.Error{Kind: errs.RateLimited, Reason: "rate_limited", Message: "too many login attempts; try again later",
		RetryAfter: retrySeconds(wait)}
}

// errDelayed is the answer during the delay that wrong passwords start: the same
// answer as errThrottled, with a cause a front end can tell apart (Locked).
func errDelayed(wait time.Duration) *errs.Error {
	e := errThrottled(wait)
	e.Err = errLocked
	return e
}

// errLocked is the cause of a login refused during the delay of an account (from
// the client's network, or everywhere) after wrong passwords.
var errLocked = errors.New("delayed after wrong passwords")

// Locked reports whether err refused a login (or a password change) because wrong
// passwords paused the account, rather than because of too many attempts from one
// network or too many logins at once; RetryAfter says for how long. The API
// answers both alike; the web UI says which.
func Locked(err error) bool { return errors.Is(err, errLocked) }

func errBusy(wait time.Duration) *errs.Error {
	return &errs.Error{Kind: errs.RateLimited, Reason: "rate_limited", Message: "too many logins at once; try again later",
		RetryAfter: retrySeconds(wait)}
}

// Login is the password method: it checks an e-mail and password and starts a
// session through StartSession (MethodPassword). addr is the client's
// address (or an RFC 7239 obfuscated identifier); throttling counts its network
// (Config.IPv4Prefix, IPv6Prefix). In order: the network's token bucket, the
// delay of the (account, network) pair and the account's block on networks it has
// not logged in from (all 429, the right password too: a delayed login is not
// verified, so the delay is no oracle), a hashing slot (waiting its turn in the FIFO queue; 429 with Retry-After when the
// queue is full), then one argon2id verification, against the dummy hash for an
// unknown e-mail. A login that fails on vmgate's side (reading the user,
// starting the session) gives its attempt back to the network's bucket: the
// store's failure is not the client's. Every failure — unknown e-mail, wrong password, disabled user — is
// the same 401 "invalid credentials". A hash made with other parameters than
// Config.Argon2 is replaced.
func (s *Service) Login(ctx context.Context, email, password, addr string) (Token, store.User, error) {
	now := s.cfg.Now()
	email = NormalizeEmail(email)
	network := s.network(addr)
	ok, wait, giveBack := s.addrs.allow(network, now)
	if !ok {
		s.cfg.LoginOutcome(OutcomeRateLimited)
		// Debug: under attack this is every request; LoginOutcome counts them.
		s.log.LogAttrs(ctx, slog.LevelDebug, "login rate-limited", slog.String("address", addr),
			slog.String("network", network))
		return Token{}, store.User{}, s.refuse(ctx, wait, errThrottled(wait))
	}
	if wait, scope := s.throttle.wait(email, network, now); wait > 0 && (scope != scopeAccount || !s.knownNetwork(ctx, email, network, now, wait)) {
		s.cfg.LoginOutcome(OutcomeLocked)
		s.log.LogAttrs(ctx, slog.LevelDebug, "login refused: delayed after wrong passwords", slog.String("address", addr),
			slog.String("network", network), slog.String("scope", scope), slog.Duration("remaining", wait))
		return Token{}, store.User{}, s.refuse(ctx, wait, errDelayed(wait))
	}
	// A place in line before the user is read: a login the queue turns away costs
	// no store read, and the read overlaps the wait.
	place, retry, ok := s.hashes.enter()
	if !ok {
		s.cfg.LoginOutcome(OutcomeBusy)
		return Token{}, store.User{}, s.refuse(ctx, retry, errBusy(retry))
	}
	u, err := s.st.UserByEmail(ctx, email)
	known := err == nil
	if err != nil && !errs.Is(err, errs.NotFound) {
		place.leave()
		giveBack(s.cfg.Now()) // the store failed, not the client
		return Token{}, store.User{}, fmt.Errorf("login: %w", err)
	}
	release, ok := place.wait(ctx)
	if !ok {
		s.cfg.LoginOutcome(OutcomeBusy)
		return Token{}, store.User{}, errBusy(0)
	}
	hash := s.dummyHash
	// A user without a password (created by single sign-on, internal/identity)
	// is checked against the dummy hash: the same cost, never a match.
	noPassword := known && u.PasswordHash == ""
	if known && !noPassword {
		hash = u.PasswordHash
	}
	match, rehash, err := verifyWith(s.kdf, hash, password, s.cfg.Argon2)
	match = match && !noPassword
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "stored password hash unreadable", slog.Int64("user", u.ID), slog.String("error", err.Error()))
		_, _, _ = verifyWith(s.kdf, s.dummyHash, password, s.cfg.Argon2) // spend what a hash costs
	}
	if match && known && !u.Disabled && rehash {
		// A failed rehash costs nothing but another try at the next login.
		if fresh, err := s.rehash(ctx, u, password); err != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "rehash password", slog.Int64("user", u.ID), slog.String("error", err.Error()))
		} else {
			u = fresh
		}
	}
	release()
	if !match || !known || u.Disabled {
		s.cfg.LoginOutcome(OutcomeBadCredentials)
		s.passwordFailed(ctx, "auth.login_failed", loginFailure(known, match), email, u.ID, addr, now)
		return Token{}, store.User{}, errCredentials()
	}
	if s.secondStep != nil {
		// A user with a second factor gets a ticket, not a session (secondstep.go).
		step, err := s.secondStep.Challenge(ctx, u, addr)
		if err != nil {
			giveBack(s.cfg.Now())
			return Token{}, store.User{}, fmt.Errorf("login: %w", err)
		}
		if step != nil {
			s.cfg.LoginOutcome(OutcomeSecondStep)
			return Token{}, store.User{}, step
		}
	}
	s.throttle.succeeded(email, network, now)
	// Every replica, and this one after a restart, exempts the network from the
	// account's ceiling (knownNetwork). A failed note costs the owner nothing here.
	if err := s.st.NoteLoginNetwork(ctx, email, network, now); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "noting the login's network failed", slog.Int64("user", u.ID),
			slog.String("network", network), slog.String("error", err.Error()))
	}

	tok, err := s.StartSession(ctx, u, MethodPassword, Client{Address: addr, UserAgent: audit.FactsFrom(ctx).UserAgent})
	if err != nil {
		giveBack(s.cfg.Now()) // vmgate failed, not the client
		return Token{}, store.User{}, fmt.Errorf("login: %w", err)
	}
	s.cfg.LoginOutcome(OutcomeOK)
	return tok, u, nil
}

// knownNetwork reports whether account logged in successfully from network within
// KnownNetworkMemory as the store remembers it (store.NoteLoginNetwork): on
// another replica, or on this one before a restart, where this process's memory
// does not know it. Such a network is exempt from the account's ceiling
// (docs/security.md item 28), so a guesser with many networks cannot keep the owner out of
// the networks they use, whichever replica answers. The answer is remembered — a
// known network until its memory ends, an unknown one until the account's block
// (block) does — so each of a guesser's networks costs one store read per block.
// The read is the same for an account that exists and one that does not (accounts
// are e-mails here), so it tells nothing either. A store that cannot answer
// exempts nobody: the block is 15 minutes at most.
func (s *Service) knownNetwork(ctx context.Context, account, network string, now time.Time, block time.Duration) bool {
	if s.throttle.checkedUnknown(account, network, now) {
		return false
	}
	at, err := s.st.LoginNetworkSeen(ctx, account, network)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reading a login network failed: the account's block holds",
			slog.String("network", network), slog.String("error", err.Error()))
		return false
	}
	if at.IsZero() || now.Sub(at) >= s.cfg.KnownNetworkMemory {
		s.throttle.markUnknown(account, network, now, now.Add(block))
		return false
	}
	s.throttle.noteKnown(account, network, now, at.Add(s.cfg.KnownNetworkMemory))
	return true
}

// refuse answers a refused login with err after holding it for RefusalPause (at
// most wait, the time it is told to come back after): a flood's clients that
// retry at once would otherwise spin on cheap 429s and take the cores that
// authenticated requests and the hashes need; held, each costs a sleeping
// goroutine. At most maxPausedRefusals are held at once, the rest answered at once.
func (s *Service) refuse(ctx context.Context, wait time.Duration, err error) error {
	d := min(s.cfg.RefusalPause, wait)
	if d <= 0 {
		return err
	}
	if s.paused.Add(1) > maxPausedRefusals {
		s.paused.Add(-1)
		return err
	}
	defer s.paused.Add(-1)
	s.pause(ctx, d)
	return err
}

// sleep waits d or until ctx ends, on the real clock: a refusal's pause paces
// clients, it decides nothing. Tests replace Service.pause to count the pauses.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// maxPausedRefusals bounds the refused logins held at once (each a goroutine and
// a connection).
const maxPausedRefusals = 1024

// loginFailure is the reason an audit record gives for a refused login; the
// client sees one answer for all of them.
func loginFailure(known, match bool) string {
	switch {
	case !known:
		return "unknown_email"
	case !match:
		return "wrong_password"
	}
	return "user_disabled"
}

// network is the client network addr belongs to, the unit of throttling.
func (s *Service) network(addr string) string {
	return clientNetwork(addr, s.cfg.IPv4Prefix, s.cfg.IPv6Prefix)
}

// passwordFailed counts a wrong password against the e-mail, known or not, from
// addr's network, and audits it as action (none when empty) for why, and the
// delays it may start: auth.lockout, with the network and the scope ("network":
// this account from this network; "account": this account from every network it
// has not logged in from). The records name no actor, nobody having
// authenticated: the account tried is their target, "user:" and the e-mail as
// typed (when it looks like one), with the user id in params when it exists.
func (s *Service) passwordFailed(ctx context.Context, action, why, email string, userID int64, addr string, now time.Time) {
	network := s.network(addr)
	n, delay, block := s.throttle.fail(email, network, now)
	s.log.LogAttrs(ctx, slog.LevelInfo, "wrong password", slog.String("address", addr), slog.String("network", network),
		slog.Int64("user", userID), slog.Int("failures", n))
	target := "user:" + auditEmail(email)
	params := func(m map[string]any) string {
		m["network"] = network
		if userID != 0 {
			m["userId"] = userID
		}
		return jsonParams(m)
	}
	if action != "" {
		s.audit(ctx, store.AuditRecord{Action: action, Target: target, Address: addr, Result: OutcomeBadCredentials,
			Reason: why, Params: params(map[string]any{})})
	}
	lockout := func(scope string, d time.Duration) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "login lockout", slog.String("scope", scope), slog.String("address", addr),
			slog.String("network", network), slog.Int64("user", userID), slog.Int("failures", n), slog.Duration("for", d))
		// The notification is written with the audit record (issue 24).
		nctx := store.WithOutbox(ctx, notify.AuthLockout(target, scope, addr, d, now))
		s.audit(nctx, store.AuditRecord{Action: "auth.lockout", Target: target, Address: addr, Result: "locked",
			Reason: fmt.Sprintf("%d wrong passwords: logins wait %s (%s)", n, d.Round(time.Second), scope),
			Params: params(map[string]any{"scope": scope, "failures": n, "seconds": d.Seconds()})})
	}
	if delay > 0 {
		lockout(scopeNetwork, delay)
	}
	if block > 0 {
		lockout(scopeAccount, block)
	}
}

// rehash stores a new hash of password made with today's parameters.
func (s *Service) rehash(ctx context.Context, u store.User, password string) (store.User, error) {
	h, err := hashWith(s.kdf, password, s.cfg.Argon2)
	if err != nil {
		return u, err
	}
	return s.setHash(ctx, u.ID, u.PasswordHash, h)
}

// NormalizeEmail is the form of an e-mail as a login name: trimmed and
// lower-cased. Login looks users up and counts their failures by it, and
// internal/accounts stores every user's e-mail in it.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// auditEmail keeps what was typed as the e-mail of a failed login only if it looks
// like one: people type their password into the wrong field.
func auditEmail(email string) string {
	if !strings.Contains(email, "@") || len(email) > 254 {
		return ""
	}
	return email
}

package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// cheapParams keep argon2 out of the way in tests that are not about its cost.
var cheapParams = Params{Memory: 64, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16}

const (
	alicePassword = "correct horse battery"
	bobPassword   = "purple elephant umbrella"
)

// testClock is an injected clock: tests move time, nothing sleeps.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// auditLog records what Config.Audit receives.
type auditLog struct {
	mu   sync.Mutex
	recs []store.AuditRecord
}

func (a *auditLog) add(_ context.Context, r store.AuditRecord) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
}

func (a *auditLog) actions(action string) []store.AuditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.AuditRecord
	for _, r := range a.recs {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// testSealer seals the signing keys of the tests' services.
var testSealer = func() *seal.Sealer {
	s, err := seal.New(bytes.Repeat([]byte{0x5e}, seal.KeySize))
	if err != nil {
		panic(err)
	}
	return s
}()

// env is one Service on a fake store, with its clock and audit log.
type env struct {
	t     testing.TB
	st    *fakeStore
	clock *testClock
	audit *auditLog
	s     *Service
}

// newEnv builds a Service with cheap hashing and no address limit; edit adjusts the
// Config first.
func newEnv(t testing.TB, edit func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, newFakeStore(), newTestClock(), edit)
}

// newEnvOn builds a Service on an existing store and clock: another replica.
func newEnvOn(t testing.TB, st *fakeStore, clock *testClock, edit func(*Config)) *env {
	t.Helper()
	e := &env{t: t, st: st, clock: clock, audit: &auditLog{}}
	cfg := Config{Now: clock.Now, Argon2: cheapParams, PerAddressRate: rate.Inf, Audit: e.audit.add, RefusalPause: -1,
		Sealer: testSealer}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(context.Background(), st, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	e.s = s
	return e
}

// createUser stores a user as internal/accounts does: the e-mail normalised, the
// password checked and hashed by HashNewPassword.
func (e *env) createUser(email, password, role string) store.User {
	e.t.Helper()
	ctx := context.Background()
	hash, err := e.s.HashNewPassword(ctx, email, password)
	if err != nil {
		e.t.Fatalf("HashNewPassword(%s): %v", email, err)
	}
	u, err := e.st.CreateUser(ctx, store.User{Email: NormalizeEmail(email), Nickname: "nick", PasswordHash: hash, Role: role})
	if err != nil {
		e.t.Fatalf("CreateUser(%s): %v", email, err)
	}
	return u
}

func (e *env) login(email, password string) Token {
	e.t.Helper()
	tok, _, err := e.s.Login(context.Background(), email, password, "192.0.2.1")
	if err != nil {
		e.t.Fatalf("Login(%s): %v", email, err)
	}
	return tok
}

func (e *env) authOK(raw string) Principal {
	e.t.Helper()
	p, err := e.s.Authenticate(context.Background(), raw)
	if err != nil {
		e.t.Fatalf("Authenticate: want ok, got %v", err)
	}
	return p
}

func (e *env) authFails(raw string) {
	e.t.Helper()
	_, err := e.s.Authenticate(context.Background(), raw)
	wantTokenError(e.t, err)
}

func (e *env) refresh(raw string) (Token, error) {
	return e.s.Refresh(context.Background(), raw, "192.0.2.1")
}

// wantTokenError checks err is exactly what every token failure must look like to a
// client (docs/security.md item 1: one identical body).
func wantTokenError(t testing.TB, err error) {
	t.Helper()
	wantClientError(t, err, errToken(nil))
}

func wantCredentialsError(t testing.TB, err error) {
	t.Helper()
	wantClientError(t, err, errCredentials())
}

// wantClientError compares the parts of an *errs.Error a client sees.
func wantClientError(t testing.TB, err error, want *errs.Error) {
	t.Helper()
	got, ok := errs.As(err)
	if !ok {
		t.Fatalf("want %q, got %v", want.Message, err)
	}
	if got.Kind != want.Kind || got.ReasonOrDefault() != want.ReasonOrDefault() || got.Message != want.Message ||
		got.RetryAfter != want.RetryAfter || len(got.Details) != 0 {
		t.Fatalf("want {%v %s %q retry=%d}, got {%v %s %q retry=%d details=%v}", want.Kind, want.ReasonOrDefault(),
			want.Message, want.RetryAfter, got.Kind, got.ReasonOrDefault(), got.Message, got.RetryAfter, got.Details)
	}
}

func wantKind(t testing.TB, err error, kind errs.Kind) *errs.Error {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != kind {
		t.Fatalf("want kind %v, got %v", kind, err)
	}
	return e
}

// wantReason checks err is a 403 with the given reason.
func wantReason(t testing.TB, err error, reason string) {
	t.Helper()
	if e := wantKind(t, err, errs.Forbidden); e.Reason != reason {
		t.Fatalf("want reason %q, got %v (%q)", reason, err, e.Reason)
	}
}

// jwtParts splits a compact token into its decoded header and claims.
func jwtParts(t *testing.T, raw string) (header, claims map[string]any) {
	t.Helper()
	seg := strings.Split(raw, ".")
	if len(seg) != 3 {
		t.Fatalf("token has %d segments", len(seg))
	}
	for i, into := range []*map[string]any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(seg[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
	return header, claims
}

// craft builds a compact JWT from header and claims, signed with HMAC-SHA256 under
// key (no signature when key is nil), whatever alg the header names.
func craft(t *testing.T, header, claims map[string]any, key []byte) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(header) + "." + enc(claims)
	if key == nil {
		return signing + "."
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signing))
	return signing + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// clone copies a decoded header or claims map and applies edits; a nil value
// deletes the key.
func clone(m map[string]any, edits map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	for k, v := range edits {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

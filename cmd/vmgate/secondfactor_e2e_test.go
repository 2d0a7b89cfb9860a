package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/secondfactor"
	"github.com/vmgate/vmgate/internal/testkit"
)

// walkPublicURL is the public URL TestEveryOperationOnRealBinary's server is
// given: the passkeys' RP ID, which testkit.Passkey signs for.
const walkPublicURL = "https://vmgate.example.test"

// walkSecondFactors is TestEveryOperationOnRealBinary's part for the second
// factors (issue 23 §2): a user of its own enrols a TOTP factor and a passkey
// (testkit.Passkey), logs in with the passkey at the second step, steps up with
// it, makes new recovery codes, removes the TOTP factor, and the admin resets
// the rest; every answer goes through the checked clients.
func walkSecondFactors(t *testing.T, ctx context.Context, base string, admin *client.Client) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	const email, pw = "two-factors@example.com", "quartz harbour lantern 93"
	u, err := admin.CreateUser(ctx, client.UserCreate{Email: email, Password: pw, Role: "user"})
	must("create the user of the second factors", err)
	c := checkedClient(t, base, "")
	_, err = c.Login(ctx, email, pw)
	must("login before a factor", err)
	p, err := c.BeginTOTP(ctx, "phone")
	must("begin TOTP", err)
	code, err := secondfactor.TOTPCode(p.Secret, time.Now())
	must("TOTP code", err)
	codes, err := c.ConfirmTOTP(ctx, p.ID, code)
	must("confirm TOTP", err)
	if len(codes) != 10 {
		t.Fatalf("recovery codes: %v", codes)
	}
	key := testkit.NewPasskey(walkPublicURL)
	cer, err := c.BeginPasskey(ctx)
	must("begin a passkey", err)
	cred, err := key.Create(cer.Options)
	must("create the credential", err)
	_, err = c.FinishPasskey(ctx, cer.Ticket, "key", cred)
	must("finish the passkey", err)
	list, err := c.SecondFactors(ctx)
	must("second factors", err)
	if len(list.Factors) != 2 || list.RecoveryCodesLeft != 10 {
		t.Fatalf("factors: %+v", list)
	}

	c2 := checkedClient(t, base, "")
	step, err := c2.Login(ctx, email, pw)
	must("password login", err)
	if step.Token != "" || step.SecondFactor == nil {
		t.Fatalf("a password alone: %+v", step)
	}
	opts, err := c2.LoginWebAuthnChallenge(ctx, step.SecondFactor.Ticket)
	must("the second step's challenge", err)
	assertion, err := key.Get(opts)
	must("sign", err)
	_, err = c2.LoginSecondFactor(ctx, client.SecondFactorAnswer{Ticket: step.SecondFactor.Ticket, WebAuthn: assertion})
	must("second step", err)
	v, err := c2.VerifyWebAuthnChallenge(ctx)
	must("step-up challenge", err)
	assertion, err = key.Get(v.Options)
	must("sign", err)
	must("step-up", c2.VerifySecondFactor(ctx, client.SecondFactorAnswer{Ticket: v.Ticket, WebAuthn: assertion}))
	_, err = c2.NewRecoveryCodes(ctx)
	must("new recovery codes", err)
	must("remove the TOTP factor", c2.RemoveSecondFactor(ctx, p.ID))
	n, err := admin.ResetSecondFactors(ctx, u.ID)
	must("reset", err)
	if n != 1 {
		t.Fatalf("reset removed %d", n)
	}
	must("delete the user of the second factors", admin.DeleteUser(ctx, u.ID))
}

// TestCLILoginWithSecondFactor: `vmgate login` for an account with a TOTP
// factor takes the password and then the code (the next line of stdin, or
// --second-factor), or a recovery code; a password alone, a wrong or a used
// code log nobody in (exit 3, no token saved).
func TestCLILoginWithSecondFactor(t *testing.T) {
	t.Parallel()
	const pw = "second factor on the command line"
	dir := t.TempDir()
	createAdmin(t, dir, "ops@example.com", pw)
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	base := srv.line(t, listening)[1]
	ctx := t.Context()
	c := checkedClient(t, base, "")
	if _, err := c.Login(ctx, "ops@example.com", pw); err != nil {
		t.Fatal(err)
	}
	p, err := c.BeginTOTP(ctx, "phone")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := secondfactor.TOTPCode(p.Secret, time.Now())
	codes, err := c.ConfirmTOTP(ctx, p.ID, first)
	if err != nil || len(codes) != 10 {
		t.Fatalf("confirm: %v %v", codes, err)
	}
	env := cliEnv(t)
	login := []string{"login", "--server", base, "--email", "ops@example.com", "--password-stdin"}
	// The password alone: stdin ends before a code.
	runCLI(t, env, pw+"\n", login...).want(t, 2, "a password alone")
	runCLI(t, env, "", "me").want(t, 3, "me after a password alone")
	// The confirmation's code again (same step: used).
	wrong := func(r result) {
		t.Helper()
		if !strings.Contains(r.stderr, "the second factor is wrong, used or too late") {
			t.Fatalf("stderr: %s", r.stderr)
		}
	}
	wrong(runCLI(t, env, pw+"\n"+first+"\n", login...).want(t, 3, "a used code"))
	// The next step's code, by flag.
	next, _ := secondfactor.TOTPCode(p.Secret, time.Now().Add(30*time.Second))
	runCLI(t, env, pw+"\n", append(login, "--second-factor", next)...).want(t, 0, "logged in")
	runCLI(t, env, "", "me").want(t, 0, "ops@example.com")
	// A recovery code on stdin works once.
	runCLI(t, env, pw+"\n"+codes[0]+"\n", login...).want(t, 0, "logged in")
	wrong(runCLI(t, env, pw+"\n"+codes[0]+"\n", login...).want(t, 3, "a used recovery code"))
}

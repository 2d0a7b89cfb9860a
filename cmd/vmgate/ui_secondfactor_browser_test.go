package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/vmgate/vmgate/internal/secondfactor"
)

// The second factors in the browser (issue 23 §2, docs/security.md item 41):
// TOTP and passkeys enrolled on the Account page and used at the log-in's second
// step, with Chromium's virtual authenticator (the DevTools WebAuthn domain)
// standing in for a security key, against the real binary.

// sfServer starts `vmgate server --dev` on a port of its own, reached as
// http://localhost:port (a passkey's RP ID is a host name, never an address), with
// extra flags.
func sfServer(t *testing.T, extra ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	public := "http://localhost:" + port
	args := append([]string{"server", "--dev", "--listen", "127.0.0.1:" + port, "--public-url", public}, extra...)
	p := start(t, []string{"VMGATE_DEV_PASSWORD=" + uiPassword}, args...)
	p.line(t, listening)
	return public
}

// totpNow is the code of secret at the wall clock's now plus d (the server's
// clock: the same machine).
func totpNow(t *testing.T, secret string, d time.Duration) string {
	t.Helper()
	c, err := secondfactor.TOTPCode(secret, time.Now().Add(d))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// enrolTOTP adds an authenticator app on the Account page and returns its secret
// and the recovery codes the page shows once.
func (b *browser) enrolTOTP() (string, []string) {
	b.t.Helper()
	b.open("/account")
	b.click("button", "Add an authenticator app")
	b.waitJS("the pending factor", `document.getElementById("totp-secret")`)
	secret := eval[string](b, `document.getElementById("totp-secret").value`)
	if !strings.HasPrefix(eval[string](b, `document.getElementById("totp-url").href`), "otpauth://totp/vmgate:") {
		b.t.Fatal("no otpauth URL on the page")
	}
	b.shot("totp-pending")
	b.typeInto("textbox", "The 6 digits the app shows", totpNow(b.t, secret, 0))
	b.click("button", "Confirm")
	b.waitJS("the recovery codes", `document.getElementById("recovery-codes")`)
	codes := strings.Fields(eval[string](b, `document.querySelector("#recovery-codes ul").innerText`))
	if len(codes) != 10 {
		b.t.Fatalf("recovery codes on the page: %v", codes)
	}
	b.shot("recovery-codes")
	return secret, codes
}

// logout logs out with the layout's button.
func (b *browser) logout() {
	b.t.Helper()
	b.click("button", "Log out")
	b.waitPath("/login")
}

// secondStep logs in with the password and waits for the second step's page.
func (b *browser) secondStep() {
	b.t.Helper()
	b.open("/login")
	b.login("admin@vmgate.local", uiPassword)
	b.waitText("Second factor")
	b.find("button", "Use a passkey")
}

// virtualAuthenticator adds a CTAP2 security key that answers at once.
func (b *browser) virtualAuthenticator() webauthn.AuthenticatorID {
	b.t.Helper()
	if _, err := chromedp.Call(b.ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		b.t.Fatalf("WebAuthn.enable: %v", err)
	}
	res, err := chromedp.Call(b.ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
		Options: &webauthn.VirtualAuthenticatorOptions{Protocol: webauthn.AuthenticatorProtocolCtap2,
			Transport: webauthn.AuthenticatorTransportUsb, HasUserVerification: true, IsUserVerified: true,
			AutomaticPresenceSimulation: true}})
	if err != nil {
		b.t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
	return res.AuthenticatorID
}

// TestUIBrowserSecondFactors: the dev admin enrols an authenticator app (secret,
// otpauth URL, confirmed with a code, 10 recovery codes shown once) and a passkey
// (the virtual authenticator); then the password alone leads to the second step,
// where a TOTP code, the passkey and a recovery code each log in, a wrong code is
// refused, and a copy of the passkey whose counter went back (a clone) is refused.
func TestUIBrowserSecondFactors(t *testing.T) {
	t.Parallel()
	base := sfServer(t)
	b := newBrowser(t, base, 1280, 900)
	b.open("/login")
	b.login("admin@vmgate.local", uiPassword)
	b.waitText("Log out")

	secret, codes := b.enrolTOTP()
	auth := b.virtualAuthenticator()
	b.typeInto("textbox", "Passkey name", "virtual key")
	b.click("button", "Add a passkey")
	b.waitText("The passkey is enrolled.")
	b.waitJS("two factors", `document.querySelectorAll("#factor-list tbody tr").length === 2`)
	b.shot("factors")
	b.logout()

	// TOTP: the code of the next step (the confirmation used this one's).
	b.secondStep()
	b.shot("second-step")
	b.typeInto("textbox", "The 6 digits of your authenticator app, or a recovery code", totpNow(t, secret, 30*time.Second))
	b.click("button", "Log in")
	b.waitText("Log out")
	b.logout()

	// The passkey.
	b.secondStep()
	b.click("button", "Use a passkey")
	b.waitText("Log out")
	b.logout()

	// A wrong code, then a recovery code.
	b.secondStep()
	b.expectRefused(func() {
		b.typeInto("textbox", "The 6 digits of your authenticator app, or a recovery code", "not-a-code")
		b.click("button", "Log in")
		b.waitText("That did not work")
	})
	b.typeInto("textbox", "The 6 digits of your authenticator app, or a recovery code", codes[0])
	b.click("button", "Log in")
	b.waitText("Log out")
	b.open("/account")
	b.waitText("Recovery codes left: 9")
	b.logout()

	// A clone: the same key with its counter back at 0 is refused.
	creds, err := chromedp.Call(b.ctx, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: auth})
	if err != nil || len(creds.Credentials) != 1 {
		t.Fatalf("the virtual key's credentials: %v %v", creds, err)
	}
	orig := creds.Credentials[0]
	if orig.SignCount < 1 {
		t.Fatalf("the key signed with counter %v", orig.SignCount)
	}
	// Sent as a map: the typed parameters carry fields this Chromium refuses.
	clone := map[string]any{"credentialId": orig.CredentialID, "isResidentCredential": false, "rpId": orig.RpID,
		"privateKey": orig.PrivateKey, "signCount": 0}
	if _, err := chromedp.Call(b.ctx, webauthn.RemoveVirtualAuthenticator, webauthn.RemoveVirtualAuthenticatorParams{AuthenticatorID: auth}); err != nil {
		t.Fatal(err)
	}
	second := b.virtualAuthenticator()
	addCredential := cdp.Command[map[string]any, cdp.Empty]{Method: webauthn.CommandAddCredential}
	if _, err := chromedp.Call(b.ctx, addCredential, map[string]any{"authenticatorId": second, "credential": clone}); err != nil {
		t.Fatalf("add the clone: %v", err)
	}
	b.secondStep()
	b.expectRefused(func() {
		b.click("button", "Use a passkey")
		b.waitText("That did not work")
	})
	b.shot("clone-refused")
	// It was refused for its counter: the audit trail says so.
	tok := apiLogin(t, base, codes[1])
	if audit := apiGet(t, base, tok, "/api/v1/audit?limit=50"); !strings.Contains(audit, `"reason":"webauthn_counter"`) {
		t.Fatalf("no refusal for the counter in the audit trail: %s", audit)
	}
}

// apiLogin logs the dev admin in over the API with a recovery code as the
// second factor and returns the token.
func apiLogin(t *testing.T, base, recovery string) string {
	t.Helper()
	var step struct {
		Data struct {
			SecondFactor struct{ Ticket string } `json:"secondFactor"`
		} `json:"data"`
	}
	apiPost(t, base, "/api/v1/user/login", `{"email":"admin@vmgate.local","password":"`+uiPassword+`"}`, &step)
	var done struct {
		Data struct{ Token string } `json:"data"`
	}
	apiPost(t, base, "/api/v1/user/login/second-factor",
		`{"ticket":"`+step.Data.SecondFactor.Ticket+`","recoveryCode":"`+recovery+`"}`, &done)
	if done.Data.Token == "" {
		t.Fatal("no token from the second step")
	}
	return done.Data.Token
}

func apiPost(t *testing.T, base, path, body string, out any) {
	t.Helper()
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %v", path, resp.StatusCode, err)
	}
}

func apiGet(t *testing.T, base, token, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// TestUIBrowserRequire2FA: under --require-2fa=all the dev admin, who has no
// second factor, is led to the Account page from every page until they enrol
// one; then the fleet opens.
func TestUIBrowserRequire2FA(t *testing.T) {
	t.Parallel()
	base := sfServer(t, "--require-2fa", "all")
	b := newBrowser(t, base, 1280, 900)
	b.open("/login")
	b.login("admin@vmgate.local", uiPassword)
	b.waitPath("/account")
	b.waitText("Enrol a second factor first")
	b.open("/vms")
	b.waitPath("/account")
	b.shot("must-enrol")
	b.enrolTOTP()
	b.open("/vms")
	b.waitPath("/vms")
	b.waitText("VMs")
}

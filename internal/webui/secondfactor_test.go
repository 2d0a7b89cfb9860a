package webui

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/secondfactor"
)

var (
	totpSecretField = regexp.MustCompile(`id="totp-secret" class="mono" value="([A-Z2-7]+)"`)
	totpConfirm     = regexp.MustCompile(`action="(/account/second-factors/totp/[A-Za-z0-9_-]+/confirm)"`)
	ticketField     = regexp.MustCompile(`name="ticket" value="([A-Za-z0-9_-]+)"`)
	recoveryItem    = regexp.MustCompile(`<li>([a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4})</li>`)
)

// TestSecondFactorsInTheUI: on the Account page a person enrols an
// authenticator app (a wrong code refused, the right one shows 10 recovery codes
// once); then the log-in form leads to the second step, which takes the next
// code and starts the session, and refuses a used one; an admin's reset on the
// user's page removes the factor (audited), and the password alone logs in again.
func TestSecondFactorsInTheUI(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2031, 5, 6, 7, 8, 0, 0, time.UTC)}
	e := newEnv(t, envOptions{clock: clk})
	op := e.browser()
	op.login(opEmail)
	if p := op.get("/account").expect(t, 200); !strings.Contains(p.body, "No second factor.") {
		t.Fatalf("account page:\n%s", clip(p.body, 3000))
	}
	p := op.post("/account/second-factors/totp", url.Values{"name": {"phone"}}).expect(t, 200)
	secret, confirm := totpSecretField.FindStringSubmatch(p.body), totpConfirm.FindStringSubmatch(p.body)
	if secret == nil || confirm == nil || !strings.Contains(p.body, `href="otpauth://totp/vmgate:`) {
		t.Fatalf("pending TOTP page:\n%s", clip(p.body, 4000))
	}
	code := func(d time.Duration) string {
		c, err := secondfactor.TOTPCode(secret[1], clk.Now().Add(d))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	wrong := "000000"
	if wrong == code(-30*time.Second) || wrong == code(0) || wrong == code(30*time.Second) {
		wrong = "000001"
	}
	if p := op.post(confirm[1], url.Values{"code": {wrong}}); p.status != http.StatusSeeOther {
		t.Fatalf("a wrong code: %d", p.status)
	}
	if p := op.get("/account"); !strings.Contains(p.body, "The code does not match") {
		t.Fatalf("no notice of the wrong code:\n%s", clip(p.body, 3000))
	}
	p = op.post(confirm[1], url.Values{"code": {code(0)}}).expect(t, 200)
	if got := recoveryItem.FindAllStringSubmatch(p.body, -1); len(got) != 10 {
		t.Fatalf("%d recovery codes on the page", len(got))
	}
	op.post("/logout", nil)

	// The log-in's second step.
	fresh := e.browser()
	fresh.get("/login")
	p = fresh.post("/login", url.Values{"email": {opEmail}, "password": {password}}).expect(t, 200)
	ticket := ticketField.FindStringSubmatch(p.body)
	if ticket == nil || fresh.sessionCookie() != "" {
		t.Fatalf("second step page (cookie %q):\n%s", fresh.sessionCookie(), clip(p.body, 3000))
	}
	form := func(c string) url.Values {
		return url.Values{"ticket": {ticket[1]}, "code": {c}, "next": {"/vms"}, "totp-offered": {"1"}}
	}
	// The confirmation's code is used: refused, the page again.
	if p := fresh.post("/login/second-factor", form(code(0))); p.status != http.StatusUnauthorized ||
		!strings.Contains(p.body, "That did not work") {
		t.Fatalf("a used code: %d\n%s", p.status, clip(p.body, 2000))
	}
	clk.Add(30 * time.Second)
	if p := fresh.post("/login/second-factor", form(code(0))); p.status != http.StatusSeeOther || p.location() != "/vms" {
		t.Fatalf("the next code: %d %s\n%s", p.status, p.location(), clip(p.body, 2000))
	}
	fresh.get("/vms").expect(t, 200)

	// The admin's reset.
	admin := e.browser()
	admin.login(adminEmail)
	uid := strconv.FormatInt(e.users[opEmail].ID, 10)
	admin.get("/admin/users/"+uid).expect(t, 200)
	if p := admin.post("/admin/users/"+uid+"/second-factors/reset", url.Values{"confirm": {"yes"}}); p.status != http.StatusSeeOther {
		t.Fatalf("reset: %d\n%s", p.status, clip(p.body, 2000))
	}
	es, err := e.trail.List(t.Context(), 5, 0)
	if err != nil || len(es) == 0 || es[0].Action != "second_factor.reset" {
		t.Fatalf("audit after the reset: %+v %v", es, err)
	}
	again := e.browser()
	again.login(opEmail)
}

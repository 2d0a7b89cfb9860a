package notify_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// TestTargetRules (docs/security.md item 44): only an admin manages targets, the writes from a login
// session; every field is checked; the secret is sealed at rest, bound to the
// target, and never in what the use cases return.
func TestTargetRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	ok := notify.TargetSpec{Name: "ops", Kind: notify.KindWebhook, Endpoint: "https://hooks.example.org/x", Secret: "hmac-key"}
	for _, c := range []struct {
		name   string
		actor  fleet.Actor
		spec   func(notify.TargetSpec) notify.TargetSpec
		kind   errs.Kind
		reason string
	}{
		{"a user", fleet.Actor{UserID: 2, Role: store.RoleUser}, nil, errs.Forbidden, ""},
		{"an admin's API token", fleet.Actor{UserID: 1, Role: store.RoleAdmin, APITokenID: "t1"}, nil, errs.Forbidden, errs.ReasonSessionRequired},
		{"a narrowed admin", fleet.Actor{UserID: 1, Role: store.RoleAdmin, Limit: map[int64]string{}}, nil, errs.Forbidden, ""},
		{"no kind", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Kind = "irc"; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"a control character", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Name = "a\x1b[2J"; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"a file URL", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Endpoint = "file:///etc/passwd"; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"credentials in the URL", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Endpoint = "https://u:p@h/x"; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"a webhook without a secret", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Secret = ""; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"an unknown event", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Filters.Events = []string{"vm.start"}; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"a bad severity", admin, func(s notify.TargetSpec) notify.TargetSpec { s.Filters.Severity = "loud"; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
		{"an SMTP password in the URL", admin, func(s notify.TargetSpec) notify.TargetSpec {
			s.Kind, s.Endpoint = notify.KindSMTP, "smtp://u:p@mail.example.org?from=a@example.org&to=b@example.org"
			return s
		}, errs.Invalid, errs.ReasonNotifyInvalid},
		{"SMTP without recipients", admin, func(s notify.TargetSpec) notify.TargetSpec {
			s.Kind, s.Endpoint = notify.KindSMTP, "smtp://mail.example.org?from=a@example.org"
			return s
		}, errs.Invalid, errs.ReasonNotifyInvalid},
		{"a negative rate", admin, func(s notify.TargetSpec) notify.TargetSpec { s.RatePerMinute = -1; return s }, errs.Invalid, errs.ReasonNotifyInvalid},
	} {
		spec := ok
		if c.spec != nil {
			spec = c.spec(ok)
		}
		_, err := e.svc.Create(ctx, c.actor, spec)
		got, isErr := errs.As(err)
		if !isErr || got.Kind != c.kind || (c.reason != "" && got.Reason != c.reason) {
			t.Errorf("%s: %v, want %v %s", c.name, err, c.kind, c.reason)
		}
	}
	tg, err := e.svc.Create(ctx, admin, ok)
	if err != nil {
		t.Fatal(err)
	}
	if !tg.HasSecret {
		t.Error("HasSecret false")
	}
	row, err := e.st.NotifyTargetByID(ctx, tg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(row.SecretSealed, []byte("hmac-key")) {
		t.Fatal("the secret is stored in the clear")
	}
	if clear, err := e.sealer.Open(row.SecretSealed, seal.NotifySecretAAD(tg.ID)); err != nil || string(clear) != "hmac-key" {
		t.Fatalf("the sealed secret: %q %v", clear, err)
	}
	if _, err := e.sealer.Open(row.SecretSealed, seal.NotifySecretAAD("nt_0000000000000000")); err == nil {
		t.Fatal("the secret opens for another target")
	}
	// A Slack URL is its secret: shown by host only.
	sl, err := e.svc.Create(ctx, admin, notify.TargetSpec{Name: "chat", Kind: notify.KindSlack, Endpoint: "https://hooks.slack.com/services/T0/B0/XYZsecret"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sl.Endpoint, "XYZsecret") || sl.Endpoint != "https://hooks.slack.com/…" {
		t.Errorf("a Slack target's endpoint as shown: %q", sl.Endpoint)
	}
	// A patch keeps the secret unless it gives one.
	name := "ops-2"
	up, err := e.svc.Update(ctx, admin, tg.ID, notify.TargetPatch{Name: &name})
	if err != nil || !up.HasSecret || up.Name != "ops-2" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if _, err := e.svc.Target(ctx, admin, "nt_../../x"); errs.KindOf(err) != errs.NotFound {
		t.Errorf("a malformed id: %v", err)
	}
}

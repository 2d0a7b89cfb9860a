package webui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
)

// TestNotificationsPage: an admin adds a webhook target with the page's form
// (its secret never shown again), sends it a test that reaches the receiver,
// and deletes it; a refused form says why; the page is an admin's only.
func TestNotificationsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	var got atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	t.Cleanup(rcv.Close)

	op := e.browser()
	op.login(opEmail)
	if p := op.get("/admin/notifications"); p.status != http.StatusForbidden {
		t.Fatalf("an operator's GET: %d", p.status)
	}
	b := e.browser()
	b.login(adminEmail)
	b.get("/admin/notifications").expect(t, 200)
	p := b.post("/admin/notifications", url.Values{"name": {"hook"}, "kind": {"webhook"}, "endpoint": {rcv.URL}})
	if !strings.Contains(p.body, "needs a secret") {
		t.Fatalf("a webhook without a secret: %d %s", p.status, p.body)
	}
	b.post("/admin/notifications", url.Values{"name": {"hook"}, "kind": {"webhook"}, "endpoint": {rcv.URL},
		"secret": {"page-secret-never-shown"}, "events": {"task.failed", "node.offline"}, "severity": {"warning"}, "rate": {"10"}})
	p = b.get("/admin/notifications")
	if !strings.Contains(p.body, "Notification target hook added.") || strings.Contains(p.body, "page-secret-never-shown") ||
		!strings.Contains(p.body, "task.failed, node.offline; warning and worse; at most 10 a minute") {
		t.Fatalf("after adding: %s", p.body)
	}
	test := regexp.MustCompile(`action="(/admin/notifications/nt_[0-9a-f]{16})/test"`).FindStringSubmatch(p.body)
	if test == nil {
		t.Fatal("no Send test")
	}
	b.post(test[1]+"/test", nil)
	if p := b.get("/admin/notifications"); !strings.Contains(p.body, "The test was delivered") || got.Load() != 1 {
		t.Fatalf("send test: %d requests, %s", got.Load(), p.body)
	}
	b.post(test[1]+"/delete", url.Values{"confirm": {"yes"}})
	if p := b.get("/admin/notifications"); !strings.Contains(p.body, "Notification target removed.") ||
		!strings.Contains(p.body, "None yet") {
		t.Fatalf("delete: %s", p.body)
	}
}

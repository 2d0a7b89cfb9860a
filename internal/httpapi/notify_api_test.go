package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// TestNotificationRoutes (docs/security.md item 44): an admin makes, reads,
// changes, tests and deletes a target, and retries a dead letter; the secret is
// in no answer; a user is refused; every answer is checked against
// api/openapi.yaml.
func TestNotificationRoutes(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("admin", accounts.RoleAdmin)
	e.addUser("user", accounts.RoleUser)
	status := http.StatusNotFound // what the receiver answers at first
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	t.Cleanup(rcv.Close)

	if w := e.do("user", "GET", "/api/v1/notifications/targets", ""); w.Code != http.StatusForbidden {
		t.Fatalf("a user's list: %d", w.Code)
	}
	w := e.do("admin", "POST", "/api/v1/notifications/targets", fmt.Sprintf(
		`{"name":"hook","kind":"webhook","endpoint":%q,"secret":"route-secret","filters":{"events":["node.offline"],"severity":"error"}}`, rcv.URL))
	if w.Code != 200 || strings.Contains(w.Body.String(), "route-secret") {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var tg struct {
		ID        string `json:"id"`
		HasSecret bool   `json:"hasSecret"`
	}
	json.Unmarshal(envelopeOf(t, w).Data, &tg)
	if !tg.HasSecret {
		t.Fatalf("created %s", w.Body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/notifications/targets", ""},
		{"GET", "/api/v1/notifications/targets/" + tg.ID, ""},
		{"PATCH", "/api/v1/notifications/targets/" + tg.ID, `{"ratePerMinute":5}`},
	} {
		if w := e.do("admin", c.method, c.path, c.body); w.Code != 200 || strings.Contains(w.Body.String(), "route-secret") {
			t.Fatalf("%s %s: %d %s", c.method, c.path, w.Code, w.Body)
		}
	}
	if w := e.do("admin", "POST", "/api/v1/notifications/targets/"+tg.ID+"/test", ""); w.Code != 200 ||
		!strings.Contains(w.Body.String(), `"delivered":false`) || !strings.Contains(w.Body.String(), `"status":404`) {
		t.Fatalf("test against a refusing receiver: %d %s", w.Code, w.Body)
	}
	// An event the receiver refuses is dead at once; Retry sends it again.
	if err := e.store.EnqueueNotifications(t.Context(), []store.NotifyEvent{{Kind: notify.EventNodeOffline,
		Severity: notify.SeverityError, ClusterID: 1, Subject: "node pve2 is offline"}}); err != nil {
		t.Fatal(err)
	}
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	sender := notify.NewSender(notify.SenderConfig{Store: e.store, Sealer: sealer, Owner: "t"})
	if _, err := sender.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	w = e.do("admin", "GET", "/api/v1/notifications/deliveries?state=dead&target="+tg.ID, "")
	var dead []struct {
		ID        int64  `json:"id"`
		LastError string `json:"lastError"`
	}
	json.Unmarshal(envelopeOf(t, w).Data, &dead)
	if w.Code != 200 || len(dead) != 1 || !strings.Contains(dead[0].LastError, "not retried") {
		t.Fatalf("dead letters: %d %s", w.Code, w.Body)
	}
	status = http.StatusNoContent
	if w := e.do("admin", "POST", fmt.Sprintf("/api/v1/notifications/deliveries/%d/retry", dead[0].ID), ""); w.Code != 200 ||
		!strings.Contains(w.Body.String(), `"state":"pending"`) {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	if w := e.do("admin", "POST", fmt.Sprintf("/api/v1/notifications/deliveries/%d/retry", dead[0].ID), ""); w.Code != http.StatusConflict {
		t.Fatalf("retry of a pending one: %d %s", w.Code, w.Body)
	}
	if w := e.do("admin", "DELETE", "/api/v1/notifications/targets/"+tg.ID, ""); w.Code != 200 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	if w := e.do("admin", "GET", "/api/v1/notifications/targets/"+tg.ID, ""); w.Code != http.StatusNotFound {
		t.Fatalf("a deleted target: %d", w.Code)
	}
}

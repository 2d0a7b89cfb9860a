package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/audit"
)

// recordingUI is a web UI that remembers what reached it.
type recordingUI struct {
	paths []string
	facts []audit.Facts
}

func (u *recordingUI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.paths = append(u.paths, r.URL.Path)
	u.facts = append(u.facts, audit.FactsFrom(r.Context()))
	w.Header().Set("Content-Type", "text/html")
	w.Write([]byte("<p>ui</p>"))
}

func (u *recordingUI) Route(r *http.Request) string { return "GET /page" }

// TestUIPassesTheOuterLayer: a path that reaches the UI (TestUIHook says which)
// has passed the outer layer like the API's: a request id, the client address and
// request id in the context's facts for the audit trail; the API's own headers
// are not forced on it.
func TestUIPassesTheOuterLayer(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ui := &recordingUI{}
	cfg := e.apiConfig()
	cfg.UI = ui
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/vms", nil)
	r.RemoteAddr = "192.0.2.9:1234"
	r.Header.Set("X-Request-Id", "req-vms")
	w := httptest.NewRecorder()
	api.ServeHTTP(w, r)
	if w.Body.String() != "<p>ui</p>" || w.Header().Get("X-Request-Id") != "req-vms" ||
		strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("UI answer: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if len(ui.facts) != 1 || ui.facts[0].Address != "192.0.2.9" || ui.facts[0].RequestID != "req-vms" || ui.facts[0].UserID != 0 {
		t.Fatalf("facts the UI got: %+v", ui.facts)
	}
}

package httpapi

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"github.com/vmgate/vmgate/internal/accounts"
)

// TestPVEMetrics: /metrics counts what vmgate asks of each cluster.
func TestPVEMetrics(t *testing.T) {
	e := newTestEnv(t)
	sim := e.addSim("lab")
	e.addUser("root", accounts.RoleAdmin)
	for i := 0; i < 5; i++ { // VM status reads: each goes to PVE (lists may share a snapshot)
		if w := e.do("root", "GET", fmt.Sprintf("/api/v1/pve/vm/%d/pve1/100", sim.id), ""); w.Code != 200 {
			t.Fatalf("VM status: %d %s", w.Code, w.Body)
		}
	}
	w := e.send(fromLoopback(httptest.NewRequest("GET", "/metrics", nil)))
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^vmgate_pve_requests_total\{cluster="%d"\} (\d+)$`, sim.id)).FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatalf("no vmgate_pve_requests_total for cluster %d in:\n%s", sim.id, w.Body)
	}
	if n, _ := strconv.Atoi(m[1]); n < 5 {
		t.Errorf("vmgate_pve_requests_total = %d after 5 VM status reads", n)
	}
	for _, name := range []string{"vmgate_pve_connections_total", "vmgate_pve_failovers_total", "vmgate_pve_retries_total", "vmgate_pve_tls_failures_total"} {
		if !regexp.MustCompile(`(?m)^` + name + `\{cluster="\d+"\} \d+$`).MatchString(w.Body.String()) {
			t.Errorf("no %s", name)
		}
	}
}

// fromLoopback makes r come from a loopback peer, as /metrics requires by default
// (httptest's requests come from 192.0.2.1).
func fromLoopback(r *http.Request) *http.Request {
	r.RemoteAddr = "127.0.0.1:40000"
	return r
}

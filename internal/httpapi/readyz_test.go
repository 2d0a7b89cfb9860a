package httpapi

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
)

// TestReadyzNamesTheStore: with the store down, /readyz answers 503 naming the
// store (reason store_unavailable, dependency "store") with a Retry-After, never
// cluster_unavailable.
func TestReadyzNamesTheStore(t *testing.T) {
	e := newTestEnv(t)
	if w := e.send(httptest.NewRequest("GET", "/readyz", nil)); w.Code != 200 {
		t.Fatalf("/readyz with the store up: %d %s", w.Code, w.Body)
	}
	e.store.Close()
	w := e.send(httptest.NewRequest("GET", "/readyz", nil))
	var body struct {
		Reason     string `json:"reason"`
		Dependency string `json:"dependency"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz body %s: %v", w.Body, err)
	}
	if w.Code != 503 || body.Reason != errs.ReasonStoreUnavailable || body.Dependency != "store" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("/readyz with the store down: %d %s (Retry-After %q), want 503 %s naming the store with a Retry-After",
			w.Code, w.Body, w.Header().Get("Retry-After"), errs.ReasonStoreUnavailable)
	}
}

// TestReadyzNamesAClusterThatIsDown: a registered cluster none of whose
// endpoints answers is named in /readyz's 200 answer (status degraded, by id),
// while one that answers is not; the replica stays ready.
func TestReadyzNamesAClusterThatIsDown(t *testing.T) {
	e := newTestEnv(t)
	up := e.addSim("up")
	down := e.addSim("down")
	for _, n := range down.c.Nodes() {
		if err := down.c.SetNodeOnline(n, false); err != nil {
			t.Fatal(err)
		}
	}
	w := e.send(httptest.NewRequest("GET", "/readyz", nil))
	var body struct {
		Data struct {
			Status      string `json:"status"`
			Unavailable []struct {
				ClusterID int64  `json:"clusterId"`
				Reason    string `json:"reason"`
			} `json:"unavailable"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 {
		t.Fatalf("/readyz: %d %s", w.Code, w.Body)
	}
	d := body.Data
	if d.Status != "degraded" || len(d.Unavailable) != 1 || d.Unavailable[0].ClusterID != down.id ||
		d.Unavailable[0].Reason != "cluster_unavailable" {
		t.Fatalf("/readyz with cluster %d down and %d up: %s", down.id, up.id, w.Body)
	}
}

package httpapi

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/dbclock"
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

// TestReadyzFailsOnClockSkew: with the replica's clock more than 30 s off the
// database's (internal/dbclock, offsets injected), /readyz answers 503
// clock_skew naming the clock and saying what to do; within 30 s it is ready.
func TestReadyzFailsOnClockSkew(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		offset time.Duration // the database's clock less the replica's
		ready  bool
	}{
		{-60 * time.Second, false}, {-10 * time.Second, true}, {10 * time.Second, true}, {60 * time.Second, false},
	} {
		t.Run(tt.offset.String(), func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t)
			clock := dbclock.New(dbclock.Config{Measure: func(context.Context) (time.Duration, error) { return tt.offset, nil }})
			if err := clock.Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			cfg := e.apiConfig()
			cfg.Gates = []ReadyGate{{Name: "clock", Check: clock.Ready}}
			api, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			apitest.Wrap(t, api).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
			var body struct {
				Reason     string `json:"reason"`
				Message    string `json:"message"`
				Dependency string `json:"dependency"`
			}
			json.Unmarshal(w.Body.Bytes(), &body)
			switch {
			case tt.ready && w.Code != 200:
				t.Fatalf("/readyz %v off: %d %s, want 200", tt.offset, w.Code, w.Body)
			case !tt.ready && (w.Code != 503 || body.Reason != dbclock.ReasonClockSkew || body.Dependency != "clock" ||
				!strings.Contains(body.Message, "NTP") || w.Header().Get("Retry-After") == ""):
				t.Fatalf("/readyz %v off: %d %s, want 503 clock_skew naming the clock", tt.offset, w.Code, w.Body)
			}
		})
	}
}

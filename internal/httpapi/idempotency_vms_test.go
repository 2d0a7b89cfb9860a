package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/idempotency"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/testkit"
)

// TestIdempotencyVMs: an Idempotency-Key replays the first answer of the same
// request and starts nothing, refuses another request under the key (422) and a
// repeat while the first runs (409 in_progress), and is never sent on to PVE.
func TestIdempotencyVMs(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	key := "Idempotency-Key: migrate-100-to-pve2"
	body := `{"target":"pve2"}`
	first := e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", body, key).expect(t, 200, "")
	upid := first.header.Get("X-Task-Id")
	// Insignificant white space in the body is the same request.
	again := e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", "{ \"target\": \"pve2\" }", key).expect(t, 200, "")
	if string(again.raw) != string(first.raw) || again.header.Get("X-Task-Id") != upid || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay %s %v, first %s", again.raw, again.header, first.raw)
	}
	if n := e.dev.Requests("POST", simMigrate); n != 1 {
		t.Fatalf("PVE got %d migrate POSTs", n)
	}
	e.call("op", "POST", e.vmPath("pve1", 100)+"/migrate", `{"target":"pve3"}`, key).expect(t, 422, "idempotency_key_reused")
	e.call("op", "POST", e.vmPath("pve1", 100)+"/start", "", key).expect(t, 422, "idempotency_key_reused")
	// Keys are per user.
	e.call("root", "POST", e.vmPath("pve1", 101)+"/start", "", key).expect(t, 200, "")
	if v := e.waitTask("op", upid); v.Result != "ok" {
		t.Fatalf("migration %+v", v)
	}

	// Syntax: 1 to 255 printable ASCII characters.
	for _, bad := range []string{"Idempotency-Key: " + strings.Repeat("k", 256), "Idempotency-Key: caf\xc3\xa9"} {
		e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?force=true", "", bad).expect(t, 400, "invalid_request")
	}

	// A refusal that started nothing does not hold the key: the retry runs again.
	k2 := "Idempotency-Key: start-running"
	e.call("op", "POST", e.vmPath("pve2", 102)+"/start", "", k2).expect(t, 409, "vm_running")
	a := e.call("op", "POST", e.vmPath("pve2", 102)+"/start", "", k2).expect(t, 409, "vm_running")
	if a.header.Get("Idempotent-Replayed") != "" {
		t.Error("a refusal that started nothing was replayed")
	}

	// A failed task's answer is kept and replayed: the task did start.
	k3 := "Idempotency-Key: stop-104"
	a = e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?timeout=5", "", k3).expect(t, 409, "shutdown_timeout")
	b := e.call("op", "POST", e.vmPath("pve3", 104)+"/stop?timeout=5", "", k3).expect(t, 409, "shutdown_timeout")
	if b.header.Get("X-Task-Id") != a.header.Get("X-Task-Id") || b.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("failed task not replayed: %v / %v", a.header, b.header)
	}
	if n := e.dev.Requests("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown"); n != 1 {
		t.Errorf("PVE got %d shutdowns", n)
	}
}

// TestIdempotencyInProgress: while the first request still waits for its task, a
// repeat under its key is 409 in_progress, and once the task has ended the repeat
// replays the first answer. The emulator's clock moves only when the test says
// so: the start's task cannot end, nor its wait run out (60 s), before the repeat
// has had its answer, however slow the machine (issue 17, docs/history.md).
func TestIdempotencyInProgress(t *testing.T) {
	t.Parallel()
	e := newVMEnvWith(t, pvesim.Options{ManualClock: true})
	key := "Idempotency-Key: slow-start"
	path := e.vmPath("pve3", 105) + "/start?wait=60"
	slow := make(chan answer, 1)
	go func() { slow <- e.call("op", "POST", path, "", key) }()
	// The key is held from before the POST goes to PVE until the answer.
	testkit.Until(t, "the first start's POST at PVE", func() bool { return e.dev.Requests("POST", simStart) == 1 })
	e.call("op", "POST", path, "", key).expect(t, 409, "in_progress")

	// The task ends when its emulated second has passed: move the clock until
	// the first request has its answer.
	var first answer
	testkit.Until(t, "the first start's answer", func() bool {
		select {
		case first = <-slow:
			return true
		default:
			e.dev.Advance(time.Second)
			return false
		}
	})
	if first.status != 200 {
		t.Fatalf("the first start %d %s, want 200 (its task ended)", first.status, first.raw)
	}
	replayed := e.call("op", "POST", path, "", key).expect(t, 200, "")
	if replayed.header.Get("X-Task-Id") != first.header.Get("X-Task-Id") || replayed.header.Get("Idempotent-Replayed") != "true" ||
		string(replayed.raw) != string(first.raw) {
		t.Errorf("replay of the slow start %v %s, first %v %s", replayed.header, replayed.raw, first.header, first.raw)
	}
	if n := e.dev.Requests("POST", simStart); n != 1 {
		t.Errorf("PVE got %d start POSTs, want 1", n)
	}
}

// TestEveryPVEWriteIsKeyed: every POST of the route table under /api/v1/pve/ —
// each may start something in PVE — takes an Idempotency-Key through the keyed
// middleware, which checks the header before anything else the route checks: a
// malformed key is 400 for a caller without any grant (docs/design.md §3.2).
func TestEveryPVEWriteIsKeyed(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	h := apitest.Wrap(t, e.api)
	vals := e.vals()
	seen := 0
	for _, rt := range e.allRoutes() {
		if rt.method != "POST" || !strings.HasPrefix(rt.pattern, "/api/v1/pve/") {
			continue
		}
		seen++
		r := routeRequest(rt, vals, e.tokens["nobody"])
		r.Header.Set("Idempotency-Key", strings.Repeat("k", 256))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if env := envelopeOf(t, w); w.Code != 400 || !strings.Contains(env.Message, "Idempotency-Key") {
			t.Errorf("POST %s with a malformed key: %d %s, want 400 naming the key", rt.pattern, w.Code, w.Body)
		}
	}
	if seen < 12 { // start, stop, reboot, migrate of both kinds, a VM's suspend and resume, evacuate, bulk
		t.Errorf("only %d keyed routes", seen)
	}
}

// TestRefusedRequestReleasesItsKey: a request the grant check refuses (before
// anything reaches PVE) does not keep its key: once the caller has the grant, the
// same request under the same key runs instead of replaying the refusal.
func TestRefusedRequestReleasesItsKey(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	key := "Idempotency-Key: start-101-as-viewer"
	e.call("view", "POST", e.vmPath("pve1", 101)+"/start", "", key).expect(t, 403, "forbidden")
	if _, err := e.fleet.PutGrant(context.Background(), setupActor, e.users["view"].ID, e.cid, fleet.GrantOperator); err != nil {
		t.Fatal(err)
	}
	a := e.call("view", "POST", e.vmPath("pve1", 101)+"/start", "", key).expect(t, 200, "")
	if a.header.Get("Idempotent-Replayed") != "" || a.header.Get("X-Task-Id") == "" {
		t.Errorf("the retry with the grant: %v %s, want it run", a.header, a.raw)
	}
	if n := e.dev.Requests("POST", simStart); n != 1 {
		t.Errorf("PVE got %d start POSTs, want 1", n)
	}
}

// TestKeyOfAPanickingRequest: a handler that panics under a key (a bug: outer
// answers 500) does not leave its key in progress for the life of the process:
// the key is settled from what the request wrote — here nothing, so it is
// released and a retry runs.
func TestKeyOfAPanickingRequest(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	op := e.users["op"]
	bug := e.api.keyed(func(http.ResponseWriter, *http.Request) error { panic("a bug") })
	r := httptest.NewRequest("POST", e.vmPath("pve1", 101)+"/start", nil)
	r.Header.Set("Idempotency-Key", "panics")
	r = r.WithContext(context.WithValue(r.Context(), infoKey, &reqInfo{base: slog.Default(),
		principal: &auth.Principal{UserID: op.ID}}))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not pass through the middleware")
			}
		}()
		bug(httptest.NewRecorder(), r)
	}()
	got, err := e.keys.Claim(context.Background(), idempotency.Key{UserID: op.ID, Name: "panics"}, "any")
	if err != nil || !got.Claimed {
		t.Errorf("the key after the panic: %+v %v, want it released", got, err)
	}
}

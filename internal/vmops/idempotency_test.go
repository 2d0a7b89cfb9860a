package vmops

import (
	"context"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// TestIdempotencyKeys: a key is claimed once; a repeat sees the claim (running, then
// with its kept answer); a released key can be claimed again.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	u, err := e.store.CreateUser(ctx, store.User{Email: "idem@example.org", PasswordHash: "x", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.svc.ClaimKey(ctx, u.ID, "k1", "hash-a")
	if err != nil || !first.Claimed {
		t.Fatalf("first claim: %+v (%v)", first, err)
	}
	running, err := e.svc.ClaimKey(ctx, u.ID, "k1", "hash-a")
	if err != nil || running.Claimed || running.Done || running.RequestHash != "hash-a" || running.Since.IsZero() {
		t.Fatalf("claim while running: %+v (%v)", running, err)
	}
	answer := Answer{Status: 202, Headers: map[string]string{"X-Task-Id": "UPID:x"}, Body: []byte(`{"code":202}`)}
	if err := e.svc.KeepAnswer(ctx, u.ID, "k1", answer); err != nil {
		t.Fatal(err)
	}
	done, err := e.svc.ClaimKey(ctx, u.ID, "k1", "hash-b")
	if err != nil || done.Claimed || !done.Done || done.RequestHash != "hash-a" || done.Answer.Status != 202 ||
		done.Answer.Headers["X-Task-Id"] != "UPID:x" || string(done.Answer.Body) != `{"code":202}` {
		t.Fatalf("claim after the answer: %+v (%v)", done, err)
	}
	// A key whose request started nothing is released and runs again.
	if c, err := e.svc.ClaimKey(ctx, u.ID, "k2", "hash-c"); err != nil || !c.Claimed {
		t.Fatalf("claim k2: %+v (%v)", c, err)
	}
	if err := e.svc.ReleaseKey(ctx, u.ID, "k2"); err != nil {
		t.Fatal(err)
	}
	if c, err := e.svc.ClaimKey(ctx, u.ID, "k2", "hash-d"); err != nil || !c.Claimed {
		t.Errorf("claim of a released key: %+v (%v)", c, err)
	}
}

func TestValidators(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"UPID:pve1:0000A1B2:0001C3D4:65F0A1B2:qmstart:100:vmgate@pve!gw:": true,
		"UPID:pve1:x": false,
		"":            false,
	} {
		if got := ValidTaskID(id); got != want {
			t.Errorf("ValidTaskID(%q) = %v", id, got)
		}
	}
	if !ValidNode("pve1") || ValidNode("../etc") || ValidNode("") {
		t.Error("ValidNode")
	}
}

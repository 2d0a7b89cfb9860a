package pve_test

// The client against the emulator behind internal/faultproxy: the network
// fails between the two, PVE itself is fine.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/faultproxy"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// proxied returns a client whose only endpoint is pve1 behind a fault proxy
// (TLS passes through the proxy, so pve1's pin still holds).
func proxied(t *testing.T, env *simEnv) (*pve.Client, *faultproxy.Proxy) {
	t.Helper()
	ep := env.eps[0]
	p, err := faultproxy.New(ep.URL[len("https://"):], faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	c := env.client(t, func(cfg *pve.Config) {
		cfg.Endpoints = []pve.Endpoint{{URL: "https://" + p.Addr(), Fingerprint: ep.Fingerprint}}
	})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, p
}

const startRoute = "/nodes/{node}/qemu/{vmid}/status/start"

// A POST that PVE received but whose answer was lost: the client lists the
// task of the node's task list as the one candidate (which request it belongs
// to is the caller's to decide); PVE saw one POST.
func TestFaultResetAfterPOSTListsTheTask(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	c, p := proxied(t, env)
	p.ResetAfterForwarding(1)
	_, err := c.Start(context.Background(), pve.VMOn("pve1", 101), pve.StartOptions{})
	var amb *pve.AmbiguousError
	if !errors.As(err, &amb) || len(amb.Candidates) != 1 {
		t.Fatalf("StartVM through a reset after forwarding: %v, want one candidate", err)
	}
	if got := env.cluster.Requests("POST", startRoute); got != 1 {
		t.Errorf("PVE received %d POSTs, want 1", got)
	}
	u := amb.Candidates[0]
	if ts, ok := env.cluster.Task(u.String()); !ok || ts.Type != "qmstart" {
		t.Errorf("the candidate, %s, is not the start task", u)
	}
	if s := p.Stats(); s.Resets != 1 {
		t.Errorf("proxy stats %+v", s)
	}
}

// A POST reset before it reached PVE: the client cannot know that, looks,
// finds nothing, and says the outcome is unknown — without sending it again.
func TestFaultResetBeforePOSTIsAmbiguousNotRepeated(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	c, p := proxied(t, env)
	p.ResetBeforeForwarding(1)
	_, err := c.Start(context.Background(), pve.VMOn("pve1", 101), pve.StartOptions{})
	var amb *pve.AmbiguousError
	if !errors.As(err, &amb) || len(amb.Candidates) != 0 || amb.LookupErr != nil {
		t.Fatalf("err = %v, want an AmbiguousError without candidates", err)
	}
	if got := env.cluster.Requests("POST", startRoute); got != 0 {
		t.Errorf("PVE received %d POSTs, want 0", got)
	}
}

// An answer cut mid-body: a read fails over to a new attempt and succeeds.
func TestFaultCutAnswerIsRetried(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	c, p := proxied(t, env)
	const route = "/nodes/{node}/qemu/{vmid}/status/current"
	before := env.cluster.Requests("GET", route)
	p.CutAfter(faultproxy.ToClient, 200, 1)
	st, err := c.GuestStatus(context.Background(), pve.VMOn("pve1", 100))
	if err != nil || st.Status != "running" {
		t.Fatalf("VMStatus = %+v, %v", st, err)
	}
	if got := env.cluster.Requests("GET", route) - before; got != 2 {
		t.Errorf("PVE answered %d reads, want the cut one and its retry", got)
	}
	if s := p.Stats(); s.Cuts != 1 {
		t.Errorf("proxy stats %+v", s)
	}
}

// A black-holed PVE: the read ends at its deadline as a timeout; after the
// heal the client works again.
func TestFaultBlackHoleTimesOutAndHeals(t *testing.T) {
	t.Parallel()
	env := startSim(t, pvesim.Options{})
	c, p := proxied(t, env)
	p.BlackHole()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := c.GuestStatus(ctx, pve.VMOn("pve1", 100))
	cancel()
	if !errors.Is(err, pve.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if got := env.cluster.Requests("GET", "/nodes/{node}/qemu/{vmid}/status/current"); got != 0 {
		t.Errorf("PVE received %d reads through a black hole", got)
	}
	p.Heal()
	if _, err := c.GuestStatus(context.Background(), pve.VMOn("pve1", 100)); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

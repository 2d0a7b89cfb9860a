package notify_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// fakeNodes answers /nodes as the test sets it, and counts the reads.
type fakeNodes struct {
	mu    sync.Mutex
	nodes map[string]string // node → status; nil: the cluster does not answer
	reads int
}

func (f *fakeNodes) read(context.Context, int64) ([]pve.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.nodes == nil {
		return nil, errors.New("connection refused")
	}
	var out []pve.Node
	for n, s := range f.nodes {
		out = append(out, pve.Node{Node: n, Status: s})
	}
	return out, nil
}

func (f *fakeNodes) set(nodes map[string]string) {
	f.mu.Lock()
	f.nodes = nodes
	f.mu.Unlock()
}

// TestHealthWatch: node and cluster events come from the watch's reads, on
// changes only; one replica reads a cluster while its lease lives, and the
// next holder goes on from what it saw (no event repeated, none made up).
func TestHealthWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	if _, err := e.st.CreateCluster(ctx, store.Cluster{Name: "lab", TokenID: "a@pve!b",
		Endpoints: []store.Endpoint{{URL: "https://10.0.0.1:8006"}}}); err != nil {
		t.Fatal(err)
	}
	f := &fakeNodes{nodes: map[string]string{"pve1": "online", "pve2": "online"}}
	a := notify.NewHealth(e.st, f.read, "replica-a", e.clock.Now, nil)
	b := notify.NewHealth(e.st, f.read, "replica-b", e.clock.Now, nil)
	kinds := func() []string {
		evs, err := e.st.UnfannedNotifications(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			out = append(out, ev.Kind+" "+ev.Subject)
		}
		return out
	}
	tick := func(h *notify.Health) {
		h.Step(ctx)
		e.advance(notify.HealthEvery)
	}
	tick(a) // the first read: what is, not a change
	tick(b) // a's lease holds: b reads nothing
	if f.reads != 1 {
		t.Fatalf("%d reads by two replicas in one lease", f.reads)
	}
	f.set(map[string]string{"pve1": "online", "pve2": "offline"})
	tick(a)
	tick(a)
	f.set(nil)
	tick(a) // one failed read is not an outage
	if got := kinds(); len(got) != 1 || got[0] != "node.offline node pve2 of cluster lab is offline" {
		t.Fatalf("events: %q", got)
	}
	tick(a)
	// a dies: its lease runs out; b goes on from a's state.
	e.advance(3 * notify.HealthEvery)
	f.set(map[string]string{"pve1": "online", "pve2": "online"})
	tick(b)
	want := []string{"node.offline node pve2 of cluster lab is offline",
		"cluster.unreachable cluster lab does not answer: connection refused",
		"cluster.recovered cluster lab answers again",
		"node.online node pve2 of cluster lab is online"}
	if got := kinds(); len(got) != len(want) {
		t.Fatalf("events: %q", got)
	} else {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("events: %q\nwant %q", got, want)
			}
		}
	}
}

package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// testLoginNetworks (docs/security.md item 28): a login network is remembered per account
// and network with the latest time it was noted — an earlier note, from a replica
// whose login raced, never moves it back — and Prune forgets those not logged in
// from for LoginNetworksOlderThan, leaving the rest.
func testLoginNetworks(t *testing.T, s store.Store) {
	ctx := t.Context()
	seen := func(account, network string, want time.Time) {
		t.Helper()
		got, err := s.LoginNetworkSeen(ctx, account, network)
		ok(t, err, "login network seen")
		same(t, got.Equal(want), true, account+" from "+network+" seen at "+got.String()+", want "+want.String())
	}
	seen("alice@example.com", "192.0.2.1", time.Time{})
	ok(t, s.NoteLoginNetwork(ctx, "alice@example.com", "192.0.2.1", ago(40*24*time.Hour)), "note")
	ok(t, s.NoteLoginNetwork(ctx, "alice@example.com", "2001:db8:1::/64", ago(2*time.Hour)), "note")
	ok(t, s.NoteLoginNetwork(ctx, "bob@example.com", "192.0.2.1", ago(time.Hour)), "note")
	seen("alice@example.com", "192.0.2.1", ago(40*24*time.Hour))
	seen("alice@example.com", "2001:db8:1::/64", ago(2*time.Hour))
	seen("alice@example.com", "198.51.100.1", time.Time{})

	var wg sync.WaitGroup
	for _, d := range []time.Duration{3 * time.Hour, time.Hour, 5 * time.Hour, 90 * time.Minute} {
		wg.Go(func() {
			if err := s.NoteLoginNetwork(ctx, "alice@example.com", "2001:db8:1::/64", ago(d)); err != nil {
				t.Errorf("note: %v", err)
			}
		})
	}
	wg.Wait()
	seen("alice@example.com", "2001:db8:1::/64", ago(time.Hour))

	res, err := s.Prune(ctx, pruneNow, store.PruneOptions{LoginNetworksOlderThan: 30 * 24 * time.Hour, Batch: 1})
	ok(t, err, "prune")
	same(t, res.LoginNetworks, int64(1), "login networks pruned")
	seen("alice@example.com", "192.0.2.1", time.Time{})
	seen("alice@example.com", "2001:db8:1::/64", ago(time.Hour))
	seen("bob@example.com", "192.0.2.1", ago(time.Hour))
}

package storetest

import (
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// testConsoleTickets (docs/security.md item 37): a console ticket comes back whole
// once and never again; an expired one never; of eight redeemers racing for one
// ticket exactly one gets it; issuing a ticket forgets the expired ones.
func testConsoleTickets(t *testing.T, s store.Store) {
	ctx := t.Context()
	ct, isKeeper := s.(store.ConsoleTickets)
	if !isKeeper {
		t.Fatalf("%T keeps no console tickets", s)
	}
	want := store.ConsoleTicket{Hash: "aa01", UserID: 7, SessionID: "sess-1", ClusterID: 3, Node: "pve1", VMID: 100,
		GuestKind: store.GuestQemu, Type: "vnc", CreatedAt: at(0), ExpiresAt: at(30 * time.Second)}
	ok(t, ct.CreateConsoleTicket(ctx, want), "issue")
	wantKind(t, ct.CreateConsoleTicket(ctx, want), errs.Conflict, "the same hash twice")
	got, err := ct.RedeemConsoleTicket(ctx, want.Hash, at(29*time.Second))
	ok(t, err, "redeem")
	same(t, got, want, "redeemed ticket")
	_, err = ct.RedeemConsoleTicket(ctx, want.Hash, at(time.Second))
	wantKind(t, err, errs.NotFound, "a ticket redeemed before")
	_, err = ct.RedeemConsoleTicket(ctx, "ffff", at(0))
	wantKind(t, err, errs.NotFound, "an unknown ticket")

	token := store.ConsoleTicket{Hash: "bb02", UserID: 7, APITokenID: "tok1", ClusterID: 3, Node: "pve2", VMID: 200,
		GuestKind: store.GuestLXC, Type: "term", CreatedAt: at(0), ExpiresAt: at(30 * time.Second)}
	ok(t, ct.CreateConsoleTicket(ctx, token), "issue to a token")
	_, err = ct.RedeemConsoleTicket(ctx, token.Hash, at(30*time.Second))
	wantKind(t, err, errs.NotFound, "a ticket at its expiry")
	_, err = ct.RedeemConsoleTicket(ctx, token.Hash, at(0))
	wantKind(t, err, errs.NotFound, "an expired ticket, tried again")

	racing := want
	racing.Hash = "cc03"
	ok(t, ct.CreateConsoleTicket(ctx, racing), "issue the raced ticket")
	won := make([]bool, 8)
	race(t, s, len(won), func(i int) {
		_, err := ct.RedeemConsoleTicket(ctx, racing.Hash, at(time.Second))
		won[i] = err == nil
		if err != nil && errs.KindOf(err) != errs.NotFound {
			t.Errorf("redeemer %d: %v", i, err)
		}
	})
	oneWinner(t, won, "redeemers of one ticket")

	old := want
	old.Hash = "dd04"
	ok(t, ct.CreateConsoleTicket(ctx, old), "issue a ticket that will expire")
	later := want
	later.Hash, later.CreatedAt, later.ExpiresAt = "ee05", at(time.Hour), at(time.Hour+30*time.Second)
	ok(t, ct.CreateConsoleTicket(ctx, later), "a later issue")
	// The later issue forgot dd04: even a clock that went back finds nothing.
	_, err = ct.RedeemConsoleTicket(ctx, old.Hash, at(time.Second))
	wantKind(t, err, errs.NotFound, "an expired ticket after a later issue")
}

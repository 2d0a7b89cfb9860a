package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// testSecondFactors (docs/security.md item 41): a factor is pending until
// confirmed; a TOTP step is accepted once, even by racing replicas, and never an
// earlier one after it; a passkey's counter only moves forward; removing the last
// confirmed factor takes the recovery codes with it; an admin's reset removes
// everything of the user and nobody else's.
func testSecondFactors(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice, bob := mkUser(t, s, "alice@example.com"), mkUser(t, s, "bob@example.com")
	totp, err := s.CreateSecondFactor(ctx, store.SecondFactor{ID: "f1", UserID: alice.ID, Kind: store.FactorTOTP,
		Name: "phone", Secret: []byte("sealed"), CreatedAt: at(0)})
	ok(t, err, "create totp")
	_, err = s.CreateSecondFactor(ctx, store.SecondFactor{ID: "f1", UserID: bob.ID, Kind: store.FactorTOTP, CreatedAt: at(0)})
	wantKind(t, err, errs.Conflict, "a duplicate id")
	_, err = s.CreateSecondFactor(ctx, store.SecondFactor{ID: "fx", UserID: 99999, Kind: store.FactorTOTP, CreatedAt: at(0)})
	wantKind(t, err, errs.NotFound, "a missing user")

	used, err := s.UseTOTPStep(ctx, totp.ID, 10, at(time.Second))
	ok(t, err, "use pending")
	same(t, used, false, "a pending factor's code accepted")
	wantKind(t, s.ConfirmSecondFactor(ctx, bob.ID, totp.ID, 10, at(time.Second)), errs.NotFound, "another user confirms")
	ok(t, s.ConfirmSecondFactor(ctx, alice.ID, totp.ID, 10, at(time.Second)), "confirm")
	wantKind(t, s.ConfirmSecondFactor(ctx, alice.ID, totp.ID, 11, at(time.Second)), errs.NotFound, "confirmed twice")

	won := make([]bool, 8)
	race(t, s, len(won), func(i int) {
		ok2, err := s.UseTOTPStep(ctx, totp.ID, 12, at(2*time.Second))
		if err != nil {
			t.Errorf("use step: %v", err)
		}
		won[i] = ok2
	})
	oneWinner(t, won, "use of step 12")
	for _, step := range []int64{12, 11, 10} {
		used, err := s.UseTOTPStep(ctx, totp.ID, step, at(3*time.Second))
		ok(t, err, "replay")
		same(t, used, false, "step accepted again or after a newer one")
	}

	key, err := s.CreateSecondFactor(ctx, store.SecondFactor{ID: "f2", UserID: alice.ID, Kind: store.FactorWebAuthn,
		Name: "key", CredentialID: []byte{1, 2, 3}, Credential: `{"id":"AQID"}`, SignCount: 4, CreatedAt: at(time.Minute),
		ConfirmedAt: at(time.Minute)})
	ok(t, err, "create passkey")
	_, err = s.CreateSecondFactor(ctx, store.SecondFactor{ID: "f3", UserID: bob.ID, Kind: store.FactorWebAuthn,
		CredentialID: []byte{1, 2, 3}, CreatedAt: at(0)})
	wantKind(t, err, errs.Conflict, "a credential enrolled twice")
	for _, c := range []struct {
		count int64
		want  bool
	}{{4, false}, {3, false}, {5, true}, {5, false}, {9, true}} {
		moved, err := s.UseCredential(ctx, key.ID, c.count, at(2*time.Minute))
		ok(t, err, "use credential")
		same(t, moved, c.want, "counter accepted")
	}

	list, err := s.UserSecondFactors(ctx, alice.ID)
	ok(t, err, "list")
	same(t, len(list), 2, "alice's factors")
	same(t, list[0].ID+list[1].ID, "f1f2", "order")
	same(t, list[0].LastStep, int64(12), "last step")
	same(t, list[0].Secret, []byte("sealed"), "sealed secret")
	same(t, list[1].SignCount, int64(9), "sign count")
	same(t, list[0].ConfirmedAt.Equal(at(time.Second)), true, "confirmed at")

	hashes := [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}
	ok(t, s.ReplaceRecoveryCodes(ctx, alice.ID, hashes), "codes")
	won = make([]bool, 6)
	race(t, s, len(won), func(i int) {
		ok2, err := s.UseRecoveryCode(ctx, alice.ID, hashes[0], at(time.Hour))
		if err != nil {
			t.Errorf("use code: %v", err)
		}
		won[i] = ok2
	})
	oneWinner(t, won, "use of a recovery code")
	gone, err := s.UseRecoveryCode(ctx, bob.ID, hashes[1], at(time.Hour))
	ok(t, err, "bob uses alice's code")
	same(t, gone, false, "another user's code accepted")
	left, err := s.RecoveryCodesLeft(ctx, alice.ID)
	ok(t, err, "left")
	same(t, left, 1, "codes left")

	ok(t, s.DeleteSecondFactor(ctx, alice.ID, totp.ID), "delete totp")
	wantKind(t, s.DeleteSecondFactor(ctx, alice.ID, totp.ID), errs.NotFound, "delete twice")
	wantKind(t, s.DeleteSecondFactor(ctx, bob.ID, key.ID), errs.NotFound, "bob deletes alice's key")
	left, _ = s.RecoveryCodesLeft(ctx, alice.ID)
	same(t, left, 1, "codes left while a factor remains")
	ok(t, s.DeleteSecondFactor(ctx, alice.ID, key.ID), "delete the last")
	left, _ = s.RecoveryCodesLeft(ctx, alice.ID)
	same(t, left, 0, "codes left without a factor")

	// Tickets: failures count, an answer takes the ticket once, dead ones stay dead.
	tk := store.SecondFactorTicket{ID: []byte("ticket-1"), UserID: alice.ID, Purpose: store.TicketLogin,
		Address: "192.0.2.1", CreatedAt: at(0), ExpiresAt: at(5 * time.Minute)}
	ok(t, s.CreateSecondFactorTicket(ctx, tk, 3), "ticket")
	got, err := s.SecondFactorTicketByID(ctx, tk.ID)
	ok(t, err, "read ticket")
	same(t, got.Purpose+got.Address, "login192.0.2.1", "ticket")
	ok(t, s.SetSecondFactorChallenge(ctx, tk.ID, `{"c":1}`), "challenge")
	for want := 1; want <= 2; want++ {
		n, err := s.FailSecondFactorTicket(ctx, tk.ID)
		ok(t, err, "fail")
		same(t, n, want, "failures")
	}
	taken, err := s.TakeSecondFactorTicket(ctx, tk.ID, 2, at(time.Minute))
	ok(t, err, "take")
	same(t, taken, false, "a ticket with its failures used up taken")
	taken, err = s.TakeSecondFactorTicket(ctx, tk.ID, 5, at(6*time.Minute))
	ok(t, err, "take")
	same(t, taken, false, "an expired ticket taken")
	won = make([]bool, 4)
	race(t, s, len(won), func(i int) {
		ok2, err := s.TakeSecondFactorTicket(ctx, tk.ID, 5, at(time.Minute))
		if err != nil {
			t.Errorf("take: %v", err)
		}
		won[i] = ok2
	})
	oneWinner(t, won, "take of a ticket")
	_, err = s.SecondFactorTicketByID(ctx, tk.ID)
	wantKind(t, err, errs.NotFound, "a taken ticket")
	_, err = s.FailSecondFactorTicket(ctx, tk.ID)
	wantKind(t, err, errs.NotFound, "a failure of a taken ticket")

	for i := range 5 { // the per-user cap keeps the newest 3
		ok(t, s.CreateSecondFactorTicket(ctx, store.SecondFactorTicket{ID: []byte{byte('a' + i)}, UserID: bob.ID,
			Purpose: store.TicketLogin, CreatedAt: at(time.Duration(i) * time.Second), ExpiresAt: at(time.Hour)}, 3), "ticket")
	}
	for i, want := range []bool{false, false, true, true, true} {
		_, err := s.SecondFactorTicketByID(ctx, []byte{byte('a' + i)})
		same(t, err == nil, want, "ticket kept under the cap")
	}
	// Proofs of a fresh factor, per session, moving forward only.
	sess := mkSession(t, s, "sid-1", alice.ID, at(24*time.Hour))
	none, err := s.SecondFactorProof(ctx, sess.ID)
	ok(t, err, "no proof")
	same(t, none.IsZero(), true, "proof of a session that gave none")
	ok(t, s.NoteSecondFactorProof(ctx, sess.ID, alice.ID, at(2*time.Minute)), "proof")
	ok(t, s.NoteSecondFactorProof(ctx, sess.ID, alice.ID, at(time.Minute)), "older proof")
	when, err := s.SecondFactorProof(ctx, sess.ID)
	ok(t, err, "proof")
	same(t, when.Equal(at(2*time.Minute)), true, "proof at "+when.String())

	// An admin's reset.
	_, err = s.CreateSecondFactor(ctx, store.SecondFactor{ID: "f4", UserID: bob.ID, Kind: store.FactorTOTP, CreatedAt: at(0),
		ConfirmedAt: at(0)})
	ok(t, err, "bob's factor")
	_, err = s.CreateSecondFactor(ctx, store.SecondFactor{ID: "f5", UserID: alice.ID, Kind: store.FactorTOTP, CreatedAt: at(0),
		ConfirmedAt: at(0)})
	ok(t, err, "alice's factor")
	ok(t, s.ReplaceRecoveryCodes(ctx, bob.ID, hashes), "bob's codes")
	n, err := s.DeleteUserSecondFactors(ctx, bob.ID)
	ok(t, err, "reset")
	same(t, n, 1, "factors reset")
	left, _ = s.RecoveryCodesLeft(ctx, bob.ID)
	same(t, left, 0, "bob's codes after the reset")
	list, _ = s.UserSecondFactors(ctx, alice.ID)
	same(t, len(list), 1, "alice's factors after bob's reset")
	_, err = s.SecondFactorTicketByID(ctx, []byte{'e'})
	wantKind(t, err, errs.NotFound, "bob's ticket after the reset")
}

package vmops

import (
	"context"
	"encoding/json"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// IdempotencyTTL is how long a claimed Idempotency-Key is remembered.
const IdempotencyTTL = store.IdempotencyTTL

// Answer is the first answer to a request made with an Idempotency-Key, kept so that
// a repeat replays it. vmops keeps it as given; what it means is the front end's.
type Answer struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// KeyClaim is what ClaimKey found.
type KeyClaim struct {
	// Claimed: the key is the caller's now; run the request, then KeepAnswer or
	// ReleaseKey. Otherwise the rest describes the request that holds the key.
	Claimed     bool
	RequestHash string
	Done        bool   // it ended and Answer is its answer; otherwise it still runs
	Answer      Answer // when Done
	Since       time.Time
}

// ClaimKey claims key for userID's request identified by requestHash, for
// IdempotencyTTL, unless an unexpired claim of the key exists; then it returns that
// claim. Idempotency keys are kept by vmops because only VM operations take them
// (DESIGN §3.2) and whether an answer may be forgotten depends on ErrMaybeStarted.
func (s *Service) ClaimKey(ctx context.Context, userID int64, key, requestHash string) (KeyClaim, error) {
	now := s.now()
	got, claimed, err := s.store.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: userID, Key: key,
		RequestHash: requestHash, State: store.IdemInProgress, CreatedAt: now, ExpiresAt: now.Add(IdempotencyTTL)})
	if err != nil {
		return KeyClaim{}, err
	}
	if claimed {
		return KeyClaim{Claimed: true, RequestHash: requestHash, Since: now}, nil
	}
	out := KeyClaim{RequestHash: got.RequestHash, Done: got.State == store.IdemDone, Since: got.CreatedAt}
	if out.Done {
		out.Answer = Answer{Status: got.StatusCode, Body: got.Body}
		_ = json.Unmarshal([]byte(got.Headers), &out.Answer.Headers) // written by KeepAnswer; none is fine
	}
	return out, nil
}

// KeepAnswer stores the answer to the request that claimed key, for replays.
func (s *Service) KeepAnswer(ctx context.Context, userID int64, key string, a Answer) error {
	if a.Headers == nil {
		a.Headers = map[string]string{}
	}
	hdr, err := json.Marshal(a.Headers)
	if err != nil {
		return err
	}
	return s.store.CompleteIdempotencyKey(ctx, store.IdempotencyRecord{UserID: userID, Key: key, State: store.IdemDone,
		StatusCode: a.Status, Headers: string(hdr), Body: a.Body})
}

// ReleaseKey forgets the claim of a request that started nothing, so that a retry
// runs again.
func (s *Service) ReleaseKey(ctx context.Context, userID int64, key string) error {
	return s.store.ReleaseIdempotencyKey(ctx, userID, key, "") // claims name no owner (yet): see store.IdempotencyRecord
}

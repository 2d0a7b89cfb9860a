package frontend

import (
	"context"
	"encoding/json"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/secondfactor"
)

// SecondFactors is internal/secondfactor: the second step of a login, the
// caller's factors, the step-up and --require-2fa. *secondfactor.Service is one.
type SecondFactors interface {
	Login(ctx context.Context, ticket string, answer secondfactor.Answer, addr string) (secondfactor.LoginResult, error)
	LoginWebAuthn(ctx context.Context, ticket string) (json.RawMessage, error)

	Overview(ctx context.Context, p auth.Principal) (secondfactor.Overview, error)
	BeginTOTP(ctx context.Context, p auth.Principal, name string) (secondfactor.PendingTOTP, error)
	ConfirmTOTP(ctx context.Context, p auth.Principal, id, code string) ([]string, error)
	BeginPasskey(ctx context.Context, p auth.Principal) (string, json.RawMessage, error)
	FinishPasskey(ctx context.Context, p auth.Principal, ticket, name string, credential []byte) (secondfactor.Factor, []string, error)
	Remove(ctx context.Context, p auth.Principal, id string) error
	NewRecoveryCodes(ctx context.Context, p auth.Principal) ([]string, error)
	Verify(ctx context.Context, p auth.Principal, ticket string, answer secondfactor.Answer) error
	VerifyWebAuthn(ctx context.Context, p auth.Principal) (string, json.RawMessage, error)
	Reset(ctx context.Context, p auth.Principal, userID int64) (int, error)

	// RequireEnrolled refuses every request of a user --require-2fa holds to a
	// second factor they do not have, but the enrolment's own.
	RequireEnrolled(ctx context.Context, p auth.Principal) error
}

var _ SecondFactors = (*secondfactor.Service)(nil)

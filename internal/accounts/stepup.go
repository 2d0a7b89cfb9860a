package accounts

import (
	"context"

	"github.com/vmgate/vmgate/internal/auth"
)

// StepUp asks a caller who has a second factor for one given recently before a
// sensitive change (issue 23 §2: creating an API token); *secondfactor.Service
// is one. Nil asks nothing.
type StepUp interface {
	RequireFresh(ctx context.Context, p auth.Principal, attempt string) error
}

// stepUp runs Config.StepUp's check when there is one.
func (s *Service) stepUp(ctx context.Context, p auth.Principal, attempt string) error {
	if s.fresh == nil {
		return nil
	}
	return s.fresh.RequireFresh(ctx, p, attempt)
}

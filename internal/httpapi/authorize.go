package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The use cases check the caller's grant themselves (docs/security.md items 18,
// 19; issue 18 (docs/history.md)): a handler hands them the caller, with the
// request as it was made (Via) for the audit record of a refusal, and renders
// what they answer.

// via names the request as the caller made it, for the audit record of a
// refused grant: "POST /api/v1/pve/vm/1/pve1/100/start".
func via(r *http.Request) string { return r.Method + " " + r.URL.Path }

// actor is the caller as internal/fleet sees it: an API token's grants go along
// as the actor's Limit, which the fleet applies under the owner's at every check,
// and its id, which no grant change accepts.
func actor(r *http.Request) fleet.Actor {
	p := principal(r)
	return fleet.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role, Limit: p.TokenGrants, APITokenID: p.APITokenID,
		Via: via(r)}
}

// vmActor is the caller as the use cases of internal/vmops take it, with the
// request's Idempotency-Key (validated by then; "" when none). The audit trail
// takes the rest of the request from the context.
func vmActor(r *http.Request) vmops.Actor {
	p := principal(r)
	key, _, _ := idempotencyKey(r)
	return vmops.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role, Limit: p.TokenGrants, APITokenID: p.APITokenID,
		Via: via(r), Key: key}
}

// pathClusterID reads and validates {clusterId}.
func pathClusterID(r *http.Request) (int64, error) {
	return parseIntParam("clusterId", r.PathValue("clusterId"), 1, 1<<53)
}

package errs

// Reasons of grants scoped to pools and tags (issue 23 section 3).
const (
	// ReasonScopedGrant (kind Forbidden): the action is on a whole node or
	// cluster (an evacuation, maintenance), and the caller's grant there covers
	// only some guests (a pool or tag scope): it needs a cluster-wide operator
	// grant.
	ReasonScopedGrant = "scoped_grant"
)

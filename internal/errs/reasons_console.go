package errs

// The console's reasons (issue 21).
const (
	// ReasonTooManyConsoles (kind RateLimited): the caller holds as many consoles
	// open as one user may, or vmgate as many as it serves in all
	// (docs/security.md item 38).
	ReasonTooManyConsoles = "too_many_consoles"
)

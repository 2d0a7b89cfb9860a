package errs

// Reasons of single sign-on (issue 23 section 1, docs/decisions/0109).
const (
	// ReasonSSOFailed (kind Unauthenticated): a single sign-on did not prove who
	// the caller is — the provider refused, the state was unknown, used or of
	// another browser, or the ID token failed a check. The cause goes to the log
	// and the audit trail only.
	ReasonSSOFailed = "sso_failed"
	// ReasonSSONotConfigured (kind NotFound): vmgate has no OpenID Provider
	// configured, so there is no single sign-on to start.
	ReasonSSONotConfigured = "sso_not_configured"
	// ReasonSSOBusy (kind RateLimited): too many single sign-ons under way, from
	// the client's network or in all.
	ReasonSSOBusy = "sso_busy"
)

package errs

// Reasons of second factors (issue 23 §2, docs/security.md item 41).
const (
	// ReasonSecondFactorRequired (kind Forbidden): the caller has a second factor
	// and did not give one in the last 5 minutes; creating an API token or
	// removing a factor needs a fresh one (POST /api/v1/user/second-factors/verify).
	ReasonSecondFactorRequired = "second_factor_required"
	// ReasonEnrolmentRequired (kind Forbidden): --require-2fa says this user must
	// have a second factor and they have none; until they enrol one, nothing else
	// is allowed.
	ReasonEnrolmentRequired = "second_factor_enrolment_required"
	// ReasonSecondFactorWrong (kind Unauthenticated): the second step's answer
	// was wrong, replayed, or the ticket is unknown, expired or spent; one
	// answer for all of them.
	ReasonSecondFactorWrong = "second_factor_invalid"
)

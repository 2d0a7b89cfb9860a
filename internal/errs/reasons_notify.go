package errs

// Reasons of the notifications (internal/notify, issue 24).
const (
	// ReasonNotifyInvalid (kind Invalid): a notification target's field is not
	// what it must be (its message names the field).
	ReasonNotifyInvalid = "notify_invalid_target"
	// ReasonNotifyTooMany (kind Conflict): vmgate holds as many notification
	// targets as it may (notify.MaxTargets); one goes first.
	ReasonNotifyTooMany = "notify_too_many_targets"
)

// Package errs is vmgate's one error type. Every layer returns *errs.Error (or wraps
// one) when the failure means something to a caller; the HTTP layer alone turns the
// Kind into a status code, through one table in internal/httpapi.
//
// A Kind says what class of failure it is; a Reason is the stable snake_case word a
// client can branch on (docs/design.md §3); Message is what a person can act on. Err keeps
// the cause for the server log and is never shown to clients.
package errs

import (
	"context"
	"errors"
	"fmt"
)

// Kind classifies an error. The HTTP layer maps each Kind to one status code.
type Kind int

// The kinds, one per row of docs/design.md §3's table.
const (
	Internal         Kind = iota // a bug; details only in the server log
	Invalid                      // malformed input: 400
	Unauthenticated              // no or bad credentials: 401
	Forbidden                    // authenticated but not allowed: 403
	NotFound                     // no such thing (or not visible to the caller): 404
	MethodNotAllowed             // 405
	Conflict                     // the state forbids it: 409
	TooLarge                     // body over the limit: 413
	Unprocessable                // 422 (idempotency key reused)
	RateLimited                  // 429
	Upstream                     // PVE answered with an unexpected error: 502
	Unavailable                  // no PVE endpoint answers: 503
	Timeout                      // PVE did not answer in time: 504
	UnsupportedMedia             // a body that is not JSON: 415
)

var kindNames = map[Kind]string{
	Internal: "internal", Invalid: "invalid_request", Unauthenticated: "unauthenticated",
	Forbidden: "forbidden", NotFound: "not_found", MethodNotAllowed: "method_not_allowed",
	Conflict: "conflict", TooLarge: "payload_too_large", Unprocessable: "unprocessable",
	RateLimited: "rate_limited", Upstream: "upstream_error", Unavailable: "cluster_unavailable",
	Timeout: "upstream_timeout", UnsupportedMedia: "unsupported_media_type",
}

// Reasons shared by several packages. A kind's default reason names the usual cause
// (Unavailable: a PVE cluster); these name another one, so a client and an operator
// can tell which dependency failed.
const (
	// ReasonStoreUnavailable (kind Unavailable): vmgate's own database did not answer
	// in time or refused the connection. It says nothing about the clusters.
	ReasonStoreUnavailable = "store_unavailable"
	// ReasonStoreFull (kind Unavailable): vmgate's database answers but has no room
	// for a write: its disk is full (SQLite's SQLITE_FULL, PostgreSQL's disk_full,
	// SQLSTATE 53100). Reads still work; an operator must free space.
	ReasonStoreFull = "store_full"
	// ReasonStoreReadOnly (kind Unavailable): vmgate's database answers but refuses
	// writes: a read-only file or file system (SQLITE_READONLY), a PostgreSQL
	// standby or read-only transaction (SQLSTATE 25006). Reads still work.
	ReasonStoreReadOnly = "store_read_only"
	// ReasonStoreUnwritable (kind Unavailable) is /readyz's answer when its write
	// probe fails, whatever the cause (full, read-only, ...): the replica cannot do
	// its work and a load balancer should take it out.
	ReasonStoreUnwritable = "store_unwritable"

	// ReasonSessionRequired (kind Forbidden): the caller authenticated with an API
	// token, and the action manages credentials — users, grants, API tokens,
	// passwords, sessions — which only a login session may (docs/security.md item 32): a
	// leaked token must not be able to make itself permanent or lock its owner out.
	ReasonSessionRequired = "session_required"

	// ReasonTooManyStreams (kind RateLimited): the caller holds as many event
	// streams as one user or one session may (docs/security.md item 34); one ends first.
	ReasonTooManyStreams = "too_many_streams"
)

// String returns the default reason of the kind.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is vmgate's error. Message and Reason are safe to show to a client; Err is not.
type Error struct {
	Kind    Kind
	Reason  string // snake_case; empty means Kind's default reason
	Message string // for the client
	Err     error  // the cause, for logs only
	// Details are extra, client-safe fields added to the error envelope (e.g. PVE's
	// reasons for a blocked migration). Keys are JSON names.
	Details map[string]any
	// RetryAfter, when positive, is sent as Retry-After (seconds) with 429/503.
	RetryAfter int
}

// Error implements error. It includes the cause for logs.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ReasonOrDefault returns Reason, or the Kind's default reason when Reason is empty.
func (e *Error) ReasonOrDefault() string {
	if e.Reason != "" {
		return e.Reason
	}
	return e.Kind.String()
}

// E builds an *Error with a formatted client message.
func E(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// R builds an *Error with an explicit reason.
func R(kind Kind, reason, format string, args ...any) *Error {
	return &Error{Kind: kind, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error that keeps cause for the log.
func Wrap(kind Kind, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Err: cause}
}

// KindOf returns the Kind of the first *Error in err's chain, or Internal.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// Is reports whether err's chain holds an *Error of the given kind.
func Is(err error, kind Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}

// As returns the first *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// ReasonRequestTimeout is the reason of a request that ran out of its own
// deadline while waiting on something that did not classify the failure itself
// (the store and PVE say store_unavailable and upstream_timeout). It is a 503
// with Retry-After, like every other "not now".
const ReasonRequestTimeout = "request_timeout"

// TimedOut classifies an error that no layer classified, when ctx's deadline
// (the request's) is why it happened: Unavailable, request_timeout, rather than
// an internal error. Every front end (the API, the web UI) answers so.
func TimedOut(ctx context.Context, err error) error {
	if _, ok := As(err); ok || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return &Error{Kind: Unavailable, Reason: ReasonRequestTimeout, Err: err, RetryAfter: 1,
		Message: "vmgate could not answer within the request's time limit; try again"}
}

// The reasons of guest actions, accounts and requests (docs/design.md §3). The API,
// the web UI and the CLI branch on these words; they are written here once.
const (
	// ReasonVMRunning, ReasonVMStopped, ReasonVMPaused (kind Conflict): the guest's
	// power state forbids the action (a container answers with the same words).
	ReasonVMRunning = "vm_running"
	ReasonVMStopped = "vm_stopped"
	ReasonVMPaused  = "vm_paused"
	// ReasonVMLocked (kind Conflict): PVE holds a lock on the guest (backup, migrate…).
	ReasonVMLocked = "vm_locked"
	// ReasonShutdownTimeout (kind Conflict): PVE's graceful shutdown ran out of its
	// timeout; the guest ignored the request. A forced stop powers it off.
	ReasonShutdownTimeout = "shutdown_timeout"
	// ReasonNodeOffline (kind Conflict): the node the action needs is offline.
	ReasonNodeOffline = "node_offline"
	// ReasonMigrationBlocked (kind Conflict): PVE's pre-check refuses the migration.
	ReasonMigrationBlocked = "migration_blocked"
	// ReasonInProgress (kind Conflict): another action on the same thing is running
	// (an action on the guest, or a request with the same Idempotency-Key).
	ReasonInProgress = "in_progress"
	// ReasonIdempotencyKeyReused (kind Unprocessable): one Idempotency-Key sent with
	// another request.
	ReasonIdempotencyKeyReused = "idempotency_key_reused"
	// ReasonNameTaken (kind Conflict): the name belongs to another cluster, token...
	ReasonNameTaken = "name_taken"
	// ReasonLastAdmin (kind Conflict): the change would leave no active administrator.
	ReasonLastAdmin = "last_admin"
	// ReasonShuttingDown (kind Unavailable): this replica is draining.
	ReasonShuttingDown = "shutting_down"
	// ReasonNotReady (kind Unavailable): a readiness gate is not passed yet.
	ReasonNotReady = "not_ready"
	// ReasonTaskFinished (kind Conflict): the task to abort has ended already.
	ReasonTaskFinished = "task_finished"
	// ReasonNotOffered (kind Invalid): vmgate does not offer this action for this
	// kind of guest (a container's suspend: PVE marks it experimental).
	ReasonNotOffered = "not_offered"
)

package pve

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinels. Every error the client returns wraps at most one of them, so a
// caller can map it with errors.Is.
var (
	// ErrUnavailable: no endpoint answered — every attempt failed to connect,
	// failed its TLS handshake, got a 595/596 for a cluster-wide request, or was
	// skipped because the endpoint's circuit is open. vmgate answers 503.
	ErrUnavailable = errors.New("no PVE endpoint is available")
	// ErrTimeout: the call's deadline passed before PVE answered. vmgate answers 504.
	ErrTimeout = errors.New("PVE did not answer in time")
	// ErrNodeOffline: the endpoint answered, but the node the request is about
	// could not be reached from it (PVE's 595/596 proxy pseudo-statuses). Other
	// endpoints would proxy to the same node, so the client does not fail over.
	ErrNodeOffline = errors.New("PVE node is offline")
	// ErrBadResponse: PVE's answer is not what PVE sends (malformed JSON, a
	// body over the size limit, a UPID for another node or VM, ...). vmgate
	// answers 502.
	ErrBadResponse = errors.New("unexpected answer from PVE")
)

// Error is an HTTP error answer from PVE. It keeps everything PVE said: the
// status, the reason phrase (where PVE puts the message of bodiless errors such
// as "401 No ticket" or "595 No route to host"), the body's message and the
// per-parameter errors of a 400.
type Error struct {
	StatusCode int
	Reason     string            // the status line's text after the code, e.g. "Authentication failed!"
	Message    string            // the body's "message" (or plain-text body), trailing newline trimmed; may be empty
	Errors     map[string]string // parameter → problem, from a 400's "errors"
	Method     string            // the request's method
	Path       string            // the request's path below /api2/json
	Endpoint   string            // the endpoint URL that answered
	// Plain says Message is a body that was not JSON — PVE's errors raised outside
	// its handlers, or a page of whatever else answered (a proxy, another
	// server) — rather than the "message" of PVE's JSON envelope.
	Plain bool
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pve: %s %s: %d", e.Method, e.Path, e.StatusCode)
	if msg := e.Text(); msg != "" {
		b.WriteString(" ")
		b.WriteString(msg)
	}
	if len(e.Errors) > 0 {
		keys := make([]string, 0, len(e.Errors))
		for k := range e.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s: %s", k, e.Errors[k])
		}
		b.WriteString(")")
	}
	return b.String()
}

// Text returns the most telling text PVE gave: the body's message if any,
// else the reason phrase.
func (e *Error) Text() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Reason
}

// TLSError says an endpoint's certificate was refused: it did not match the
// pinned fingerprint, or did not verify against the CA bundle or system roots.
// The request was not sent to that endpoint (the token never left vmgate).
type TLSError struct {
	Endpoint  string // the endpoint URL
	Expected  string // the pinned fingerprint; empty when verifying with a CA
	Presented string // SHA-256 fingerprint of the certificate the endpoint presented ("" if none)
	Err       error  // the verification error (CA mode), if any
}

// Error implements error.
func (e *TLSError) Error() string {
	switch {
	case e.Expected != "":
		return fmt.Sprintf("pve: %s presented a certificate with fingerprint %s, but %s is pinned",
			e.Endpoint, orNone(e.Presented), e.Expected)
	case e.Err != nil:
		return fmt.Sprintf("pve: certificate of %s (fingerprint %s) does not verify: %v",
			e.Endpoint, orNone(e.Presented), e.Err)
	default:
		return fmt.Sprintf("pve: certificate of %s (fingerprint %s) refused", e.Endpoint, orNone(e.Presented))
	}
}

// Unwrap returns the verification error.
func (e *TLSError) Unwrap() error { return e.Err }

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// NodeOfflineError says the node a request is about could not be reached by
// the PVE endpoint that proxied it (595/596). It wraps ErrNodeOffline and the
// *Error PVE answered with.
type NodeOfflineError struct {
	Node string
	Err  *Error
}

// Error implements error.
func (e *NodeOfflineError) Error() string {
	return fmt.Sprintf("pve: node %s is offline or unreachable (%d %s via %s)",
		e.Node, e.Err.StatusCode, e.Err.Text(), e.Err.Endpoint)
}

// Unwrap returns ErrNodeOffline and PVE's answer.
func (e *NodeOfflineError) Unwrap() []error { return []error{ErrNodeOffline, e.Err} }

// AmbiguousError says a write may or may not have reached PVE (the
// connection broke or the deadline passed after the request was sent). The
// write was not repeated. Candidates lists the tasks of the node's task list
// that might be it (its VM, type and token, started since shortly before the
// write); which one is — if any — only the caller can tell, since another
// request of its own may have started one of them.
type AmbiguousError struct {
	Method, Path, Endpoint string
	Node                   string
	VMID                   int
	Candidates             []UPID
	Err                    error // why the outcome is unknown
	LookupErr              error // why the task list did not help, if it failed
}

// Error implements error.
func (e *AmbiguousError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pve: outcome of %s %s at %s unknown: %v", e.Method, e.Path, e.Endpoint, e.Err)
	switch {
	case e.LookupErr != nil:
		fmt.Fprintf(&b, "; task list unreadable: %v", e.LookupErr)
	case len(e.Candidates) == 1:
		fmt.Fprintf(&b, "; 1 candidate task (%s)", e.Candidates[0])
	case len(e.Candidates) > 1:
		fmt.Fprintf(&b, "; %d candidate tasks", len(e.Candidates))
	default:
		b.WriteString("; no matching task found")
	}
	return b.String()
}

// Unwrap returns the cause (a timeout wraps ErrTimeout).
func (e *AmbiguousError) Unwrap() error { return e.Err }

// NotSentError says a write certainly did not reach PVE: it was refused before
// it left (a bad argument), no endpoint could be connected to (or its
// certificate was refused, or its circuit was open), or the caller's deadline
// passed before the request was written. Nothing can have started; the write
// may be made again. It wraps the reason (ErrUnavailable, ErrTimeout, ...).
type NotSentError struct {
	Err error
}

// Error implements error.
func (e *NotSentError) Error() string { return e.Err.Error() }

// Unwrap returns the reason.
func (e *NotSentError) Unwrap() error { return e.Err }

// NotSent reports whether err, returned by a write, proves that PVE never got
// the request, so that no task can have started: a *NotSentError, an
// ErrInvalidArgument (refused before anything was sent), or PVE's proxy
// answering 595 (the node the request was for could not be reached; it was
// not delivered). An *AmbiguousError is never proof, nor is any answer of
// PVE's own (an error answer means PVE refused it: see IsRefused).
func NotSent(err error) bool {
	var amb *AmbiguousError
	if err == nil || errors.As(err, &amb) {
		return false
	}
	var ns *NotSentError
	if errors.As(err, &ns) || errors.Is(err, ErrInvalidArgument) {
		return true
	}
	var noe *NodeOfflineError
	return errors.As(err, &noe) && noe.Err.StatusCode == 595
}

// UnavailableError lists why each endpoint failed. It wraps ErrUnavailable and
// every attempt's error (so errors.As finds a *TLSError among them).
type UnavailableError struct {
	Method, Path string
	Attempts     []AttemptError
}

// AttemptError is one failed attempt at one endpoint.
type AttemptError struct {
	Endpoint string
	Err      error
}

// Error implements error.
func (e *UnavailableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pve: %s %s: %v", e.Method, e.Path, ErrUnavailable)
	seen := map[string]bool{}
	for _, a := range e.Attempts {
		line := a.Endpoint + ": " + a.Err.Error()
		if seen[line] {
			continue
		}
		seen[line] = true
		b.WriteString("; ")
		b.WriteString(line)
	}
	return b.String()
}

// Unwrap returns ErrUnavailable and the attempts' errors.
func (e *UnavailableError) Unwrap() []error {
	errs := []error{ErrUnavailable}
	for _, a := range e.Attempts {
		errs = append(errs, a.Err)
	}
	return errs
}

// errCircuitOpen is an attempt error for an endpoint skipped by its breaker.
var errCircuitOpen = errors.New("circuit open after repeated failures")

// timeoutError wraps ErrTimeout, the context's error and the last attempt's.
type timeoutError struct {
	Method, Path string
	ctxErr, last error
}

func (e *timeoutError) Error() string {
	s := fmt.Sprintf("pve: %s %s: %v", e.Method, e.Path, ErrTimeout)
	if e.last != nil {
		s += ": " + e.last.Error()
	}
	return s
}

func (e *timeoutError) Unwrap() []error {
	errs := []error{ErrTimeout, e.ctxErr}
	if e.last != nil {
		errs = append(errs, e.last)
	}
	return errs
}

// StatusCode returns the HTTP status of the *Error in err's chain, or 0.
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// notFoundMarkers are the texts with which PVE says the thing asked for does
// not exist (docs/reference/pve-api.md §0 step 7, §2.3, §3.0, §3.7). Each entry's
// parts must all appear, so that e.g. "storage 'x' does not exist" is not
// mistaken for a missing VM.
var notFoundMarkers = [][]string{
	{"configuration file '", "' does not exist"}, // Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist
	{"unable to find configuration file for vm"}, // ... 100 on node 'pve1' (before PVE 6.1: "- no such machine")
	{"no such task"},                  // 400 errors.upid
	{"hostname lookup '", "' failed"}, // unknown {node}: hostname lookup 'pve9' failed - ...
}

// IsNotFound reports whether err is PVE saying that the VM, task or node a
// request is about does not exist (PVE says so with 500s and 400s, never 404).
func IsNotFound(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	if e.StatusCode != 400 && e.StatusCode != 500 {
		return false
	}
	if MessageIsNotFound(e.Message) || MessageIsNotFound(e.Reason) {
		return true
	}
	for _, v := range e.Errors {
		if MessageIsNotFound(v) {
			return true
		}
	}
	return false
}

// MessageIsNotFound reports whether a PVE message (an error's text or a task's
// exit status) says the VM, task or node does not exist.
func MessageIsNotFound(msg string) bool {
	m := strings.ToLower(msg)
next:
	for _, parts := range notFoundMarkers {
		for _, p := range parts {
			if !strings.Contains(m, p) {
				continue next
			}
		}
		return true
	}
	return false
}

// IsUnauthorized reports whether PVE refused the API token (401: unknown,
// expired or wrong token; the reason phrase says which on older PVE).
func IsUnauthorized(err error) bool { return StatusCode(err) == 401 }

// IsPermissionDenied reports whether PVE refused the token the privilege for
// the request (403 "Permission check failed (/vms/100, VM.PowerMgmt)").
func IsPermissionDenied(err error) bool { return StatusCode(err) == 403 }

// IsParameterError reports whether PVE rejected a parameter (400 with an
// errors map), e.g. {"target": "target is local node."}.
func IsParameterError(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == 400 && len(e.Errors) > 0
}

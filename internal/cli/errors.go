package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/vmgate/vmgate/client"
)

// Exit codes of the client commands, one per kind of outcome a script may want to
// tell apart (`vmgate --help` and the README list them).
const (
	ExitOK          = 0   // done
	ExitFailed      = 1   // the operation failed (a task failed, PVE refused, not allowed, a bug)
	ExitUsage       = 2   // the command line or a value in it is wrong
	ExitAuth        = 3   // not logged in, the login expired, or the token was refused
	ExitNotFound    = 4   // no such thing, or it conflicts (VM running, locked, name taken)
	ExitUnavailable = 5   // vmgate or PVE cannot be reached or is overloaded; try again
	ExitInterrupted = 130 // Ctrl-C; an operation already started goes on
)

// ExitCodesHelp is the table of exit codes for --help.
const ExitCodesHelp = `Exit codes: 0 ok; 1 the operation failed; 2 usage; 3 not authenticated
(run vmgate login); 4 not found or conflict; 5 vmgate or PVE unavailable;
130 interrupted (an operation already started goes on).`

// ExitError is an error with the exit code it ends the command with, the message
// for a person, and a hint (a command to run) on a line of its own.
type ExitError struct {
	Code int
	Msg  string
	Hint string
	Err  error // the cause, when there is one
}

func (e *ExitError) Error() string {
	if e.Hint != "" {
		return e.Msg + "\n" + e.Hint
	}
	return e.Msg
}

// Unwrap returns the cause.
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode implements kong's ExitCoder.
func (e *ExitError) ExitCode() int { return e.Code }

// UsageErrorf is an error in what the command line says: exit 2.
func UsageErrorf(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Msg: fmt.Sprintf(format, args...)}
}

// Failedf is an operation that failed: exit 1.
func Failedf(format string, args ...any) error {
	return &ExitError{Code: ExitFailed, Msg: fmt.Sprintf(format, args...)}
}

// apiWords maps the API's parameter names in vmgate's messages to the CLI's flags,
// so that a hint reads as something to type here. Longer phrases come first.
var apiWords = strings.NewReplacer(
	"use force=true to power it off", "power it off with --force",
	"use force=true to stop it", "stop it with --force",
	"stop it with force=true", "stop it with --force",
	"force=true", "--force",
	"withLocalDisks=true", "--with-local-disks",
	"migrate it online (online=true)", "migrate it without --offline",
	"online=true", "without --offline",
	"online=false", "--offline",
	"(?clusterId=)", "(--cluster)",
	"?clusterId=", "--cluster",
	"targetStorage", "--target-storage",
	"bwlimit must", "--bwlimit must",
	"?timeout=", "--timeout",
	"?wait=", "--wait",
)

// CLIWords rewrites a message of the API in the CLI's words.
func CLIWords(msg string) string { return apiWords.Replace(msg) }

// Explain turns any error of a client command into an ExitError: the exit code its
// kind calls for and a message that names no Go internals (never a raw "dial tcp
// ... connection refused"). An ExitError passes unchanged.
func Explain(err error, server string) *ExitError {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		return explainAPI(ae, server)
	}
	if errors.Is(err, context.Canceled) {
		return &ExitError{Code: ExitInterrupted, Msg: "interrupted", Err: err}
	}
	var nv *client.NotVmgateError
	if errors.As(err, &nv) {
		return &ExitError{Code: ExitUnavailable, Msg: fmt.Sprintf("%s does not answer as vmgate does (%s): is --server right?",
			server, nv.Status), Err: err}
	}
	if msg, ok := tlsTrouble(err, server); ok {
		return &ExitError{Code: ExitUnavailable, Msg: msg, Hint: "give the CA of its certificate with --ca-file (or $VMGATE_CA_FILE)", Err: err}
	}
	if msg, ok := unreachable(err, server); ok {
		return &ExitError{Code: ExitUnavailable, Msg: msg, Err: err}
	}
	return &ExitError{Code: ExitFailed, Msg: err.Error(), Err: err}
}

// explainAPI maps an API error: its status to an exit code, its message to the
// CLI's words.
func explainAPI(ae *client.APIError, server string) *ExitError {
	e := &ExitError{Msg: CLIWords(ae.Message), Err: ae}
	if e.Msg == "" {
		e.Msg = http.StatusText(ae.Status)
	}
	switch {
	case ae.Status == http.StatusBadRequest:
		e.Code = ExitUsage
	case ae.Status == http.StatusUnauthorized:
		e.Code = ExitAuth
		e.Hint = "log in again: vmgate login --server " + server
	case ae.Status == http.StatusNotFound, ae.Status == http.StatusConflict, ae.Status == http.StatusUnprocessableEntity:
		e.Code = ExitNotFound
	case ae.Status == http.StatusTooManyRequests, ae.Status == http.StatusServiceUnavailable,
		ae.Status == http.StatusGatewayTimeout:
		e.Code = ExitUnavailable
		if ae.RetryAfter > 0 {
			e.Msg += fmt.Sprintf(" (try again in %.0f s)", ae.RetryAfter.Seconds())
		}
	default: // 403, 405, 413, 415, 500, 502
		e.Code = ExitFailed
	}
	if e.Code != ExitAuth {
		e.Msg = fmt.Sprintf("%s (%d %s)", e.Msg, ae.Status, ae.Reason)
	}
	// An answer whose outcome is unknown (or whose first attempt still runs)
	// names the request's task row in X-Operation-Id: the task's taskRef, which
	// the task commands take where they take a UPID.
	if ae.TaskRef > 0 && e.Hint == "" {
		e.Hint = fmt.Sprintf("follow it with: vmgate task watch %d", ae.TaskRef)
	}
	return e
}

// unreachable says in words that the server could not be reached, for errors of
// the connection (refused, reset, timed out, no such host, closed mid-answer).
func unreachable(err error, server string) (string, bool) {
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot reach vmgate at %s: no such host", server), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("cannot reach vmgate at %s: nothing answers there (is it running?)", server), true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Sprintf("the connection to vmgate at %s broke off", server), true
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return fmt.Sprintf("vmgate at %s did not answer in time", server), true
	}
	var ue *url.Error
	var op *net.OpError
	if errors.As(err, &ue) || errors.As(err, &op) {
		return fmt.Sprintf("cannot reach vmgate at %s", server), true
	}
	return "", false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsTrouble says in words that the server's certificate is not trusted.
func tlsTrouble(err error, server string) (string, bool) {
	var (
		unknown   x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verifyErr *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknown), errors.As(err, &verifyErr):
		return fmt.Sprintf("the certificate of %s is not signed by a CA this machine trusts", server), true
	case errors.As(err, &hostname):
		return fmt.Sprintf("the certificate of %s is not for that name: %v", server, hostname.Error()), true
	case errors.As(err, &invalid):
		return fmt.Sprintf("the certificate of %s is not valid: %v", server, invalid.Error()), true
	}
	return "", false
}

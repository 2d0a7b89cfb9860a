package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// DefaultRequestTimeout is how long a request may take as a whole when
// Config.RequestTimeout is zero: as long as one PVE call may (the client's own
// deadline), so a request is never cut shorter than what it waits on.
const DefaultRequestTimeout = 30 * time.Second

// holdFor says how much longer than the request timeout a route may hold its
// answer open, and whether it is a stream that no whole-request deadline bounds.
// Long-polls (a task's ?wait=, a power operation's wait for its task) get their
// wait on top of the timeout; event streams are bounded by their own limits
// instead (each write's deadline, the task's end, the client going away, the
// server's drain on shutdown). Everything else gets the timeout alone.
func holdFor(route string, r *http.Request) (extra time.Duration, stream bool) {
	switch route {
	case "GET /api/v1/pve/task/{taskId}/events", "GET /api/v1/pve/operations/{id}/events", consoleWSRoute:
		return 0, true
	case "GET /api/v1/pve/task/{taskId}":
		return waitParam(r, 0, vmops.MaxTaskWait), false
	case "POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/start",
		"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/stop",
		"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/reboot",
		"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/suspend",
		"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/resume":
		return waitParam(r, vmops.DefaultWait, vmops.MaxPowerWait), false
	}
	return 0, false
}

// waitParam reads ?wait= leniently, for the deadline only: a bad value is the
// handler's to refuse (400); here it counts as the longest wait.
func waitParam(r *http.Request, def, most time.Duration) time.Duration {
	if _, ok := query(r)["wait"]; !ok {
		return def
	}
	n, err := queryInt(r, "wait", 0, 0, int64(most/time.Second))
	if err != nil {
		return most
	}
	return time.Duration(n) * time.Second
}

// deadline gives the request of route (method and pattern) its deadline as a
// whole (DefaultRequestTimeout unless configured, plus the route's wait), so that
// nothing a request waits on can hold it longer: ri's requestDeadline over ctx,
// which the caller releases when the request ends. Streams get none (ctx).
func (s *Server) deadline(ctx context.Context, ri *reqInfo, route string, r *http.Request) context.Context {
	extra, stream := holdFor(route, r)
	if stream || s.requestTimeout < 0 {
		return ctx
	}
	return ri.deadline.start(ctx, time.Now().Add(s.requestTimeout+extra))
}

// holdDeadline is the request timeout plus extra, or none for a stream: the
// UI's routes (its Hold) get theirs here, the API's the same through deadline.
func (s *Server) holdDeadline(ctx context.Context, extra time.Duration, stream bool) (context.Context, context.CancelFunc) {
	if stream || s.requestTimeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.requestTimeout+extra)
}

// timedOut classifies an error that no layer classified, when the request's
// own deadline is why it happened: 503 request_timeout rather than 500.
func timedOut(r *http.Request, err error) error { return errs.TimedOut(r.Context(), err) }

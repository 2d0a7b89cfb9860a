package httpapi

import (
	"net/http"
	"regexp"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
)

type auditJSON struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	UserID    int64     `json:"userId,omitempty"`
	UserEmail string    `json:"userEmail,omitempty"`
	SessionID string    `json:"sessionId,omitempty"`
	Action    string    `json:"action"`
	ClusterID int64     `json:"clusterId,omitempty"`
	Node      string    `json:"node,omitempty"`
	VMID      int64     `json:"vmid,omitempty"`
	Target    string    `json:"target,omitempty"`
	Params    string    `json:"params,omitempty"`
	Result    string    `json:"result"`
	Reason    string    `json:"reason,omitempty"`
	UPID      string    `json:"upid,omitempty"`
	Address   string    `json:"address,omitempty"`
	RequestID string    `json:"requestId,omitempty"`
	Count     int64     `json:"count"`
}

var (
	auditActionPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
	auditResultPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// queryString reads an optional query parameter given at most once that matches
// pattern and is at most 64 bytes.
func queryString(r *http.Request, name string, pattern *regexp.Regexp) (string, error) {
	vs, ok := r.URL.Query()[name]
	if !ok {
		return "", nil
	}
	if len(vs) != 1 {
		return "", errs.E(errs.Invalid, "%s given more than once", name)
	}
	if len(vs[0]) > 64 || !pattern.MatchString(vs[0]) {
		return "", errs.E(errs.Invalid, "%s must match %s, not %q", name, pattern, safeText(vs[0]))
	}
	return vs[0], nil
}

// queryTime reads an optional RFC 3339 time given at most once.
func queryTime(r *http.Request, name string) (time.Time, error) {
	vs, ok := r.URL.Query()[name]
	if !ok {
		return time.Time{}, nil
	}
	if len(vs) != 1 {
		return time.Time{}, errs.E(errs.Invalid, "%s given more than once", name)
	}
	t, err := time.Parse(time.RFC3339Nano, vs[0])
	if err != nil {
		return time.Time{}, errs.E(errs.Invalid, "%s must be an RFC 3339 time (2026-11-22T10:00:00Z), not %q",
			name, safeText(vs[0]))
	}
	return t, nil
}

// auditFilter reads GET /audit's query: user, action, cluster, result, from, to,
// limit and before (the cursor: the smallest id of the page before).
func auditFilter(r *http.Request) (audit.Filter, error) {
	var (
		f   audit.Filter
		err error
		n   int64
	)
	if err = checkQuery(r, "limit", "before", "user", "action", "cluster", "result", "from", "to"); err != nil {
		return f, err
	}
	if n, err = queryInt(r, "limit", 100, 1, 1000); err != nil {
		return f, err
	}
	f.Limit = int(n)
	if f.Before, err = queryInt(r, "before", 0, 0, 1<<62); err != nil {
		return f, err
	}
	if f.UserID, err = queryInt(r, "user", 0, 1, 1<<53); err != nil {
		return f, err
	}
	if f.ClusterID, err = queryInt(r, "cluster", 0, 1, 1<<53); err != nil {
		return f, err
	}
	if f.Action, err = queryString(r, "action", auditActionPattern); err != nil {
		return f, err
	}
	if f.Result, err = queryString(r, "result", auditResultPattern); err != nil {
		return f, err
	}
	if f.From, err = queryTime(r, "from"); err != nil {
		return f, err
	}
	if f.To, err = queryTime(r, "to"); err != nil {
		return f, err
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return f, errs.E(errs.Invalid, "from must be before to")
	}
	return f, nil
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	f, err := auditFilter(r)
	if err != nil {
		return err
	}
	recs, err := s.trail.Query(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]auditJSON, 0, len(recs))
	for _, a := range recs {
		out = append(out, auditJSON{ID: a.ID, At: a.At.UTC(), UserID: a.UserID, UserEmail: a.UserEmail,
			SessionID: a.SessionID, Action: a.Action, ClusterID: a.ClusterID, Node: a.Node, VMID: a.VMID,
			Target: a.Target, Params: a.Params, Result: a.Result, Reason: a.Reason, UPID: a.UPID, Address: a.Address,
			RequestID: a.RequestID, Count: a.Count})
	}
	writeData(w, out)
	return nil
}

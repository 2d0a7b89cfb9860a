package httpapi

import (
	"net/http"
	"time"
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
	UPID      string    `json:"upid,omitempty"`
	Address   string    `json:"address,omitempty"`
	RequestID string    `json:"requestId,omitempty"`
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r, "limit", "before"); err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 100, 1, 1000)
	if err != nil {
		return err
	}
	before, err := queryInt(r, "before", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	recs, err := s.trail.List(r.Context(), int(limit), before)
	if err != nil {
		return err
	}
	out := make([]auditJSON, 0, len(recs))
	for _, a := range recs {
		out = append(out, auditJSON{ID: a.ID, At: a.At.UTC(), UserID: a.UserID, UserEmail: a.UserEmail,
			SessionID: a.SessionID, Action: a.Action, ClusterID: a.ClusterID, Node: a.Node, VMID: a.VMID,
			Target: a.Target, Params: a.Params, Result: a.Result, UPID: a.UPID, Address: a.Address, RequestID: a.RequestID})
	}
	writeData(w, out)
	return nil
}

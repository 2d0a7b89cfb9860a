package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// UpstreamError maps an error of the PVE client to vmgate's error kinds (docs/design.md §3):
//
//   - 595/596/597 for a node (PVE could not reach the node it proxies to) → 409 node_offline
//   - PVE did not answer in time → 504 upstream_timeout
//   - a certificate that is not the pinned one, and no other endpoint answered → 502
//     tls_mismatch, naming both fingerprints
//   - no endpoint answers, or every circuit is open → 503 cluster_unavailable
//   - PVE's "does not exist" for a VM, node or task → 404 not_found with PVE's message
//   - 401 (vmgate's token is no longer accepted) → 502 token_rejected
//   - any other PVE error → 502 upstream_error with PVE's status and message (and its
//     per-parameter errors as pveErrors)
//   - a value the client refused to send (pve.ErrInvalidArgument) → 400 invalid_request
//   - an answer that is not PVE's → 502 upstream_error
//
// An *errs.Error passes through unchanged; nil stays nil.
func UpstreamError(err error) error {
	if err == nil {
		return nil
	}
	if e, ok := errs.As(err); ok {
		return e
	}
	var offline *pve.NodeOfflineError
	var tlsErr *pve.TLSError
	var pe *pve.Error
	// The order matters: an unavailable cluster's error holds every attempt's error
	// (595s of other endpoints among them), and a timeout holds the last attempt's.
	switch {
	case errors.As(err, &offline):
		return &errs.Error{Kind: errs.Conflict, Reason: errs.ReasonNodeOffline, Err: err,
			Message: fmt.Sprintf("node %s is offline or unreachable from the cluster (PVE: %d %s)", offline.Node, offline.Err.StatusCode, pveText(offline.Err)),
			Details: map[string]any{"node": offline.Node}}
	case errors.Is(err, pve.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return errs.Wrap(errs.Timeout, err, "PVE did not answer in time")
	case errors.Is(err, context.Canceled):
		return errs.Wrap(errs.Timeout, err, "the request was cancelled before PVE answered")
	case errors.As(err, &tlsErr):
		return &errs.Error{Kind: errs.Upstream, Reason: ReasonTLSMismatch, Err: err,
			Message: "PVE endpoint " + tlsErr.Endpoint + " presented a certificate with SHA-256 fingerprint " + orNone(tlsErr.Presented) +
				expectedText(tlsErr.Expected) + ", and no other endpoint answered; if the node's certificate was renewed, an admin must update the cluster's trust setting"}
	case errors.Is(err, pve.ErrUnavailable):
		return errs.Wrap(errs.Unavailable, err, "no endpoint of the cluster answers; try again later")
	case errors.As(err, &pe):
		text := pveText(pe)
		switch {
		case pve.IsNotFound(err):
			return &errs.Error{Kind: errs.NotFound, Reason: "not_found", Err: err, Message: "PVE: " + text}
		case pe.StatusCode == 401:
			return &errs.Error{Kind: errs.Upstream, Reason: ReasonTokenRejected, Err: err,
				Message: "PVE no longer accepts vmgate's API token for this cluster (401 " + text + "); an admin must update the token"}
		default:
			e := &errs.Error{Kind: errs.Upstream, Reason: "upstream_error", Err: err,
				Message: fmt.Sprintf("PVE answered %d: %s", pe.StatusCode, text)}
			if len(pe.Errors) > 0 {
				e.Details = map[string]any{"pveErrors": pe.Errors}
			}
			return e
		}
	case errors.Is(err, pve.ErrInvalidArgument):
		return errs.Wrap(errs.Invalid, err, "%s", clientConfigText(err))
	case errors.Is(err, pve.ErrBadResponse):
		return errs.Wrap(errs.Upstream, err, "PVE gave an answer vmgate cannot read")
	default:
		return errs.Wrap(errs.Upstream, err, "the request to PVE failed")
	}
}

func expectedText(expected string) string {
	if expected == "" {
		return " that does not verify against the cluster's CA"
	}
	return ", but vmgate pinned " + expected
}

// upstream maps err like UpstreamError and audits a certificate mismatch once per
// cluster, endpoint and presented certificate: it is what an attacker in the middle
// looks like, and an admin should see it even if nobody reads the logs.
const maxTLSSeen = 1024

func (s *Service) upstream(ctx context.Context, clusterID int64, err error) error {
	var tlsErr *pve.TLSError
	if errors.As(err, &tlsErr) {
		key := strconv.FormatInt(clusterID, 10) + " " + tlsErr.Endpoint + " " + tlsErr.Presented
		s.mu.Lock()
		first := !s.tlsSeen[key]
		if len(s.tlsSeen) >= maxTLSSeen {
			clear(s.tlsSeen) // bounded whatever a man in the middle presents
		}
		s.tlsSeen[key] = true
		s.mu.Unlock()
		if first {
			params, _ := json.Marshal(map[string]string{"expected": tlsErr.Expected, "presented": tlsErr.Presented})
			// vmgate noticed this itself; whoever's request met it is not its author.
			s.audit.Append(ctx, store.AuditRecord{At: s.now(), Action: "cluster.tls_mismatch", ClusterID: clusterID, Target: tlsErr.Endpoint,
				Params: string(params), Result: "failed"})
		}
	}
	return UpstreamError(err)
}

// ReadError is UpstreamError for a read: a node PVE cannot reach is 503
// cluster_unavailable naming the node, never 409 node_offline. A conflict is a
// state that forbids an action; nothing forbids looking (issue 10 (docs/history.md)), the answer is
// just not there now.
func ReadError(err error) error {
	err = UpstreamError(err)
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.Conflict || e.Reason != errs.ReasonNodeOffline {
		return err
	}
	out := *e
	out.Kind, out.Reason, out.RetryAfter = errs.Unavailable, "cluster_unavailable", 5
	return &out
}

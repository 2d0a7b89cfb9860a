package notify

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// The kinds of event.
const (
	EventTaskFailed         = "task.failed"
	EventOperationFinished  = "operation.finished"
	EventOperationPaused    = "operation.paused"
	EventNodeOffline        = "node.offline"
	EventNodeOnline         = "node.online"
	EventClusterUnreachable = "cluster.unreachable"
	EventClusterRecovered   = "cluster.recovered"
	EventAuthLockout        = "auth.lockout"
	EventAuthTokenReuse     = "auth.token_reuse"
	EventAuditVerifyFailed  = "audit.verify_failed"
	// EventTest is what Send test sends; it never goes through the outbox.
	EventTest = "test"
)

// EventKinds lists the kinds a filter may name.
var EventKinds = []string{EventTaskFailed, EventOperationFinished, EventOperationPaused, EventNodeOffline,
	EventNodeOnline, EventClusterUnreachable, EventClusterRecovered, EventAuthLockout, EventAuthTokenReuse,
	EventAuditVerifyFailed}

// Severities, from the least to the most urgent.
const (
	SeverityInfo     = "info"
	SeverityWarning  = "warning"
	SeverityError    = "error"
	SeverityCritical = "critical"
)

// severityRank orders the severities; 0 is not one.
func severityRank(s string) int {
	switch s {
	case SeverityInfo:
		return 1
	case SeverityWarning:
		return 2
	case SeverityError:
		return 3
	case SeverityCritical:
		return 4
	}
	return 0
}

func details(v map[string]any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// TaskFailed is the event of a task vmgate started or followed that ended
// failed: row is the task's row as it ends.
func TaskFailed(row store.Task, at time.Time) store.NotifyEvent {
	what := row.Op
	guest := "VM"
	if row.GuestKind == store.GuestLXC {
		guest = "CT"
	}
	subject := fmt.Sprintf("%s of %s %d on %s failed: %s", what, guest, row.VMID, row.Node, firstNonEmpty(row.Error, row.ExitStatus))
	return store.NotifyEvent{Kind: EventTaskFailed, Severity: SeverityWarning, ClusterID: row.ClusterID,
		Subject: subject, Link: "/tasks/" + strconv.FormatInt(row.ID, 10), At: at,
		Details: details(map[string]any{"taskId": row.ID, "upid": row.UPID, "op": row.Op, "vmid": row.VMID,
			"node": row.Node, "exitStatus": row.ExitStatus, "error": row.Error, "user": row.UserEmail})}
}

// OperationFinished is the event of an operation's end with status (done,
// done_with_skips, partial, failed, cancelled) and its counts.
func OperationFinished(op store.Operation, status string, total, ok, failed, skipped int, at time.Time) store.NotifyEvent {
	sev := SeverityInfo
	switch status {
	case store.OperationFailed:
		sev = SeverityError
	case store.OperationPartial, store.OperationCancelled, store.OperationDoneWithSkips:
		sev = SeverityWarning
	}
	what := op.Kind
	if op.Node != "" {
		what += " of " + op.Node
	}
	return store.NotifyEvent{Kind: EventOperationFinished, Severity: sev, ClusterID: op.ClusterID,
		Subject: fmt.Sprintf("operation %d (%s) ended %s: %d ok, %d failed, %d skipped of %d", op.ID, what, status, ok, failed, skipped, total),
		Link:    "/operations/" + strconv.FormatInt(op.ID, 10), At: at,
		Details: details(map[string]any{"operationId": op.ID, "kind": op.Kind, "node": op.Node, "status": status,
			"total": total, "ok": ok, "failed": failed, "skipped": skipped, "user": op.UserEmail})}
}

// OperationPaused is the event of an operation that paused on a gate or step.
func OperationPaused(op store.Operation, gate string, at time.Time) store.NotifyEvent {
	return store.NotifyEvent{Kind: EventOperationPaused, Severity: SeverityWarning, ClusterID: op.ClusterID,
		Subject: fmt.Sprintf("operation %d (%s) paused at %s", op.ID, op.Kind, gate),
		Link:    "/operations/" + strconv.FormatInt(op.ID, 10), At: at,
		Details: details(map[string]any{"operationId": op.ID, "kind": op.Kind, "gate": gate})}
}

// NodeChanged is node.offline or node.online of a node of cluster clusterID.
func NodeChanged(clusterID int64, cluster, node string, online bool, at time.Time) store.NotifyEvent {
	kind, sev, word := EventNodeOffline, SeverityError, "offline"
	if online {
		kind, sev, word = EventNodeOnline, SeverityInfo, "online"
	}
	return store.NotifyEvent{Kind: kind, Severity: sev, ClusterID: clusterID,
		Subject: fmt.Sprintf("node %s of cluster %s is %s", node, cluster, word),
		Link:    "/fleet", At: at, Details: details(map[string]any{"cluster": cluster, "node": node})}
}

// ClusterChanged is cluster.unreachable (with why) or cluster.recovered.
func ClusterChanged(clusterID int64, cluster string, reachable bool, why string, at time.Time) store.NotifyEvent {
	if reachable {
		return store.NotifyEvent{Kind: EventClusterRecovered, Severity: SeverityInfo, ClusterID: clusterID,
			Subject: fmt.Sprintf("cluster %s answers again", cluster), Link: "/fleet", At: at,
			Details: details(map[string]any{"cluster": cluster})}
	}
	return store.NotifyEvent{Kind: EventClusterUnreachable, Severity: SeverityCritical, ClusterID: clusterID,
		Subject: fmt.Sprintf("cluster %s does not answer: %s", cluster, why), Link: "/fleet", At: at,
		Details: details(map[string]any{"cluster": cluster, "error": why})}
}

// AuthLockout is the event of a login lockout of target (an account or a
// network) in scope for d.
func AuthLockout(target, scope, address string, d time.Duration, at time.Time) store.NotifyEvent {
	return store.NotifyEvent{Kind: EventAuthLockout, Severity: SeverityWarning,
		Subject: fmt.Sprintf("logins of %s locked for %s (%s) after failures from %s", target, d.Round(time.Second), scope, address),
		Link:    "/admin/audit?action=auth.lockout", At: at,
		Details: details(map[string]any{"target": target, "scope": scope, "address": address, "seconds": int64(d.Seconds())})}
}

// AuthTokenReuse is the event of a rotated token presented again: the session
// was revoked as stolen (docs/security.md item 7).
func AuthTokenReuse(userID int64, address, via string, at time.Time) store.NotifyEvent {
	return store.NotifyEvent{Kind: EventAuthTokenReuse, Severity: SeverityCritical,
		Subject: fmt.Sprintf("a rotated token of user %d was presented again from %s (%s): the session was revoked as stolen", userID, address, via),
		Link:    "/admin/audit?action=auth.token_reuse", At: at,
		Details: details(map[string]any{"userId": userID, "address": address, "via": via})}
}

// AuditVerifyFailed is the event of a verification of the audit chain that
// found it broken at row id.
func AuditVerifyFailed(id int64, why string, at time.Time) store.NotifyEvent {
	return store.NotifyEvent{Kind: EventAuditVerifyFailed, Severity: SeverityCritical,
		Subject: fmt.Sprintf("the audit chain does not verify at record %d: %s", id, why), Link: "/admin/audit", At: at,
		Details: details(map[string]any{"record": id, "error": why})}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

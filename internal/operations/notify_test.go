package operations

import (
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/notify"
)

// TestFinishedOperationIsNotified: an operation's end writes operation.finished
// to the outbox with its status and counts (in the transaction of the end).
func TestFinishedOperationIsNotified(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t, envOpts{}, Config{})
	l, err := e.ops.Bulk(e.request(), e.actor, 1, BulkStart, BulkRequest{VMIDs: []int64{101, 999}})
	if err != nil {
		t.Fatal(err)
	}
	v := e.waitOp(l.OperationID)
	evs, err := e.store.UnfannedNotifications(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, ev := range evs {
		if ev.Kind == notify.EventOperationFinished {
			found = append(found, ev.Subject)
			if ev.ClusterID != 1 || ev.Severity != notify.SeverityInfo || !strings.HasSuffix(ev.Link, "/operations/"+strconv.FormatInt(l.OperationID, 10)) {
				t.Errorf("event %+v", ev)
			}
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "ended "+v.Status) || !strings.Contains(found[0], "1 ok, 0 failed, 1 skipped of 2") {
		t.Fatalf("operation.finished events: %q (operation %s)", found, v.Status)
	}
}

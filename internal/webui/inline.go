package webui

import (
	"net/http"
	"net/url"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// A power action answers at once (issue 19 item 2): its POST goes back to the
// guest's page with ?task=UPID, and the page shows that task beside the guest,
// live, until PVE's task ends — then it says how: done and the new state, the
// shutdown that timed out (shutdown_timeout) with Force stop offered, or PVE's
// own line of a failure. While a shutdown or a migration runs, the page offers
// Abort.

// inlineTask is the task of a guest's page (?task=), as the page shows it.
type inlineTask struct {
	Task      vmops.TaskView
	Live      liveTask
	Action    string // what was asked, in the UI's words: "Stop", "Force stop", ...
	Running   bool
	OK        bool
	Message   string // once ended: what became of it
	Reason    string // a failure's reason (shutdown_timeout, ...)
	ForceStop bool   // the guest ignored the shutdown: offer Force stop
	Abort     bool   // a running shutdown or migration the caller may abort
	Back      string // the page to come back to after an abort
}

// uiAction names a task's action as the guest page's buttons do.
var uiAction = map[string]string{"start": "Start", "shutdown": "Stop", "stop": "Force stop", "reboot": "Reboot",
	"suspend": "Suspend", "hibernate": "Hibernate", "resume": "Resume", "migrate": "Migration"}

// uiDone says that an action ended well.
var uiDone = map[string]string{"start": "started", "shutdown": "shut down", "stop": "powered off", "reboot": "rebooted",
	"suspend": "paused", "hibernate": "suspended to disk", "resume": "resumed", "migrate": "migrated"}

// abortable says which running tasks the UI offers to abort: those a person
// waits for and may give up on (a hung shutdown, a long migration).
func abortable(op string) bool { return op == "shutdown" || op == "migrate" || op == "reboot" }

// inline reads the task id of a guest's page and describes it; nil when the id
// names no task of this guest (a stale link, another guest's task).
func (u *UI) inline(r *http.Request, vm vmops.GuestRef, id string, canAct bool, back string) *inlineTask {
	if id == "" || !vmops.ValidTaskID(id) {
		return nil
	}
	t, err := u.vms.Task(r.Context(), vmActor(r), id, vm.ClusterID, 0)
	if err != nil || t.ClusterID != vm.ClusterID || t.VMID != vm.VMID {
		return nil
	}
	op := t.Op()
	it := &inlineTask{Task: t, Live: live(t, u.now()), Action: uiAction[op], Running: !t.Finished(), Back: back}
	if it.Action == "" {
		it.Action = "Task " + t.Type
	}
	name := guestName(vm)
	switch {
	case it.Running:
		it.Abort = canAct && abortable(op) && t.TaskID != ""
	case t.Result == vmops.ResultOK || t.Result == vmops.ResultWarnings:
		it.OK = true
		it.Message = name + " " + uiDone[op] + "."
		if op == "migrate" && t.Target != "" {
			it.Message = name + " migrated to " + t.Target + "."
		}
		if t.Result == vmops.ResultWarnings {
			it.Message += " PVE reported " + t.ExitStatus + "."
		}
	default:
		line := t.Error
		if line == "" {
			line = t.ExitStatus
		}
		it.Message = sentence(it.Action + " of " + name + " failed: " + line)
		if e, ok := errs.As(vmops.TaskError(t)); ok {
			it.Reason = e.ReasonOrDefault()
			if e.Reason == errs.ReasonShutdownTimeout {
				it.Message = name + " did not shut down in time (shutdown_timeout): the guest ignored the request. " +
					"Force stop powers it off at once."
				it.ForceStop = canAct
			}
		}
	}
	return it
}

// withTask is a guest page's address that shows the task upid.
func withTask(page, upid string) string {
	return page + "?task=" + url.QueryEscape(upid)
}

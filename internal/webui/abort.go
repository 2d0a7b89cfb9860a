package webui

import (
	"net/http"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// abortTask is the Abort button of a running shutdown or migration, on the
// task's page and on the guest's page (issue 19 item 3): the use case checks
// the operator grant, asks PVE to stop the task and audits it (task.abort);
// the page the button was on follows the task to the end PVE writes for it
// ("migration aborted", "received interrupt").
func (u *UI) abortTask(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("taskId")
	if !vmops.ValidTaskID(id) {
		return errs.E(errs.NotFound, "there is no task at this address")
	}
	hint, _ := strconv.ParseInt(r.FormValue("cluster"), 10, 64)
	back := safeNext(r.FormValue("back"))
	if r.FormValue("back") == "" {
		back = taskURL(id)
	}
	v, err := u.vms.Abort(r.Context(), vmActor(r), id, max(hint, 0))
	if err != nil {
		e, ok := errs.As(err)
		if !ok || e.Kind == errs.Internal || e.Kind == errs.NotFound || e.Kind == errs.Forbidden {
			return err
		}
		u.setNotice(w, r, notice{Kind: "error", Reason: e.ReasonOrDefault(), TaskID: v.TaskID,
			Message: sentence("Abort refused: " + e.Message)})
		redirect(w, r, back)
		return nil
	}
	u.setNotice(w, r, notice{Kind: "info", TaskID: v.TaskID,
		Message: "PVE was asked to stop the task " + v.Type + "; this page shows how it ends."})
	redirect(w, r, back)
	return nil
}

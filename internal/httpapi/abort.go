package httpapi

import "net/http"

// abortTask is DELETE /api/v1/pve/task/{taskId} (issue 19 item 3): PVE's own
// DELETE /nodes/{node}/tasks/{upid} through the use case, which checks the
// operator grant on the task's cluster (NotFound to a caller without any
// grant, as the task reads answer), asks PVE and audits task.abort. It answers
// 202 with the task as it was when PVE was asked: the task ends in PVE a moment
// later, with what PVE writes ("migration aborted", "received interrupt"),
// which the task's read, long-poll and stream show.
func (s *Server) abortTask(w http.ResponseWriter, r *http.Request) error {
	id, err := pathTask(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "clusterId"); err != nil {
		return err
	}
	hint, err := queryInt(r, "clusterId", 0, 1, 1<<53)
	if err != nil {
		return err
	}
	v, err := s.vms.Abort(r.Context(), vmActor(r), id, hint)
	if err != nil {
		return err
	}
	w.Header().Set("Location", taskPath(v.TaskID))
	writeEncoded(w, http.StatusAccepted, "success", (*taskAnswer)(&v), nil)
	return nil
}

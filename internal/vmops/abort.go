package vmops

// Draining is closed when the service drains for a shutdown (Drain): a front
// end's live stream that follows no task ends then with a word to its client.
func (s *Service) Draining() <-chan struct{} { return s.draining }

// TaskError is how the use cases word a finished task's failure, nil when it
// did not fail: the error a power operation that waited for its task returns
// (shutdown_timeout for a guest that ignored the shutdown, vm_locked, ...;
// else upstream_error with PVE's exit status and log line), with the task id
// and exit status as details. A front end that answered before the task ended
// tells its outcome with it (the web UI's guest page).
func TaskError(v TaskView) error {
	if !v.Finished() || v.Result != ResultFailed {
		return nil
	}
	vm := GuestRef{ClusterID: v.ClusterID, Node: v.Node, Kind: GuestKind(v.GuestKind()), VMID: v.VMID}
	return taskFailure(v.Op(), vm, v)
}

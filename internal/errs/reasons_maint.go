package errs

// Reasons of node maintenance (issue 20 (docs/history.md)).
const (
	// ReasonNodeInMaintenance (kind Conflict): the node is in maintenance in
	// vmgate: no guest is started there (unless the start is forced), and it
	// cannot enter maintenance a second time.
	ReasonNodeInMaintenance = "node_in_maintenance"
	// ReasonNodeNotInMaintenance (kind Conflict): leaving maintenance, a node
	// that is not in maintenance.
	ReasonNodeNotInMaintenance = "node_not_in_maintenance"
)

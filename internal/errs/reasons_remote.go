package errs

// Reasons of a remote migration (moving a guest to another cluster, issue 22).
const (
	// ReasonHAManaged: PVE refuses to move an HA-managed guest to another
	// cluster; it must leave HA first.
	ReasonHAManaged = "ha_managed"
	// ReasonVMIDTaken: the target cluster already has a guest with the vmid.
	ReasonVMIDTaken = "vmid_taken"
	// ReasonTargetTokenLacksPermissions: the target cluster's API token may
	// not receive the guest (Sys.Incoming, VM.Allocate, Datastore.AllocateSpace,
	// SDN.Use).
	ReasonTargetTokenLacksPermissions = "target_token_lacks_permissions"
	// ReasonNotSupported: a cluster's PVE release has no remote migration.
	ReasonNotSupported = "not_supported"
)

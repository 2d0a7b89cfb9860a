// Package vmops holds vmgate's use cases on one guest (a VM or a container): power
// operations (start, graceful and forced stop, reboot, suspend), migration, and
// the tracking of the PVE tasks they start. Operations on many guests
// (internal/operations) run each of their items through these use cases (Act,
// items.go).
//
// Every operation reads the VM's state first and refuses early with the conflict
// docs/design.md §3 names (vm_running, vm_stopped, vm_locked, ...), writes a task row before
// PVE is called and completes it with the UPID after, so a crash leaves a record that
// Run reconciles from PVE's task list on the next start. Task queries are answered
// from the store once a task has finished; while it runs, concurrent readers share
// one PVE status+log read per poll interval. HA-managed VMs answer with stand-in
// tasks (hastart, hastop, hamigrate) that finish at once; vmops follows them to the
// task the HA stack really runs, or to the VM reaching the requested state.
//
// Each operation is audited here, once, whoever the front end: the record names the
// Actor and takes the session, client address and request id from the request facts
// in the context (internal/audit); a task's end is recorded as the task row has it.
// Front ends get the package's own view types (TaskView, Precheck, ...) and
// validators (ValidNode, ValidTaskID), never PVE's types. The Idempotency-Keys of
// writes are internal/idempotency's; what a request made under a key came to is
// answered here, in these terms (KeyOutcome, KeyTaskRef: idempotency.go), and
// for an operation on many guests by internal/operations (ByKey).
//
// When a dependency fails (issue 10 (docs/history.md)): a write whose outcome is unknown is
// ReasonOutcomeUnknown naming its task row, which is searched for in the node's
// task list at once and every SearchEvery (outcome.go); a read PVE cannot serve
// answers the last view, marked Stale; Drain ends every wait for a shutdown.
// Which task of PVE's list is which request's is decided here, for every row of
// the VM at once and in PVE's time, never by the PVE client (claim.go, issue 17 (docs/history.md));
// a lost row says why it is lost, and an operation makes an item's request again,
// once, only when that proves it started nothing (internal/operations).
//
// The package knows no HTTP: errors are *errs.Error values whose kind and reason the
// HTTP layer maps to a status.
package vmops

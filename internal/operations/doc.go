// Package operations holds vmgate's use cases on many guests of a cluster as one
// object (issue 13 (docs/history.md)): the evacuation of a node (evacuate.go,
// planned by plan.go) and bulk power actions (bulk.go). An operation is kept in
// the store with its items and driven by one process at a time, which holds it
// by a lease and renews it; when that process dies (kill -9) the lease runs out
// and the restarted process, or another replica, takes it over (run.go).
//
// Each item runs through the same use case as a single request (vmops.Act: the
// migration, the power operations), for the operation's creator, the item named
// explicitly on the vmops.Actor (Actor.Item). Its task row is written before PVE
// is called, in the same store transaction that moves the item from pending to
// running, so an item starts at most once whoever drives it, and a driver that
// takes over follows the item's task (reconciled from PVE's task list when its
// UPID was never recorded) instead of starting it again. An unfinished operation
// holds its node (an evacuation) and its items' guests: a second evacuation of
// the node is refused, and other operations skip the guests, naming it
// (holds.go). docs/decisions/ has the model and the planner's rules.
//
// Every use case checks its caller's grant first, as vmops' do and through the
// same check (vmops.Service.Require, grants.go: docs/decisions/0088): an
// evacuation and a bulk action, a dry run too, and cancelling need an operator
// grant on the cluster, reading, following and listing operations a viewer
// grant. The driver acts for the operation's creator later, maybe in another
// process, through vmops.Act, which does not check the grant again.
//
// The package knows no HTTP: errors are *errs.Error values whose kind and
// reason the front ends map. It uses vmops for everything about one guest and
// its tasks, and never the other way round.
package operations

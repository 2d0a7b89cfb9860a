// Package client is a typed Go client of vmgate's HTTP API (api/openapi.yaml):
// one method per endpoint, taking and returning the API's own shapes, every call
// bound to a context. The command-line client (internal/cli, cmd/vmgate) and the
// end-to-end tests use it, so the paths, bodies and envelopes are written once.
//
//	c := client.New("https://vmgate.example.com:8443")
//	if _, err := c.Login(ctx, "ops@example.com", password); err != nil { … }
//	vms, err := c.VMs(ctx, 1, client.GuestFilter{Node: "pve1"})
//	res, err := c.Stop(ctx, client.VM(1, "pve1", 100), client.PowerOptions{})
//
// An error answer of vmgate comes back as *APIError (its status, reason, message,
// the envelope's details, Retry-After and the task it names); an answer that is
// not vmgate's envelope as *NotVmgateError. Every write that may start something
// at PVE sends an Idempotency-Key (a fresh one per call unless the caller gives
// its own, to repeat a call safely).
package client

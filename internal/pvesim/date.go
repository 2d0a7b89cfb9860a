package pvesim

import "net/http"

// httpDate is the Date header of an answer: the emulated clock's time, as a
// node's pveproxy stamps its answers with the node's own clock. Task start
// times, task lists and Date therefore agree, and a cluster made with
// Options.Start off the real time is a PVE whose clock is that far off the
// client's (what vmgate measures: internal/pve's ClockOffset).
func (c *Cluster) httpDate() string { return c.clock.Now().UTC().Format(http.TimeFormat) }

package fleet

import "github.com/vmgate/vmgate/internal/pve"

// healthOf summarises what a client knows of its endpoints without asking PVE: the
// circuit breakers' states, which follow every request the client made. A client that
// has sent nothing yet knows nothing.
func healthOf(cl *pve.Client) string {
	if cl.Stats().Requests == 0 {
		return StatusUnknown
	}
	open := 0
	hs := cl.Health()
	for _, h := range hs {
		if h.State != "closed" {
			open++
		}
	}
	switch {
	case open == 0:
		return StatusOnline
	case open == len(hs):
		return StatusUnavailable
	default:
		return StatusDegraded
	}
}

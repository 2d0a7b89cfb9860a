package pvesim

import "time"

func (c *Cluster) serveVNC(s *consoleSession, connectedAt time.Time) string {
	return ""
}

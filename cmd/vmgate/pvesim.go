package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vmgate/vmgate/internal/pvesim"
)

// pvesimCmd serves the emulated dev cluster of DESIGN.md §7. Its variables are
// PVESIM_* so they cannot clash with the server's VMGATE_*.
type pvesimCmd struct {
	Listen    string        `default:"127.0.0.1:8006" env:"PVESIM_LISTEN" help:"Address of the first node (pve1); the others listen on 127.0.0.12, 127.0.0.13 with the same port. Port 0 picks a free one."`
	Speed     float64       `default:"1" env:"PVESIM_SPEED" help:"Emulated seconds per real second (at 1 a live migration of VM 100 takes about 20 s)."`
	Plain     bool          `env:"PVESIM_PLAIN" help:"Serve plain HTTP instead of HTTPS."`
	AuthDelay time.Duration `default:"3s" env:"PVESIM_AUTH_DELAY" help:"Delay of authentication failures (PVE waits 3 s)."`
}

// Run serves until SIGINT or SIGTERM. The first line on stdout is a JSON
// object with the URL, the certificate fingerprint and the API token.
func (c *pvesimCmd) Run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return pvesim.RunDev(ctx, pvesim.DevOptions{
		Listen:    c.Listen,
		Speed:     c.Speed,
		Plain:     c.Plain,
		AuthDelay: c.AuthDelay,
	}, os.Stdout, os.Stderr)
}

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/console"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/httpapi"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/webui"
)

// consoleFlags bound the consoles (issue 21, docs/security.md item 38,
// docs/decisions/0104).
type consoleFlags struct {
	ConsolesPerUser  int           `default:"4" env:"VMGATE_CONSOLES_PER_USER" help:"Consoles one user holds open at once; past it 429 too_many_consoles."`
	ConsolesTotal    int           `default:"200" env:"VMGATE_CONSOLES_TOTAL" help:"Consoles this replica relays at once; past it 429 too_many_consoles."`
	ConsoleIdle      time.Duration `default:"30m" env:"VMGATE_CONSOLE_IDLE" help:"A console without input for this long ends."`
	ConsoleMaxLength time.Duration `default:"8h" env:"VMGATE_CONSOLE_MAX_LENGTH" help:"No console lasts longer."`
}

// consoles builds the console broker on the store, the fleet's grants and
// clients, and the audit trail; nil (no consoles served) when the store keeps no
// console tickets.
func (f consoleFlags) consoles(st store.Store, fl *fleet.Service, trail *audit.Trail, log *slog.Logger) (*console.Service, error) {
	cst, ok := st.(console.Store)
	if !ok {
		return nil, nil
	}
	return console.New(console.Config{Store: cst, Grants: fl, Audit: trail, Logger: log,
		Connect: func(ctx context.Context, clusterID int64) (console.PVE, error) {
			return fl.Client(ctx, clusterID)
		},
		PerUser: f.ConsolesPerUser, Total: f.ConsolesTotal, Idle: f.ConsoleIdle, MaxLength: f.ConsoleMaxLength})
}

// consolesOrNil keeps a nil broker a nil interface (no console routes).
func consolesOrNil(s *console.Service) httpapi.Consoles {
	if s == nil {
		return nil
	}
	return s
}

// uiConsoles keeps a nil broker a nil interface (no console pages).
func uiConsoles(s *console.Service) webui.Consoles {
	if s == nil {
		return nil
	}
	return s
}

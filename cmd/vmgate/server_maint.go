package main

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/pvesim"
)

// maintenanceFlags configure node maintenance (issue 20 (docs/history.md)):
// the hooks a rolling maintenance may name, and its bounds. Hooks come from
// here only, never through the API; every replica needs the same ones, since
// a hook runs on whichever replica holds the operation's lease.
type maintenanceFlags struct {
	MaintenanceHook        []string      `name:"maintenance-hook" placeholder:"NAME=COMMAND" env:"VMGATE_MAINTENANCE_HOOK" sep:"none" help:"A command a rolling maintenance may run on each node after draining it (repeatable), e.g. upgrade='ssh root@$VMGATE_NODE_ADDRESS apt-get -y dist-upgrade'; it gets VMGATE_CLUSTER, VMGATE_NODE, VMGATE_NODE_ADDRESS, VMGATE_OPERATION. Every replica needs the same hooks."`
	MaintenanceHookTimeout time.Duration `default:"30m" env:"VMGATE_MAINTENANCE_HOOK_TIMEOUT" help:"Longest run of a maintenance hook; past it the hook is killed and its step fails."`
	NodeBootTimeout        time.Duration `default:"15m" env:"VMGATE_NODE_BOOT_TIMEOUT" help:"Longest wait for a rebooted node to be back (online, answering, its uptime restarted); past it the rolling maintenance pauses."`
	GateTimeout            time.Duration `default:"10m" env:"VMGATE_GATE_TIMEOUT" help:"Longest wait for the health gates (quorum, HA, Ceph) to pass; past it the rolling maintenance pauses."`
	DevCeph                bool          `env:"VMGATE_DEV_CEPH" help:"Dev mode: the emulated cluster runs Ceph (its health and noout)."`
}

// hookName is a hook's name: a word a request can carry.
var hookName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)

// hooks reads --maintenance-hook into the operations' configuration.
func (f maintenanceFlags) hooks() (map[string]string, error) {
	out := map[string]string{}
	for _, h := range f.MaintenanceHook {
		name, command, ok := strings.Cut(h, "=")
		switch {
		case !ok || strings.TrimSpace(command) == "":
			return nil, fmt.Errorf("--maintenance-hook %q: want NAME=COMMAND", h)
		case !hookName.MatchString(name):
			return nil, fmt.Errorf("--maintenance-hook %q: a name is letters, digits, '.', '_' and '-' (at most 64)", name)
		case out[name] != "":
			return nil, fmt.Errorf("--maintenance-hook %s is given twice", name)
		}
		out[name] = command
	}
	return out, nil
}

// maintenanceConfig fills the operations' maintenance settings.
func (f maintenanceFlags) maintenanceConfig(cfg *operations.Config) error {
	hooks, err := f.hooks()
	if err != nil {
		return err
	}
	cfg.Hooks, cfg.HookTimeout, cfg.NodeBootTimeout, cfg.GateTimeout = hooks, f.MaintenanceHookTimeout, f.NodeBootTimeout, f.GateTimeout
	return nil
}

// devHookName is the dev mode's example hook.
const devHookName = "install"

// devHook is the dev mode's example hook: it "installs" a node's pending
// updates through the emulator's test-only control (no PVE path), whose last
// output line is reboot-required when a newer kernel now waits.
func devHook(srv *pvesim.Server, token string) string {
	port := ""
	if eps := srv.Endpoints(); len(eps) > 0 {
		if i := strings.LastIndex(eps[0].URL, ":"); i >= 0 {
			port = eps[0].URL[i+1:]
		}
	}
	return fmt.Sprintf(`curl -sSfk -X POST -H 'Authorization: PVEAPIToken=%s' "https://$VMGATE_NODE_ADDRESS:%s%snodes/$VMGATE_NODE/apt/install"`,
		token, port, pvesim.ControlPrefix)
}

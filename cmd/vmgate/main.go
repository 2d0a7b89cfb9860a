// Command vmgate is one front door to many Proxmox VE clusters: the server, its
// bootstrap administration, an emulated PVE cluster, and a command-line client.
package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kong"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// commandLine is the whole command tree. Every flag of the server has a VMGATE_* variable.
type commandLine struct {
	Server  serverCmd  `cmd:"" help:"Run the vmgate server."`
	Admin   adminCmd   `cmd:"" help:"Administer the database directly (bootstrap)."`
	Pvesim  pvesimCmd  `cmd:"" help:"Serve an emulated Proxmox VE cluster."`
	Version versionCmd `cmd:"" help:"Print the version."`
	clientCmds
}

type versionCmd struct{}

func (versionCmd) Run() error {
	fmt.Println("vmgate", version)
	return nil
}

func main() {
	var c commandLine
	ctx := kong.Parse(&c,
		kong.Name("vmgate"),
		kong.Description("One front door to many Proxmox VE clusters."),
		kong.UsageOnError(),
	)
	if err := ctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "vmgate:", err)
		os.Exit(1)
	}
}

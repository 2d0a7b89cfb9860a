// Command vmgate is one front door to many Proxmox VE clusters: the server, its
// bootstrap administration, an emulated PVE cluster, and a command-line client.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/alecthomas/kong"
)

// commandLine is the whole command tree. Every flag of the server has a VMGATE_* variable.
type commandLine struct {
	Server  serverCmd  `cmd:"" help:"Run the vmgate server."`
	Admin   adminCmd   `cmd:"" help:"Administer the database directly (bootstrap)."`
	Pvesim  pvesimCmd  `cmd:"" help:"Serve an emulated Proxmox VE cluster."`
	Version versionCmd `cmd:"" help:"Print the version."`
	clientCmds
}

type versionCmd struct {
	JSON bool `help:"Print the build information as JSON."`
}

func (c versionCmd) Run() error {
	b := currentBuild()
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(b)
	}
	fmt.Println(b)
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

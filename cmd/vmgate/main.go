// Command vmgate is one front door to many Proxmox VE clusters: the server, its
// bootstrap administration, an emulated PVE cluster, and a command-line client.
package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"

	"github.com/alecthomas/kong"

	"github.com/vmgate/vmgate/internal/cli"
)

// commandLine is the whole command tree. Every flag of the server has a VMGATE_* variable.
type commandLine struct {
	Server     serverCmd     `cmd:"" help:"Run the vmgate server."`
	Admin      adminCmd      `cmd:"" help:"Administer the database directly (bootstrap)."`
	Pvesim     pvesimCmd     `cmd:"" help:"Serve an emulated Proxmox VE cluster."`
	Version    versionCmd    `cmd:"" help:"Print the version."`
	Completion completionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`
	clientCmds
}

// kongContext is what a command's Run takes to see the command line's model.
type kongContext = kong.Context

type versionCmd struct {
	JSON bool `help:"Print the build information as JSON."`
}

func (c versionCmd) Run() error {
	b := currentBuild()
	if c.JSON {
		return json.NewEncoder(os.Stdout).Encode(b)
	}
	show("%v", b)
	return nil
}

// description is the top of `vmgate --help`.
const description = `One front door to many Proxmox VE clusters.

The client commands talk to a vmgate server: --server (or $VMGATE_SERVER, else the
server of the last login) and --token (or $VMGATE_TOKEN, an API token, else the login
saved for that server by vmgate login). Reads print a table on a terminal and JSON
when piped (-o table|json).

` + cli.ExitCodesHelp

// newParser builds the command line's parser; exit is called for --help (0).
func newParser(c *commandLine, stdout, stderr io.Writer, exit func(int)) (*kong.Kong, error) {
	return kong.New(c,
		kong.Name("vmgate"),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Exit(exit),
		kong.ExplicitGroups([]kong.Group{{Key: "client", Title: "Client commands (talk to a vmgate server):"}}),
		kong.Vars{"default_server": cli.DefaultServer, "output_help": cli.OutputHelp},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
}

func main() { os.Exit(run(os.Args[1:])) }

// run parses args, runs the command and returns the exit code: 2 for a command
// line kong refuses, else the command's (cli.ExitError's code, 1 for any other
// error).
func run(args []string) int {
	var c commandLine
	k, err := newParser(&c, os.Stdout, os.Stderr, os.Exit)
	if err != nil {
		say("vmgate: %v", err)
		return cli.ExitFailed
	}
	ctx, err := k.Parse(args)
	if err != nil {
		say("vmgate: %v", err)
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil && pe.Context.Selected() != nil {
			say("see: vmgate %s --help", pe.Context.Selected().Path())
		} else {
			say("see: vmgate --help")
		}
		return cli.ExitUsage
	}
	if err := ctx.Run(); err != nil {
		var ee *cli.ExitError
		if errors.As(err, &ee) {
			say("vmgate: %s", ee.Msg)
			if ee.Hint != "" {
				say("%s", ee.Hint)
			}
			return ee.Code
		}
		say("vmgate: %v", err)
		return cli.ExitFailed
	}
	return cli.ExitOK
}

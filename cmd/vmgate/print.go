package main

import (
	"fmt"
	"io"
	"os"

	"github.com/vmgate/vmgate/internal/cli"
)

// show prints a line on standard output and say one on standard error, for a
// person. The line is escaped whole (cli.Escape, docs/security.md item 35): a VM name, a
// task log line or a message from the server shows its control characters as
// \x1b and the like and cannot act on the terminal, and a line break in it
// cannot make it look like two lines. Every line the commands print goes through
// one of them, a table (cli.TableOf.Write), a progress view (internal/cli) or
// cli.WriteJSON; TestCommandsPrintOnlyEscaped holds the code to that.
func show(format string, args ...any) { printLine(os.Stdout, format, args...) }

// say is show on standard error: what a command tells besides its result.
func say(format string, args ...any) { printLine(os.Stderr, format, args...) }

func printLine(w io.Writer, format string, args ...any) {
	io.WriteString(w, cli.Escape(fmt.Sprintf(format, args...))+"\n")
}

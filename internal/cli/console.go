package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/coder/websocket"
	"golang.org/x/term"
)

// EscapeKey leaves a console: Ctrl-], as telnet, virsh console and PVE's
// `qm terminal` take it.
const EscapeKey = 0x1d

// consoleInput bounds one frame of typed input sent to the console.
const consoleInput = 4 << 10

// TerminalConsole relays a console's terminal (PVE's termproxy framing, as
// vmgate serves it) to this process's terminal: in raw mode while it runs and
// restored on every way out, the window's size sent at the start and on every
// SIGWINCH, Ctrl-] (EscapeKey) to leave. The guest's bytes go to out as they
// come: a terminal's control sequences are what it is for (docs/security.md
// item 35 is about what the CLI prints itself; a console prints the guest's
// screen). Announcements go to errOut. It returns when the console ends, the
// user leaves, or ctx ends.
func TerminalConsole(ctx context.Context, conn *websocket.Conn, in *os.File, out, errOut io.Writer, name string) error {
	fd := int(in.Fd())
	if term.IsTerminal(fd) {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(fd, old) //nolint:errcheck // nothing more to do if it fails
	}
	fmt.Fprintf(errOut, "Connected to the console of %s; Ctrl-] to leave.\r\n", name)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	resize := func() {
		if cols, rows, err := term.GetSize(fd); err == nil && cols > 0 && rows > 0 {
			_ = conn.Write(ctx, websocket.MessageText, []byte("1:"+strconv.Itoa(cols)+":"+strconv.Itoa(rows)+":"))
		}
	}
	resize()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	done := make(chan error, 3)
	go func() { // the guest's screen
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				done <- consoleEnded(err)
				return
			}
			if _, err := out.Write(b); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() { // the keyboard
		buf := make([]byte, consoleInput)
		for {
			n, err := in.Read(buf)
			b := buf[:n]
			left := false
			if i := bytes.IndexByte(b, EscapeKey); i >= 0 {
				b, left = b[:i], true
			}
			if len(b) > 0 {
				msg := append([]byte("0:"+strconv.Itoa(len(b))+":"), b...)
				if werr := conn.Write(ctx, websocket.MessageText, msg); werr != nil {
					done <- consoleEnded(werr)
					return
				}
			}
			if left {
				done <- nil
				return
			}
			if err != nil {
				done <- nil // stdin closed: nothing more to type
				return
			}
		}
	}()
	for {
		select {
		case <-winch:
			resize()
		case err := <-done:
			conn.Close(websocket.StatusNormalClosure, "")
			fmt.Fprint(errOut, "\r\nConsole closed.\r\n")
			return err
		case <-ctx.Done():
			conn.Close(websocket.StatusNormalClosure, "")
			return ctx.Err()
		}
	}
}

// consoleEnded words why the console's connection ended: nil when either side
// closed it normally, the reason vmgate gave when a limit or a revocation
// ended it.
func consoleEnded(err error) error {
	var ce websocket.CloseError
	switch {
	case errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure:
		return nil
	case errors.As(err, &ce) && ce.Reason != "":
		return fmt.Errorf("vmgate ended the console: %s", Escape(ce.Reason))
	case errors.Is(err, context.Canceled):
		return nil
	}
	return fmt.Errorf("the console's connection failed: %w", err)
}

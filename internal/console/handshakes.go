package console

import (
	"context"

	"github.com/coder/websocket"
)

// TermLogin sends termproxy's login line ("user:ticket\n") on a terminal's
// WebSocket to PVE and reads its "OK"; it answers the terminal's bytes that came
// with it. It is the broker's own handshake, exported so that vmgate-bench talks
// to the emulator directly the way the broker does (issue 21's goals compare the
// two paths).
func TermLogin(ctx context.Context, conn *websocket.Conn, user, ticket string) ([]byte, error) {
	return termLogin(ctx, conn, user, ticket)
}

// VNCLogin is the RFB client's handshake of a VNC console's WebSocket up to the
// point where ClientInit is due: VNC authentication with password (PVE's
// ticket) if the server offers it, else security type None (as vmgate offers
// its own clients). It answers the RFB version and what was read beyond the
// handshake. Exported for vmgate-bench, as TermLogin.
func VNCLogin(ctx context.Context, conn *websocket.Conn, password string) (version string, rest []byte, err error) {
	return vncLogin(ctx, conn, password)
}

package main

import (
	"net"
	"os"
	"strings"
)

// sdNotify sends a state line ("READY=1", "STOPPING=1", "STATUS=…") to systemd's
// notification socket when vmgate runs as a Type=notify service, and does nothing
// otherwise. The protocol is one datagram on the unix socket named by $NOTIFY_SOCKET
// (an "@" prefix means the abstract namespace), which is all Type=notify needs and
// not worth a dependency. Failures are returned for the log, never fatal: a service
// manager that cannot be told is not a reason to stop serving.
func sdNotify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}

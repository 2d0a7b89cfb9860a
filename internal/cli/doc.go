// Package cli is the client side of vmgate's command line: the logins kept per
// server, the session that refreshes them, the rendering of the API's answers for
// a terminal (tables, progress, errors in the CLI's words and exit codes). It
// talks to vmgate through the typed client package, the one the end-to-end tests
// drive.
package cli

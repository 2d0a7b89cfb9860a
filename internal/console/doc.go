// Package console is vmgate's console broker (issue 21): it issues one-use
// console tickets to callers with an operator grant on a running guest, redeems
// them on any replica, and relays between the client's WebSocket and PVE's
// console, so that the client talks only to vmgate and PVE's ticket never leaves
// vmgate (docs/security.md item 37).
//
// For VNC vmgate answers PVE's VNC authentication itself, with PVE's ticket as
// the password, and offers its client RFB security type None; for a terminal it
// sends PVE's "user:ticket" login line itself and relays termproxy's framing
// otherwise unchanged (pve-xtermjs: 0:LENGTH:DATA, 1:COLS:ROWS:, 2). Every
// console is audited (console.open, console.close with duration and bytes) and
// bounded: per user, in total, by idleness and by length; it ends within a
// second of its session or token ending or its grant going (docs/security.md
// item 38, docs/decisions/0104).
package console

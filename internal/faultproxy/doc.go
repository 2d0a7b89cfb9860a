// Package faultproxy is a TCP proxy on loopback that injects network faults
// between a client and its upstream, switchable at run time, for tests of
// what vmgate does when PVE or PostgreSQL misbehave. It knows no protocol:
// the same proxy stands in front of the PVE emulator's HTTPS endpoints (TLS
// passes through untouched, so certificate pins still hold) and in front of
// PostgreSQL.
//
//	p, err := faultproxy.New("127.0.0.1:5432", faultproxy.Options{})
//	if err != nil { ... }
//	defer p.Close()
//	dsn := "postgres://postgres@" + p.Addr() + "/test"
//	...
//	p.BlackHole()          // accept, never answer, never close
//	...                    // assert the store call ends within its deadline
//	p.Heal()               // transparent again; held bytes flow on
//
// # Faults
//
// Bytes travel in two directions: ToUpstream (the client's requests) and
// ToClient (the upstream's answers). Each fault holds until Heal (or, for
// the counted ones, until it has struck `times` times; 0 means every time),
// applies to connections already open as well as new ones, and is checked
// for every chunk of bytes as it is about to be forwarded:
//
//   - Latency(dir, d): every chunk in dir is forwarded d after it arrived at
//     the proxy (a delay line, not cumulative). Time comes from
//     Options.Clock, so a test can hold an answer back until it advances a
//     fake clock.
//   - Hold(dir) / Release(dir): a gate. Chunks in dir wait until released.
//   - BlackHole(): Hold in both directions, and new connections are accepted
//     without dialling the upstream. Nothing is answered and nothing is
//     closed; after Heal the held bytes flow on, as after a healed partition.
//   - ResetBeforeForwarding(times): a chunk of a request is not forwarded;
//     the client's connection is reset (RST) and the upstream connection
//     closed. The upstream never sees the request.
//   - ResetAfterForwarding(times): the request is forwarded; when the answer
//     starts to come back, the client's connection is reset instead. The
//     upstream acted on the request; the client cannot know.
//   - CutAfter(dir, n, times): after n more bytes in dir on a connection,
//     both connections are closed (FIN): an answer cut mid-body.
//   - ResetAll(): every open client connection is reset now.
//   - Heal(): every fault is cleared and every held chunk released.
//
// # Requests and answers
//
// The reset and cut faults are about requests and answers, which a TCP
// proxy sees only as bytes. Without TLS every chunk a client sends is (part
// of) a request, and everything the upstream sends after it is the answer:
// with PostgreSQL, disable TLS (sslmode=disable) so that pgx's SSLRequest is
// not taken for a query, and let a connection do its startup before
// setting a counted fault. A connection whose first byte opens a TLS
// handshake record is followed record by record: the handshake passes,
// the first application-data record of the client (in TLS 1.3 the one
// after its Finished) is the request, and CutAfter counts only bytes that
// follow a request. So a reset before forwarding hits the HTTP request
// itself — the client has sent it and cannot know it was lost — on a new
// connection as on a kept-alive one.
//
// Stats counts connections accepted and open, upstream dials, bytes
// forwarded each way, requests, resets and cuts; Waiting says how many chunks
// are waiting for a gate or a latency, so tests can order their steps on it
// instead of sleeping. Options.OnRequest is called with each request's number
// before the request is checked against the faults, so a test can switch a
// fault on for exactly the n-th request (the write after a read).
//
// # Lifetime
//
// Every goroutine of a proxy (one accepting, five per connection) waits on
// its sockets, the proxy's closing, or a fault's gate, clock or release.
// Close closes the listener and every connection, wakes every waiter and
// waits for all of them to return (at most CloseTimeout), so a test that
// closes its proxy leaks nothing.
package faultproxy

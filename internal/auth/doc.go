// Package auth is vmgate's credentials and sessions: argon2id passwords, HS256
// access tokens, session rotation with reuse detection, and login throttling. Users
// themselves — creating them, the e-mail rules, who may change what — are
// internal/accounts'. It knows no HTTP: internal/httpapi calls it and maps its
// *errs.Error kinds to statuses. The rules of docs/security.md's Tokens, Sessions and Login sections that are
// not about HTTP live here, each with a test that names its item.
//
// # Tokens
//
// A token is a JWT signed with HS256, header typ "at+jwt" and kid, claims iss,
// aud, sub (the user id), sid (the session), jti, gen (the session's rotation
// counter), iat, nbf and exp. Verification pins the algorithm, decodes base64 strictly,
// allows no header beyond alg, typ and kid (so jku, x5u, jwk, x5c and crit are
// refused, never followed), requires every claim, allows Leeway of clock skew on iat
// and nbf but none on exp (vmgate checks only tokens it issued), and parses nothing
// over MaxTokenBytes. Every failure is one error: 401 "invalid or expired token".
// A token that passed every check is remembered by its exact text (a bounded
// cache, tokencache.go), so its next use costs a map lookup, its exp and its key's
// standing instead of base64, JSON and HMAC; any other text, however close, is
// checked in full.
//
// # Signing keys
//
// Signing keys are 32 random bytes kept in the store, so replicas share them,
// sealed with the key file (Config.Sealer, internal/seal; docs/security.md item 25): a copy of
// the database without the key file signs nothing. Keys an older vmgate stored raw
// are sealed in place at the first start, once, in one locked transaction. The
// newest key signs; `vmgate admin keys rotate-signing` (internal/keys) adds one,
// and every replica reloads the keys when the change feed says so, or at once when
// a token names a kid it does not know (at most one store read a second). A
// superseded key verifies until TokenTTL and KeyRetireGrace have passed since its
// successor was made — no token it signed is alive any more — and is then refused
// and deleted. Verification reads the keys through one atomic pointer.
//
// # Login methods
//
// StartSession is the one way into a session: a login method checks its own proof
// and hands the user over, and StartSession creates the session, issues its first
// token and audits auth.login naming the method. Login is the password method
// (login.go); single sign-on and second factors (issue 23) come in the same way
// (docs/decisions/0081). Offline is the part that needs no signing key, for the
// administration commands: new passwords hashed, a user's sessions ended.
//
// # Sessions
//
// A session lives at most SessionMax; a token lives TokenTTL,
// never past its session. Only a session's newest generation is valid: Refresh moves
// the session one generation forward with a compare-and-swap in the store, so of
// many concurrent refreshes of one token one wins. Presenting an older generation
// at Refresh revokes the session (RFC 9700 §4.14), except for the generation just
// rotated, within ReuseGrace of the rotation: that is a double click or the
// race's losers, and gets 401 alone. The web UI's cookie holds only its session's
// newest token, renewed through Refresh, so the UI asks CheckReuse about every
// cookie Authenticate refused: the same rule revokes the session of a rotated
// token shown again (a thief refreshed a stolen cookie's token at the API).
//
// Revocation is keyed on the session (sid) and its generation, never on token
// text. Authenticate answers from an in-process cache of sessions (each entry with
// a copy of its user's role and state), so a request costs no store round trip once
// its session is cached; Login, Refresh, Logout and the revocations update the cache
// of their own process at once. The cache follows the store's change feed
// (store.Subscribe): a session revoked or rotated drops that session, a user
// changed (disabled, deleted, role or password changed) drops every session of
// theirs, a resync drops everything, and the next request reads the store again.
// The store hands this process's own writes to the cache before the write returns,
// and on PostgreSQL pushes other replicas' writes through LISTEN/NOTIFY: a logout,
// a refresh-reuse revocation or a disabled user on one replica is in force on
// every other within 100 ms (docs/decisions/0007-change-feed.md; measured by
// cmd/vmgate-bench). While the listener is lost the store's poll (1 s) carries the
// changes, and its reconnect resyncs. A cached session is read again after
// SessionRecheck (1 min) whatever the feed says, a safety net under it.
//
// # Login
//
// Passwords are hashed with argon2id (Config.Argon2, default 19 MiB, t=2, p=1) and
// a 16-byte random salt, stored in PHC string format with their parameters, and
// rehashed at login when the parameters changed. An unknown e-mail is verified
// against a dummy hash made at New with the same parameters, so it costs what a
// known one does, and unknown e-mails, wrong passwords and disabled users all get
// the same 401 "invalid credentials". Before any hash, a login must pass the
// throttling (docs/security.md items 15, 28), which counts client networks — the address for
// IPv4, the /64 for IPv6 (IPv4Prefix, IPv6Prefix) — so that one customer's subnet
// is one client: a token bucket per network; a delay for the pair (account,
// network) after 5 consecutive wrong passwords from it, 1 s doubling to 15 min,
// that leaves every other network alone; and a ceiling over all networks, 100
// failures an hour, which blocks the account for 15 min (never longer) on the
// networks it has not logged in from successfully in the last 30 days — as the
// store remembers them, so that every replica, restarted or not, exempts the
// owner's networks (docs/decisions/0043). Accounts are counted by e-mail whether
// they exist or not, so delays tell nothing either.
// A delayed login is answered 429 with RetryAfter without being verified, the
// right password too, so that the delay is no oracle. At most MaxConcurrentHashes hashes run at once (by
// default one core less than GOMAXPROCS, so authenticated requests keep a core
// during a login flood); further logins wait their turn in a FIFO queue bounded to
// about HashWait (1 s) of expected wait, and only a login that finds the queue full
// gets 429, with RetryAfter the time the queue needs. Every 429 of Login is held
// for RefusalPause (1 s, at most its RetryAfter) before it is sent, so a flood's
// clients that retry at once sleep instead of spinning on cheap refusals.
// Throttling state and the session cache are bounded in size.
//
// The password policy (CheckPasswordPolicy) follows NIST SP 800-63B: length
// (12 characters to 1024 bytes), no composition rules, and a blocklist — SecLists'
// 10 000 most common passwords and vmgate's additions (blocklist/README.md), compared
// in a normalised form (case folded, no spaces or punctuation, no digits at the
// ends, substitutions undone) — plus repeated or sequential characters, the
// service's name and the e-mail's local part. Every refusal states PasswordRules.
//
// # Not handled here
//
// The store has no compare-and-swap for users, so a password rehash or change that
// lands at the instant an admin edits the same user can write back the admin's
// change; setHash keeps that window to one round trip. Passwords are hashed as
// given, without Unicode normalisation.
package auth

// Package identity is single sign-on with an OpenID Provider (issue 23 section 1,
// docs/decisions/0109 and 0110): the authorization code flow with PKCE, state and
// nonce, every check of the ID token, users found by issuer and subject and
// created at their first login, and the group mappings that give a login's groups
// a role and grants.
//
// It is a login method in the sense of docs/decisions/0081: it checks its own
// proof (the provider's ID token) and hands over to auth.Service.StartSession,
// the one way into a session, so that an SSO session is refreshed, ended and
// revoked like any other. The front ends (internal/webui for the browser,
// internal/httpapi for the CLI's exchange and the mappings' admin API) decode,
// call one use case here and render.
//
// A login under way is kept in the store (store.Identities), not in a process's
// memory: the callback may reach another replica than the one that started it.
// Its state is single-use (the callback deletes it), and it is bound to the
// browser that started it by a cookie whose hash it keeps.
package identity

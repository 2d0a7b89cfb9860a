package pve

import (
	"fmt"
	"strings"
)

// checkTokenID checks an API token id against PVE's grammar (pve-access-control
// AccessControl.pm): ((USER)@(REALM))!(TOKENNAME) with USER [^\s:/]+, REALM and
// TOKENNAME [A-Za-z][A-Za-z0-9.\-_]+, and the user id shorter than 64. It also
// refuses ';', '%' and '=' anywhere: PVE reads the header value up to ';',
// percent-decodes it and splits id from secret at the last '='.
func checkTokenID(id string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: token id %q %s (want USER@REALM!TOKENNAME)", ErrInvalidArgument, truncate(id, 120), why)
	}
	bang := strings.LastIndexByte(id, '!')
	if bang < 0 {
		return bad("has no '!'")
	}
	userID, name := id[:bang], id[bang+1:]
	if !realmSyntax(name) {
		return bad("has a bad token name")
	}
	at := strings.LastIndexByte(userID, '@')
	if at < 0 {
		return bad("has no '@'")
	}
	user, realm := userID[:at], userID[at+1:]
	if !realmSyntax(realm) {
		return bad("has a bad realm")
	}
	if user == "" || !upidText(user) || strings.ContainsAny(user, ";%=") {
		return bad("has a bad user name")
	}
	if len(userID) >= 64 {
		return bad("has a user id of 64 or more bytes")
	}
	return nil
}

// realmSyntax is PVE's realm (and token name) pattern [A-Za-z][A-Za-z0-9.\-_]+.
func realmSyntax(s string) bool {
	if len(s) < 2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if i == 0 && !letter {
			return false
		}
		if !letter && !('0' <= c && c <= '9') && c != '.' && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// checkTokenSecret accepts what PVE generates (a UUID) and anything else made
// of characters that survive PVE's header parsing unchanged.
func checkTokenSecret(s string) error {
	if s == "" || len(s) > 256 {
		return fmt.Errorf("%w: token secret must be 1 to 256 characters", ErrInvalidArgument)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~') {
			// The secret itself is never echoed.
			return fmt.Errorf("%w: token secret may only hold letters, digits and -_.~", ErrInvalidArgument)
		}
	}
	return nil
}

// tokenUser returns the USER@REALM part of a (valid) token id.
func tokenUser(id string) string {
	if i := strings.LastIndexByte(id, '!'); i >= 0 {
		return id[:i]
	}
	return id
}

//go:build !unix

package cli

// lockConfig is a no-op where flock is not available: two commands refreshing
// one login at the same instant may then race.
func lockConfig() (func(), error) { return func() {}, nil }

package fleet

// Actor is the authenticated caller as the fleet sees it.
type Actor struct {
	UserID int64
	Email  string
	Role   string // store.RoleAdmin or store.RoleUser
}

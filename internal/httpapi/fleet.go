package httpapi

// Fleet is what the HTTP layer needs of internal/fleet (clusters, grants,
// authorization, inventory). OWNED BY THE FLEET WORK: extend it there.
type Fleet interface {
	clusterAuthorizer
}

func (s *Server) fleetRoutes() []route { return nil }

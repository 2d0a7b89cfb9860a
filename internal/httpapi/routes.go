package httpapi

// routes is the whole HTTP surface in one table (docs/design.md §3). Patterns use the
// standard ServeMux syntax; the method is dispatched by mux so that a wrong method
// answers 405 with an Allow header in the envelope.
func (s *Server) routes() []route {
	rs := []route{
		{"GET", "/healthz", public, s.healthz},
		{"GET", "/readyz", public, s.readyz},
		{"GET", "/metrics", public, s.metricsHandler},
		{"GET", "/api/v1/openapi.json", public, s.openAPI},

		{"POST", "/api/v1/user/login", public, s.login},
		{"POST", "/api/v1/user/refresh", public, s.refresh},
		{"POST", "/api/v1/user/logout", session, s.logout},
		{"GET", "/api/v1/user/me", authed, s.me},
		{"POST", "/api/v1/user/password", session, s.changePassword},
		{"GET", "/api/v1/user/sessions", session, s.mySessions},
		{"DELETE", "/api/v1/user/sessions/{id}", session, s.endMySession},
		{"GET", "/api/v1/user/tokens", session, s.myTokens},
		{"POST", "/api/v1/user/tokens", session, s.createMyToken},
		{"DELETE", "/api/v1/user/tokens/{id}", session, s.deleteMyToken},

		{"GET", "/api/v1/users", admin, s.listUsers},
		{"POST", "/api/v1/users", adminSession, s.createUser},
		{"GET", "/api/v1/users/{id}", admin, s.getUser},
		{"PATCH", "/api/v1/users/{id}", adminSession, s.patchUser},
		{"DELETE", "/api/v1/users/{id}", adminSession, s.deleteUser},
		{"GET", "/api/v1/users/{id}/sessions", adminSession, s.userSessions},
		{"DELETE", "/api/v1/users/{id}/sessions/{sessionId}", adminSession, s.endUserSession},
		{"GET", "/api/v1/users/{id}/tokens", adminSession, s.userTokens},
		{"DELETE", "/api/v1/users/{id}/tokens/{tokenId}", adminSession, s.deleteUserToken},

		{"GET", "/api/v1/audit", admin, s.listAudit},
	}
	if s.secondFactors != nil {
		rs = append(rs, s.secondFactorRoutes()...)
	}
	if s.fleet != nil {
		rs = append(rs, s.fleetRoutes()...)
	}
	if s.vms != nil {
		rs = append(rs, s.vmRoutes()...)
		rs = append(rs, s.remoteRoutes()...) // remote.go
	}
	if s.consoles != nil {
		rs = append(rs, s.consoleRoutes()...) // console.go
	}
	if s.ops != nil && s.fleet != nil {
		rs = append(rs, s.operationRoutes()...)
	}
	if s.mappings != nil {
		rs = append(rs, s.identityRoutes()...)
	}
	if s.notify != nil {
		rs = append(rs, s.notifyRoutes()...)
	}
	return rs
}

package httpapi

// VMs is what the HTTP layer needs of internal/vmops. OWNED BY THE VMOPS WORK.
type VMs interface{}

func (s *Server) vmRoutes() []route { return nil }

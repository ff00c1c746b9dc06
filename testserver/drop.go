package testserver

import "context"

// DropConnection closes the connection the RPC of ctx came on (a TCP reset
// on TCP, a closed bufconn), as Script.reset_attempts does after the
// handler ran, for a server interceptor that loses a reply after the
// layers inside it finished with it (an idempotency store that kept the
// outcome, say). Every RPC on that connection fails with it. It reports
// whether it found the connection; ctx must be a handler's context of this
// server.
func (s *Server) DropConnection(ctx context.Context) bool { return s.conns.drop(ctx) }

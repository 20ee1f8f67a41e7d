"""gRPC servicers, the auth/error interceptor, watch fan-out and the HTTP status listener."""

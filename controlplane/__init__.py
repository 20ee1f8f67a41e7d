"""fleetplane control plane: versioned sampling contracts, worker registry and load views over gRPC."""

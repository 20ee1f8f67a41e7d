"""fleetplane data plane: the router and the engine side (load publisher, engine-sim)."""

"""The trace-driven simulator: the real scheduler and controllers on an embedded cluster, in simulated time."""

"""The scheduling engine: the session, placement with the statement, eviction, the actions, the configuration,
the runner (one cycle: snapshot → session → actions → decisions → apply through the ports) and ``explain``.

Who calls it: ``scheduler.defaults`` (the engine with the in-tree plugin registry), the process
(``cli.serve``), the simulator and the benchmarks. It imports the contract and the cache, never a plugin:
the plugins of a session are the classes its configuration resolved through the caller's registry.
"""

"""The scheduling core: cache → per-cycle snapshot → session → actions → decisions.

Pure: works on a snapshot and returns decisions; imports no Kubernetes client, no asyncio, no clock
(``scheduler.engine.runner`` takes the ports and a Clock from its caller). Its rooms, lowest first:
``contract`` (what a plugin may name, versioned), ``plugins`` and ``cache`` (each on the contract only),
``engine`` (session, placement, actions, runner; no plugin imported: the caller hands it the registry) and
``defaults`` (the engine wired to the in-tree registry). See ``docs/architecture.md``.
"""

"""The scheduling core: cache → per-cycle snapshot → session → actions → decisions.

Pure: works on a snapshot and returns decisions; imports no Kubernetes client, no asyncio, no clock
(``scheduler.engine.runner`` takes the ports and a Clock from its caller). See ``docs/architecture.md``.
"""

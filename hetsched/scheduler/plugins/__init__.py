"""Scheduler plugins, one module per policy; ``registry`` maps names to classes."""

"""Benchmarks of the scheduling engine (``hetsched bench engine``); drivers and reports live in ``bench/``."""

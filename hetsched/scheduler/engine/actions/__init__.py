"""Scheduling actions, run in the configured order on each session (``enqueue, allocate, backfill``)."""

"""Replays of published placement experiments on real traces (``hetsched replay-openb``)."""

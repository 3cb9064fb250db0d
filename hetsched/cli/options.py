"""Option values several commands share: seed lists, the process count, where the openb trace lives.

Who calls it: ``cli.main`` (``bench ascend``, ``replay-openb``) and ``cli.sweep``. Each parser raises a
ValueError naming the option; the commands print it as one line and exit 2.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_TRACE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "alibaba-gpu-v2023"
MAX_SEEDS = 10_000
MAX_JOBS = 256


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``1,2,5`` → list of ints (at most ``MAX_SEEDS``: a huge range is refused, not built)."""
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-", 1))
            if not 0 <= high - low < MAX_SEEDS:
                raise ValueError
            return list(range(low, high + 1))
        found = [int(part) for part in text.split(",", MAX_SEEDS) if part.strip()]
        if len(found) > MAX_SEEDS:
            raise ValueError
        return found
    except ValueError:
        raise ValueError(f"--seeds: expected a range like 42-51 or a list like 1,2,3 (at most {MAX_SEEDS:,} seeds), "
                         f"got {text[:60]!r}") from None


def check_jobs(jobs: int | None) -> int | None:
    """``--jobs``: None (the machine's cores) or 1–``MAX_JOBS``."""
    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"--jobs must be between 1 and {MAX_JOBS}, not {jobs}")
    return jobs

"""Settings every test shares.

Hypothesis: no per-example deadline and no "too slow" health check — both are wall-clock margins, and CI
runs on a busy machine; each test's own bound is pytest-timeout's (``timeout`` in pyproject.toml). Under
``CI`` the examples are derived from each test's name (``derandomize``), so a CI run never depends on a
random draw; elsewhere each run explores new examples and prints how to reproduce a failure.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("hetsched", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=bool(os.environ.get("CI")), print_blob=True)
settings.load_profile("hetsched")

"""Running vendor tools safely: fixed argument lists (never a shell), a timeout, and errors that say which
tool failed and how.

Who calls it: the Ascend and Cambricon backends.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

DEFAULT_TIMEOUT = 10.0


class ToolError(RuntimeError):
    """The tool is missing, timed out or failed; the message names it. The node agent reports the node
    unusable (condition and taint) instead of crash-looping."""


def run_tool(argv: Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> str:
    """The tool's standard output. ``argv`` is passed as a list: no shell, so nothing in it is interpreted."""
    name = " ".join(argv)
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace")
    except FileNotFoundError:
        raise ToolError(f"{argv[0]}: not found (is the driver installed and the tool on PATH?)") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{name}: no answer within {timeout:g}s (driver hung?)") from None
    except OSError as exc:
        raise ToolError(f"{name}: cannot run: {exc}") from None
    if done.returncode != 0:
        first = (done.stderr or done.stdout).strip().splitlines()[:1]
        raise ToolError(f"{name}: exit code {done.returncode}" + (f": {first[0]}" if first else ""))
    return done.stdout

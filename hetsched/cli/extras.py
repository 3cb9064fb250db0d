"""Optional features and the extra that installs each: a command that needs one says so, instead of a
traceback.

Who calls it: the commands whose feature lives in an optional dependency — ``simulate --report`` and
``replay-openb --plot`` and ``sweep --plot`` (``report``: matplotlib), ``device-plugin`` (``agents``: gRPC and
protobuf), ``sweep --dask`` (``distributed``: Dask). The
NVIDIA backend reports a missing ``nvidia`` extra itself, as a tool error (``agents.backends.nvidia``).
"""

from __future__ import annotations

import importlib.util

import typer

from hetsched.cli.output import say, stderr_console

EXTRAS = {"report": ("matplotlib",), "agents": ("grpc", "google.protobuf"), "nvidia": ("pynvml",),
          "distributed": ("dask", "distributed")}
"""Extra (``pip install '.[EXTRA]'`` in the checkout) → the modules it provides."""


def need(extra: str, feature: str) -> None:
    """Exit 2 with a one-line error unless ``extra``'s modules are installed."""
    missing = [m for m in EXTRAS[extra] if _absent(m)]
    if missing:
        say(stderr_console(), "error", f"{feature} needs hetsched's '{extra}' extra ({', '.join(missing)} is not "
                                       f"installed): in hetsched's checkout, pip install '.[{extra}]'")
        raise typer.Exit(2)


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package missing
        return True

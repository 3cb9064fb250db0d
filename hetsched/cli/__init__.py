"""The ``hetsched`` command line (typer + rich)."""

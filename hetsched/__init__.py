"""hetsched: a Volcano-compatible batch scheduler for clusters that mix Ascend NPUs, Cambricon MLUs,
NVIDIA GPUs and CPUs, with a trace-driven simulator that runs the same scheduler code.

Layers (enforced by import-linter, see ``pyproject.toml``), top to bottom:
``cli`` → ``sim``/``benchmark`` → ``cluster`` (backends) → ``controllers``/``scheduler`` → ``ports`` → ``api``.
"""

__version__ = "0.1.0"

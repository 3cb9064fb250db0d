"""Build hook: generate the kubelet Device Plugin API code from its .proto before packaging
(``hetsched.agents.deviceplugin.codegen``). Everything else is in pyproject.toml."""

from __future__ import annotations

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithProto(build_py):
    def run(self) -> None:
        codegen = runpy.run_path(str(Path(__file__).parent / "hetsched/agents/deviceplugin/codegen.py"))
        codegen["generate"]()
        super().run()


setup(cmdclass={"build_py": BuildWithProto})

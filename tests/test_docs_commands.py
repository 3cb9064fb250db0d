"""Every command in README.md and docs/*.md (the fenced ``bash`` and ``console`` blocks) runs as written.

Each command is found by reading the documents, so a command added to them is tested without anyone
listing it; one that matches none of the rules below fails this test until it is given one:

- **run**: run verbatim with bash, from a scratch checkout (the repository's folders linked in, so the
  files a command names are the repository's and what it writes stays out of it; ``../shared`` beside it,
  as beside the real checkout), with the exit code the document shows (0 unless listed in ``EXIT``);
- **trace**: run verbatim when the openb trace is where the documents say (skipped, saying so, otherwise);
- **parse**: needs what a test machine has not got — your cluster in a kubeconfig, a Dask scheduler — so
  its arguments are parsed by hetsched's own command line, exactly as typed (every option and value
  checked, every file it reads present); the same commands run against a real API server in
  ``tests/test_kubernetes.py`` (day-2 verbs, doctor) and ``tests/test_chart.py`` (kubectl, helm);
- **measure**: a measurement taking minutes (the benchmarks; figures in docs/performance.md): its options
  are checked (hetsched's parser, or the script's ``--help``), it is run by hand;
- **itself**: ``./scripts/test`` is this test suite.

And every repository path a command names (``examples/…``, ``deploy/…``, ``bench/….py``) exists.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from hetsched.cli.main import app
from hetsched.cli.options import DEFAULT_TRACE_DIR

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = ("examples", "deploy", "docs", "scripts", "hetsched", ".venv", "pyproject.toml",
          "requirements.lock", "requirements-dev.lock")
COPIED = ("bench",)
"""Copied, not linked: commands write into them (``--json bench/out/…``), and that stays out of the repository."""


@dataclass(frozen=True)
class DocCommand:
    where: str
    text: str


def _commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"^```(bash|console|sh|shell)\n(.*?)^```", text, re.S | re.M):
            line = text[:match.start()].count("\n") + 2
            body = match.group(2)
            # a line ending in a backslash continues on the next: one command
            rows = body.replace("\\\n", "\x00").split("\n")
            numbered, at = [], 0
            for row in rows:
                numbered.append((at, row.replace("\x00", " ")))
                at += row.count("\x00") + 1
            if match.group(1) == "console":  # "$ command" lines; the rest is what it printed
                lines = [(i, ln[2:]) for i, ln in numbered if ln.startswith("$ ")]
            else:
                lines = numbered
            for offset, command in lines:
                command = re.sub(r"\s+", " ", command).strip()
                if command and not command.startswith("#"):
                    found.append(DocCommand(f"{path.relative_to(ROOT)}:{line + offset}", command))
    return found


COMMANDS = _commands()
RULES: list[tuple[str, str]] = [  # (pattern on the command, how it is tested); the first that matches
    (r"^\./scripts/test\b", "itself"),
    (r"^echo \$\?$", "itself"),  # a console block showing the exit code: checked through EXIT
    (r"^(kubectl|helm) |\| kubectl ", "parse"),
    (r"^hetsched simulate --cluster nodes\.yaml", "parse"),  # your cluster's dumps (tests/test_cluster_dump.py)
    (r"--dask tcp://", "parse"),
    (r"^hetsched (doctor|pending|job|queue)\b(?!.*--cluster)", "parse"),
    (r"bench (engine|latency)\b|bench/\w+\.py|--pods all|--policy all", "measure"),
    (r"^hetsched (replay-openb|sweep)\b", "trace"),
    (r"^(\./scripts/demo|hetsched) ", "run"),
]
EXIT = {"hetsched validate examples/mistakes/bert.yaml": 2,
        "hetsched doctor --cluster examples/scenarios/ascend-4.yaml examples/scenarios/fragmented.yaml --until 600": 1}
"""Commands whose documents show a non-zero exit (a refused manifest; a doctor report with a warning)."""


def how(command: DocCommand) -> str:
    return next((kind for pattern, kind in RULES if re.search(pattern, command.text)), "")


def test_every_documented_command_has_a_way_to_be_tested() -> None:
    unknown = [f"{c.where}: {c.text}" for c in COMMANDS if not how(c)]
    assert not unknown, "documented commands no rule covers (add one to RULES):\n" + "\n".join(unknown)
    assert len(COMMANDS) > 40  # the reader found the blocks


def test_every_repository_path_a_command_names_exists() -> None:
    missing = []
    for command in COMMANDS:
        for word in shlex.split(command.text, comments=True):
            path = word.split("=", 1)[-1]
            if re.match(r"^(examples|deploy|bench|scripts)/", path) and not path.startswith("bench/out/") \
                    and not (ROOT / path).exists():
                missing.append(f"{command.where}: {path}")
    assert not missing, missing


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch checkout: the repository's folders linked in, ``../shared`` beside it."""
    base = tmp_path_factory.mktemp("docs")
    work = base / "checkout"
    work.mkdir()
    for name in LINKED:
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    for name in COPIED:
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("out", "__pycache__"))
    if (ROOT.parent / "shared").exists():
        (base / "shared").symlink_to(ROOT.parent / "shared")
    return work


def _run(command: DocCommand, checkout: Path) -> None:
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    done = subprocess.run(["bash", "-c", command.text], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=600, check=False, stdin=subprocess.DEVNULL)
    wanted = EXIT.get(command.text.split(" #")[0].strip(), 0)
    assert done.returncode == wanted, f"{command.where}: {command.text}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr


def _parse(command: DocCommand) -> None:
    """Parse a hetsched command line as hetsched would, without running it."""
    words = shlex.split(command.text, comments=True)
    if words[0] in ("kubectl", "helm"):
        for word in words:  # what they read from the repository is there; tests/test_chart.py runs them
            if word.startswith("deploy/"):
                assert (ROOT / word).exists(), f"{command.where}: {word}"
        return
    if "|" in words:  # hetsched … | kubectl apply -f -: the hetsched part
        words = words[:words.index("|")]
    assert words[0] == "hetsched", command
    group: Any = typer.main.get_command(app)  # typer's own click: a group is what resolves subcommands
    context = group.make_context("hetsched", words[1:])
    while hasattr(group, "resolve_command"):
        rest = [*context._protected_args, *context.args]
        name, chosen, rest = group.resolve_command(context, rest)
        assert chosen is not None and name is not None, f"{command.where}: {command.text}"
        context = chosen.make_context(name, rest, parent=context)
        group = chosen
    assert not context.args, f"{command.where}: unexpected arguments {context.args}"


def _measure(command: DocCommand, checkout: Path) -> None:
    words = shlex.split(command.text, comments=True)
    if Path(words[0]).name == "hetsched":
        _parse(DocCommand(command.where, " ".join(["hetsched", *map(shlex.quote, words[1:])])))
        return
    script = next(w for w in words if w.endswith(".py"))
    assert (ROOT / script).is_file(), f"{command.where}: {script}"
    if not any(word.startswith("--") for word in words):
        return  # nothing to check but the script
    shown = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), script, "--help"], cwd=checkout,
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    for word in words:
        if word.startswith("--"):
            assert word.split("=")[0] in shown.stdout, f"{command.where}: {script} has no {word}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_the_documented_command_works_as_written(command: DocCommand, checkout: Path) -> None:
    kind = how(command)
    if kind == "itself":
        return
    if kind == "parse":
        _parse(command)
    elif kind == "measure":
        _measure(command, checkout)
    elif kind == "trace":
        if not DEFAULT_TRACE_DIR.exists():
            pytest.skip(f"the openb trace is not at {DEFAULT_TRACE_DIR} (docs/replay.md: getting the trace)")
        _run(command, checkout)
    else:
        _run(command, checkout)

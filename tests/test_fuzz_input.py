"""Hostile input is normal input (issue 17): grammar-aware mutations of the shipped examples — a value
replaced by something hostile (markup, huge or fractional numbers, exponents, long or non-ASCII text, deep
nesting, wrong types), a key dropped, an item duplicated — fed to ``hetsched validate`` and ``hetsched
simulate`` (in process, through the CLI). Every run ends with exit 0 or 2 and a message, never a
traceback, and in bounded time (``simulate`` is bounded by ``--until``). Issue 29 added: a self-referencing
anchor put in place of any value, integers at and past Kubernetes' int32/int64 bounds, HyperNodes whose
``regexMatch`` is any hostile value (patterns that backtrack under Python's ``re``, backreferences), and
every file-taking entry point given a device file, a FIFO or a directory instead of a file.

CI runs ``HETSCHED_FUZZ_EXAMPLES`` cases (default 500); a long run: ``HETSCHED_FUZZ_EXAMPLES=20000``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hetsched.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCES = [EXAMPLES / "workloads/seeds.yaml", EXAMPLES / "scenarios/preempt.yaml",
           EXAMPLES / "scenarios/fault-jobs.yaml", EXAMPLES / "scenarios/two-queues.yaml"]
CASES = int(os.environ.get("HETSCHED_FUZZ_EXAMPLES", "500"))
RECURSE = "__a_value_that_contains_itself__"
"""Written out as ``&loop [1, *loop]``: a list that contains itself."""
HOSTILE: list[Any] = [
    "[/x]", "[bold red]boom", "1e9999999", "-1", "0.5", "1500m", "9" * 400, "x" * 100_000, "名前",
    "\u0663", "", " ", None, True, 2**64, -(2**63), 1e308, float("inf"), 0.1, [], {}, [[[[[[]]]]]],
    {"a": {"b": {"c": {}}}}, "UPPERCASE", "a.b..c", "-leading", "${HOME}", "\x00", "inf", "NaN",
    2**31 - 1, 2**31, -(2**31) - 1, 2**63, 2**63 - 1, -(2**63) - 1, 10**30,
    ".*" * 30 + "x", "[a-z0-9-]*" * 25 + "!", "(a+)+$", "(a)\\1", "(?=x)y", "a{1000}{1000}", RECURSE,
]
HYPERNODES = [
    {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "rack-0"},
     "spec": {"tier": 1, "members": [{"type": "Node", "selector": {"regexMatch": {"pattern": "ascend-0.*"}}}]}},
    {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "spine"},
     "spec": {"tier": 2, "members": [{"type": "HyperNode", "selector": {"exactMatch": {"name": "rack-0"}}}]}}]


def documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


def mutate(data: list[Any], draw: st.DrawFn) -> list[Any]:
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        places = paths(data)[1:]
        if not places:
            break
        where = draw(st.sampled_from(places))
        parent = data
        for step in where[:-1]:
            parent = parent[step]
        last = where[-1]
        action = draw(st.sampled_from(["replace", "replace", "drop", "duplicate"]))
        if action == "replace":
            parent[last] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        elif action == "drop" and isinstance(parent, dict):
            del parent[last]
        elif action == "drop" and isinstance(parent, list):
            parent.pop(last)
        elif isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        elif isinstance(parent, dict):
            parent[f"{last}-copy"] = copy.deepcopy(parent[last])
    return data


@st.composite
def mutated(draw: st.DrawFn) -> str:
    source = draw(st.sampled_from(SOURCES))
    data = documents(source) + (copy.deepcopy(HYPERNODES) if draw(st.booleans()) else [])
    text = yaml.safe_dump_all(mutate(data, draw), sort_keys=False, allow_unicode=True, width=2**20)
    return text.replace(RECURSE, "&loop [1, *loop]", 1).replace(RECURSE, "x")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args[0]} raised {type(result.exception).__name__}: {result.exception!r}"[:2000]) \
            from result.exception
    return result.exit_code, result.output


@settings(max_examples=CASES)
@given(text=mutated())
def test_mutated_manifests_are_valid_or_a_clear_error_never_a_traceback(text: str, tmp_path_factory: Any) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    workload = folder / "workload.yaml"
    workload.write_text(text, encoding="utf-8")
    code, output = run("validate", str(workload))
    assert code in (0, 2), output[-2000:]
    assert "Traceback" not in output
    if code == 2:
        assert "error:" in output
        return
    code, output = run("simulate", "--cluster", str(EXAMPLES / "scenarios/ascend-4.yaml"), str(workload),
                       "--until", "20000", "-q")
    assert code in (0, 2, 3), output[-2000:]  # 3: the run ended with jobs that never got their gang
    assert "Traceback" not in output


CLUSTERS = [EXAMPLES / "scenarios/ascend-4.yaml", EXAMPLES / "clusters/mixed.yaml"]


@st.composite
def mutated_cluster(draw: st.DrawFn) -> tuple[str, str]:
    spec = draw(st.sampled_from(CLUSTERS))
    cluster = yaml.safe_dump_all(mutate(documents(spec), draw), sort_keys=False, allow_unicode=True) \
        if draw(st.booleans()) else spec.read_text()
    faults = documents(EXAMPLES / "scenarios/faults.yaml")
    text = yaml.safe_dump_all(mutate(faults, draw) if draw(st.booleans()) else faults, sort_keys=False)
    return cluster.replace(RECURSE, "&loop [1, *loop]", 1), text.replace(RECURSE, "&loop {a: *loop}", 1)


@settings(max_examples=max(CASES // 5, 20))
@given(files=mutated_cluster())
def test_mutated_cluster_specs_and_fault_files_are_a_clear_error_never_a_traceback(
        files: tuple[str, str], tmp_path_factory: Any) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "cluster.yaml").write_text(files[0], encoding="utf-8")
    (folder / "faults.yaml").write_text(files[1], encoding="utf-8")
    code, output = run("simulate", "--cluster", str(folder / "cluster.yaml"),
                       str(EXAMPLES / "scenarios/fault-jobs.yaml"), "--faults", str(folder / "faults.yaml"),
                       "--until", "20000", "-q")
    assert code in (0, 2, 3), output[-2000:]
    assert "Traceback" not in output


def not_files(folder: Path) -> list[Path]:
    """A character device that never ends, a FIFO nobody writes (an open would block), a directory."""
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    return [Path("/dev/zero"), fifo, folder]


CLUSTER = str(EXAMPLES / "scenarios/ascend-4.yaml")
WORKLOAD = str(EXAMPLES / "scenarios/fault-jobs.yaml")
ENTRY_POINTS = {
    "validate": lambda f: ["validate", f],
    "simulate workload": lambda f: ["simulate", "--cluster", CLUSTER, f, "-q"],
    "simulate --cluster": lambda f: ["simulate", "--cluster", f, WORKLOAD, "-q"],
    "simulate --faults": lambda f: ["simulate", "--cluster", CLUSTER, WORKLOAD, "--faults", f, "-q"],
    "simulate --scheduler-conf": lambda f: ["simulate", "--cluster", CLUSTER, WORKLOAD, "--scheduler-conf", f, "-q"],
    "explain": lambda f: ["explain", "x", "--cluster", f],
    "doctor --cluster": lambda f: ["doctor", "--cluster", f],
    "install --values": lambda f: ["install", "--print", "--values", f],
    "devices parse": lambda f: ["devices", "parse", f, "--vendor", "ascend"],
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_device_file_fifo_or_directory_is_refused_before_it_is_read(entry: str, tmp_path: Path) -> None:
    """/dev/zero would be read until memory runs out and a FIFO would block forever: each is refused with
    the path and 'not a regular file', exit 2, before a byte is read."""
    for path in not_files(tmp_path):
        code, output = run(*ENTRY_POINTS[entry](str(path)))
        assert code == 2, (path, output[-2000:])
        assert "not a regular file" in output and "Traceback" not in output, (path, output[-2000:])


OUTPUTS = {
    "simulate --output": ["simulate", "--cluster", CLUSTER, WORKLOAD, "-q", "--until", "600", "--output"],
    "simulate --metrics": ["simulate", "--cluster", CLUSTER, WORKLOAD, "-q", "--until", "600", "--metrics"],
    "demo --export": ["demo", "--export"],
    "install --chart": ["install", "--chart"],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("entry", sorted(OUTPUTS))
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(entry: str, tmp_path: Path) -> None:
    """A full device (/dev/full) or a file where a folder should be: the command says it cannot write
    there, exit 2, never a traceback. (A folder that does not exist yet is made: ``--json bench/out/x.json``
    on a fresh checkout.)"""
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    targets = ["/dev/full", str(blocker / "sub")] if entry in ("demo --export", "install --chart") else \
        ["/dev/full", str(blocker / "sub" / "out")]
    for target in targets:
        code, output = run(*OUTPUTS[entry], target)
        assert code == 2 and "cannot write the" in output and target in output, (target, output[-2000:])
        assert "Traceback" not in output

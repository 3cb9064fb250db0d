"""Fault isolation in the cycle (issue 29): an exception while the scheduler handles one job — here a plugin
that raises on it — never stops everyone else's scheduling. The job is set aside with the error on its
PodGroup condition, a Warning Event and the cycle's count; every other job is scheduled in the same
cycle; the set-aside job is retried after a back-off that doubles, and scheduled once it stops raising."""

from __future__ import annotations

import pytest

from hetsched.scheduler.conf import DEFAULT_CONF_YAML, parse_conf
from hetsched.scheduler.framework import Code, JobValid, Plugin, Status
from hetsched.scheduler.plugins import registry
from hetsched.scheduler.runner import SET_ASIDE_BASE
from hetsched.scheduler.snapshot import JobInfo
from tests.builders import gang, harness, node


class Poisoned(Plugin, JobValid):
    """Raises on every job whose name starts with ``poison`` while ``armed``."""

    NAME = "poisoned"
    armed = True

    def job_valid(self, job: JobInfo) -> Status:
        if Poisoned.armed and job.key.split("/")[-1].startswith("poison"):
            raise ZeroDivisionError("a plugin bug on this job")
        return Status(Code.SUCCESS)


@pytest.fixture
def conf(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(registry.IN_TREE, Poisoned.NAME, Poisoned)
    monkeypatch.setattr(Poisoned, "armed", True)
    return DEFAULT_CONF_YAML + "  - name: poisoned\n"


def test_a_plugin_raising_on_one_job_leaves_the_rest_scheduled(conf: str) -> None:
    objects = [node("n1", cpu="16"), node("n2", cpu="16"),
               *gang("poison", 2), *gang("a", 2), *gang("b", 4), *gang("poison-2", 1)]
    run = harness(objects, parse_conf(conf))
    result = run.cycle()
    bound = run.bindings()
    assert {name.rsplit("-", 1)[0] for name in bound} == {"a", "b"} and len(bound) == 6, bound
    assert sorted(key for key, _ in result.set_aside) == ["default/poison", "default/poison-2"]
    assert all("ZeroDivisionError: a plugin bug on this job" in error for _, error in result.set_aside)
    condition = run.condition("poison")
    assert "scheduling this job raised an error (ZeroDivisionError: a plugin bug on this job)" in condition
    assert f"set aside for {SET_ASIDE_BASE:g} s" in condition
    events = [e for e in run.cluster.events if e.reason == "SchedulingError"]
    assert {e.key for e in events} == {"default/poison", "default/poison-2"} and {e.type for e in events} == {"Warning"}

    # within the back-off the job is not tried again (no new error), and says why
    again = run.cycle()
    assert again.set_aside == [] and "set aside" in run.condition("poison")
    # after it, it is retried: still raising, it is set aside for twice as long
    run.clock.advance_to(run.clock.now() + SET_ASIDE_BASE)
    third = run.cycle()
    assert sorted(key for key, _ in third.set_aside) == ["default/poison", "default/poison-2"]
    assert f"set aside for {2 * SET_ASIDE_BASE:g} s" in run.condition("poison")
    # fixed (the plugin stops raising): after the back-off it is scheduled like any other job
    Poisoned.armed = False
    run.clock.advance_to(run.clock.now() + 2 * SET_ASIDE_BASE)
    run.cycle()
    assert {name.rsplit("-", 1)[0] for name in run.bindings()} >= {"poison", "poison-2"}
    assert run.scheduler.set_aside == {}


def test_a_job_that_raises_while_it_is_placed_leaves_nothing_half_done(conf: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The error comes in the middle of a gang's statement (after some of its pods were placed): the cycle
    is decided again without it, so none of its pods binds and no one else's room is lost."""
    from hetsched.scheduler import statement

    original = statement.Statement.allocate

    def allocate(self: statement.Statement, group: object, nodes: object, *, pipelined: bool = False) -> None:
        original(self, group, nodes, pipelined=pipelined)  # type: ignore[arg-type]
        if group.job.key == "default/poison":  # after its first pods took room
            raise RuntimeError("raised half-way through the gang")

    monkeypatch.setattr(statement.Statement, "allocate", allocate)
    monkeypatch.setattr(Poisoned, "armed", False)
    objects = [node("n1", cpu="4"), node("n2", cpu="4"), *gang("poison", 4), *gang("zed", 8)]
    run = harness(objects, parse_conf(conf))
    result = run.cycle()  # poison goes first (same time, lower key); zed needs every cpu of both nodes
    assert [key for key, _ in result.set_aside] == ["default/poison"]
    bound = run.bindings()
    assert len(bound) == 8 and all(name.startswith("zed-") for name in bound), bound

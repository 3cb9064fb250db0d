"""Fault isolation in the cycle (issue 29): an exception while the scheduler handles one job — here a plugin
that raises on it — never stops everyone else's scheduling. The job is set aside with the error on its
PodGroup condition, a Warning Event and the cycle's count; every other job is scheduled in the same
cycle; the set-aside job is retried after a back-off that doubles, and scheduled once it stops raising."""

from __future__ import annotations

import numpy as np
import pytest

from hetsched.scheduler.contract.arrays import FloatArray, IntArray
from hetsched.scheduler.contract.framework import JobValid, NodeScore, Plugin
from hetsched.scheduler.contract.snapshot import JobInfo, TaskGroup
from hetsched.scheduler.contract.status import Code, Status
from hetsched.scheduler.defaults import DEFAULT_CONF_YAML, parse_conf
from hetsched.scheduler.engine.runner import SET_ASIDE_BASE
from hetsched.scheduler.engine.session import Session
from hetsched.scheduler.plugins import registry
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
    from hetsched.scheduler.engine import statement

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


class Scorer(Plugin, NodeScore):
    """Ranks nodes only; its session open raises while ``armed``."""

    NAME = "scorer"
    armed = True

    def on_session_open(self, session: Session) -> None:
        if Scorer.armed:
            raise KeyError("a ranking plugin's bug")

    def node_score(self, session: Session, group: TaskGroup, nodes: IntArray, placed: IntArray) -> FloatArray:
        return np.zeros(len(nodes))


class Guard(Plugin, JobValid):
    """Guards placements (a job validity rule); its session open or close raises while ``armed``."""

    NAME = "guard"
    armed = "open"

    def on_session_open(self, session: Session) -> None:
        if Guard.armed == "open":
            raise ValueError("a guarding plugin's bug")

    def on_session_close(self, session: Session) -> None:
        if Guard.armed == "close":
            raise ValueError("a guarding plugin's bug at close")

    def job_valid(self, job: JobInfo) -> Status:
        return Status(Code.SUCCESS)


def test_a_ranking_plugin_that_raises_opening_the_session_is_left_out_and_everyone_is_scheduled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: a plugin's session open raising aborted the whole cycle, every cycle. A plugin that only
    ranks is now left out for a back-off: the cycle schedules every job, reports the plugin, and tries the
    plugin again once the back-off ends."""
    monkeypatch.setitem(registry.IN_TREE, Scorer.NAME, Scorer)
    monkeypatch.setattr(Scorer, "armed", True)
    run = harness([node("n1", cpu="16"), *gang("a", 2), *gang("b", 3)],
                  parse_conf(DEFAULT_CONF_YAML + "  - name: scorer\n"))
    result = run.cycle()
    assert len(run.bindings()) == 5
    assert result.set_aside == [("plugin/scorer", "KeyError: \"a ranking plugin's bug\"")]
    for obj in gang("c", 1):
        run.cluster.create(obj)
    again = run.cycle()  # within the back-off: left out without being tried, the new job is scheduled
    assert again.set_aside == [] and len(run.bindings()) == 6
    run.clock.advance_to(run.clock.now() + SET_ASIDE_BASE)
    Scorer.armed = False  # fixed: tried again after the back-off, and kept
    assert run.cycle().set_aside == [] and run.scheduler.plugins_aside == {}


@pytest.mark.parametrize("point", ["open", "close"])
def test_a_guarding_plugin_that_raises_stops_placements_visibly_and_the_cycle_completes(
        point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin that guards placements cannot be left out without breaking its rule: while it raises (at
    session open or close) the cycle completes but places and evicts nothing, and every job's PodGroup
    says which plugin and what error; the plugin is tried every cycle, and the jobs run once it works."""
    monkeypatch.setitem(registry.IN_TREE, Guard.NAME, Guard)
    monkeypatch.setattr(Guard, "armed", point)
    run = harness([node("n1", cpu="16"), *gang("a", 2), *gang("b", 3)],
                  parse_conf(DEFAULT_CONF_YAML + "  - name: guard\n"))
    result = run.cycle()
    assert run.bindings() == {} and [key for key, _ in result.set_aside] == ["plugin/guard"]
    for job in ("a", "b"):
        assert "plugin guard raised an error opening or closing the scheduling session (ValueError: a guarding " \
               "plugin's bug" in run.condition(job)
    assert [key for key, _ in run.cycle().set_aside] == ["plugin/guard"]  # tried again: still raising
    Guard.armed = ""
    assert run.cycle().set_aside == [] and len(run.bindings()) == 5


def test_explain_answers_without_a_plugin_that_raises_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from hetsched.scheduler.engine.why import explain_job

    monkeypatch.setitem(registry.IN_TREE, Guard.NAME, Guard)
    monkeypatch.setattr(Guard, "armed", "open")
    run = harness([node("n1", cpu="1"), *gang("a", 2)], parse_conf(DEFAULT_CONF_YAML + "  - name: guard\n"))
    run.cycle()
    said = explain_job(run.scheduler.cache.snapshot(), run.scheduler.conf, "default/a", run.clock.now()).scheduler_says
    assert any("plugin guard raised an error opening the session (ValueError" in line for line in said), said
    assert any("no job is scheduled or evicted until it works again" in line for line in said), said

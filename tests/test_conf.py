"""Scheduler configuration: Volcano's default, the one switch spelling, unknown names and bad arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetsched.scheduler.defaults import (
    DEFAULT_CONF_YAML,
    VOLCANO_DEFAULT_CONF_YAML,
    ConfError,
    default_conf,
    parse_conf,
)


def test_default_is_volcanos_plus_node_groups_device_and_network_topology() -> None:
    conf = default_conf()
    assert conf.action_names == ["enqueue", "allocate", "backfill"]
    assert [[p.name for p in t.plugins] for t in conf.tiers] == [
        ["priority", "gang", "conformance"],
        ["overcommit", "drf", "predicates", "proportion", "nodeorder", "nodegroup", "devicetopology",
         "network-topology-aware"]]
    volcano = parse_conf(VOLCANO_DEFAULT_CONF_YAML)
    assert [[p.name for p in t.plugins] for t in volcano.tiers][1][-1] == "nodeorder"


def test_the_docs_show_the_default_configuration_as_it_is() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "scheduler.md").read_text(encoding="utf-8")
    block = text.split("## Configuration", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert block == DEFAULT_CONF_YAML


def test_volcano_helm_chart_config_parses() -> None:
    conf = parse_conf("""
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
    arguments: {binpack.weight: 0.2}
""")
    assert conf.tiers[1].plugins[-1].arguments == {"binpack.weight": 0.2}
    # Volcano's gang and drf take part in preemption; hetsched's do not: turning it off does nothing here,
    # which is accepted and said, never silently ignored
    assert conf.notes == [
        "<scheduler.conf>: tiers[0].plugins[1].enablePreemptable: plugin gang has no Evictable or PreemptableVictims "
        "point, so the switch "
        "does nothing (its switches: enableJobOrder, enableJobPipelined, enableJobReady, enableJobStarving, "
        "enableJobValid); turning it off is accepted, as Volcano's own configurations do for its plugin of this name",
        "<scheduler.conf>: tiers[1].plugins[1].enablePreemptable: plugin drf has no Evictable or PreemptableVictims "
        "point, so the switch "
        "does nothing (its switches: enableJobOrder); turning it off is accepted, as Volcano's own configurations "
        "do for its plugin of this name"]
    assert default_conf().notes == []


@pytest.mark.parametrize(("text", "message"), [
    ("actions: enqueue, shuffle\ntiers: [{plugins: [{name: gang}]}]", "unknown action 'shuffle'"),
    ("actions: allocate\ntiers: [{plugins: [{name: gangg}]}]", "tiers[0].plugins[0].name: unknown plugin 'gangg'"),
    ("actions: allocate\ntiers: [{plugins: [{name: gang, enabledJobReady: false}]}]",
     "unknown key 'enabledJobReady'; Volcano spells this switch enableJobReady"),
    ("actions: allocate\ntiers: [{plugins: [{name: proportion, enableOverused: false, enabledOverused: true}]}]",
     "enabledOverused and enableOverused are the same switch; give it once, as enabledOverused"),
    ("actions: allocate\ntiers: [{plugins: [{name: gang, enableHierarchy: true}]}]",  # Volcano-only: never ignored
     "tiers[0].plugins[0].enableHierarchy: plugin gang has nothing hetsched has for it (a Volcano-only point)"),
    ("actions: allocate\ntiers: [{plugins: [{name: gang, enableJobReady: maybe}]}]", "must be true or false"),
    ("actions: allocate\ntiers: [{plugins: [{name: binpack, arguments: {binpack.weight: heavy}}]}]",
     "plugin binpack: argument binpack.weight must be a number"),
    ("actions: allocate\ntiers: [{plugins: [{name: overcommit, arguments: {overcommit-factor: 0.5}}]}]",
     "overcommit-factor must be ≥ 1"),
    ("actions: allocate\ntiers: [{plugins: [{name: nodeorder, arguments: {leastrequested.wieght: 1}}]}]",
     "unknown argument 'leastrequested.wieght'"),
    ("actions: allocate\ntiers: []", "tiers"),
    ("actions: allocate\ntiers: [{plugins: [{name: binpack, enableJobReady: true}]}]",  # issue 30: never ignored
     "tiers[0].plugins[0].enableJobReady: plugin binpack has no JobReady point, so the switch does nothing "
     "(its switches: enableNodeOrder)"),
    ("actions: [", "malformed YAML"),
])
def test_bad_configuration_names_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfError) as info:
        parse_conf(text, "sched.conf")
    assert str(info.value).startswith("sched.conf:")
    assert message in str(info.value)


def test_disabled_extension_point_is_skipped() -> None:
    from tests.builders import gang, harness, node

    conf = ("actions: allocate\ntiers:\n- plugins:\n  - name: gang\n    enableJobReady: false\n"
            "  - name: predicates\n")
    h = harness([node("n1", cpu="1"), *gang("g", 2, cpu="1")], conf)
    h.cycle()
    assert len(h.bindings()) == 1  # without the gang's readiness gate, the pod that fits is bound alone


def test_simulate_warns_of_a_switch_that_does_nothing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hetsched.cli.main import app

    examples = Path(__file__).resolve().parents[1] / "examples" / "scenarios"
    conf = tmp_path / "volcano.conf"
    off = "  - name: gang\n    enablePreemptable: false\n"
    conf.write_text(VOLCANO_DEFAULT_CONF_YAML.replace("  - name: gang\n", off))
    result = CliRunner().invoke(app, ["simulate", "-q", "--cluster", str(examples / "ascend-4.yaml"),
                                      str(examples / "two-queues.yaml"), "--scheduler-conf", str(conf), "--until", "5"])
    assert result.exit_code in (0, 3), result.output
    assert "warning: " in result.output
    assert "enablePreemptable: plugin gang has no Evictable or PreemptableVictims point" in result.output


def test_switches_are_spelt_as_volcanos_scheduler_reads_them() -> None:
    """Issue 31: Volcano's ``conf.PluginOption`` reads ``enabledOverused``, ``enabledAllocatable`` and
    ``enabledHyperNodeOrder`` (YAML tags with a d) beside ``enable…`` for the rest. Those spellings turn the
    point off here too; hetsched's earlier ``enable…`` spellings still do (aliases); Volcano's switches for
    points hetsched has none of are accepted when off, and said."""
    conf = parse_conf("""
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: proportion
    enabledOverused: false
    enabledAllocatable: false
  - name: network-topology-aware
    enabledHyperNodeOrder: false
  - name: gang
    enableHierarchy: false
""")
    proportion, network = conf.tiers[0].plugins[0], conf.tiers[0].plugins[1]
    assert not proportion.enabled("enabledOverused") and not proportion.enabled("enabledAllocatable")
    assert proportion.enabled("enableQueueOrder") and not network.enabled("enabledHyperNodeOrder")
    assert [note.split(": ", 1)[0] for note in conf.notes] == ["<scheduler.conf>"]
    assert "tiers[0].plugins[2].enableHierarchy: plugin gang has nothing hetsched has for it" in conf.notes[0]
    old = parse_conf("actions: allocate\ntiers: [{plugins: [{name: proportion, enableOverused: false}]}]")
    assert not old.tiers[0].plugins[0].enabled("enabledOverused") and old.notes == []


def test_volcanos_plugin_names_are_accepted() -> None:
    """Issue 31: Volcano names the NUMA plugin ``numa-aware`` (hetsched's is ``numaaware``): both load it."""
    from hetsched.scheduler.plugins.numaaware import NumaAware

    conf = parse_conf("actions: allocate\ntiers: [{plugins: [{name: numa-aware}, {name: predicates}]}]")
    assert conf.plugin_class("numa-aware") is NumaAware
    assert parse_conf("actions: allocate\ntiers: [{plugins: [{name: numaaware}]}]").plugin_class("numaaware") \
        is NumaAware

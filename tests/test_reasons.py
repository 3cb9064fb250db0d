"""Reasons as data: every code renders from its arguments, has a bounded label, and readers work from
codes — the wording lives in one place (``scheduler.contract.reasons``)."""

from __future__ import annotations

from typing import Any

import pytest

from hetsched.scheduler.contract.reasons import SPECS, Reason, ReasonCode, fragments, label, nodes_unavailable, render

INSUFFICIENT = Reason.of(ReasonCode.INSUFFICIENT, resource="huawei.com/Ascend910")
SAMPLES: dict[str, Any] = {
    "taint": "{dedicated: infer}", "gates": ("example.com/quota",), "resource": "huawei.com/Ascend910",
    "free": 3, "want": 4, "unhealthy": 1, "link": "HCCS ring", "split": "3 free chip(s) split 1+2 across HCCS rings",
    "annotation": "hetsched.io/mlu-link-policy", "allowed": ("best-effort", "restricted"), "got": "tight",
    "memory": "nvidia.com/gpumem", "share": "nvidia.com/gpucores", "milli": 1500, "models": ("Ascend910B", "Ascend910"),
    "rule": "3 chip(s) per pod: Ascend 910 x8 accepts 1, 2, 4 or 8", "queue": "research", "groups": ("a", "b"),
    "plugin": "nodecost", "total": 12, "nodes": ((8, INSUFFICIENT), (4, Reason.of(ReasonCode.NODE_SELECTOR))),
    "missing": 2, "min_member": 4, "cause": nodes_unavailable(12, {INSUFFICIENT: 12}), "pods": 3,
    "amounts": (("huawei.com/Ascend910", 16000, 8000), ("cpu", 4500, -1)), "state": "Closed", "child": "team-a",
    "factor": 1.2, "bound": "tier ≤ 2", "tier": 2, "needed": 4, "best": 3, "domains": 3, "subgroup": "shard/1",
    "error": "allocate: ZeroDivisionError: division by zero", "backoff": 20.0, "valid": 3, "failed": 1,
    "verb": "jobEnqueueable", "message": "the extender refused to admit the job", "cann": "8.2.RC1",
    "problem": "resource volcano.sh/vgpu-cores: 150 is over 100", "mode": "mig", "source": "nvidia.com/mig-1g.5gb",
    "template": "1g.5gb", "namespace": "search-ranking", "resources": ("huawei.com/Ascend910", "cpu"),
    "renewal": "2027-01-01T00:00:00Z", "quota": "team-quota", "budget": 16.0, "commits": 8.0, "left": 4.0,
}


@pytest.mark.parametrize("code", list(ReasonCode), ids=lambda c: c.value)
def test_every_code_renders_from_its_arguments(code: ReasonCode) -> None:
    reason = Reason.of(code, **{name: SAMPLES[name] for name in SPECS[code].args})
    text = render(reason)
    assert text and "{" not in text.replace("{dedicated: infer}", "") and "None" not in text, text
    assert str(reason) == text
    for name in SPECS[code].args:  # every argument shows (amounts formatted as quantities)
        value = SAMPLES[name]
        if isinstance(value, str):
            assert value in text, (name, text)
    tag = label(reason)
    assert tag and len(tag) <= 80 and "\n" not in tag
    assert hash(reason) == hash(Reason.of(code, **{name: SAMPLES[name] for name in SPECS[code].args}))


def test_the_codes_and_their_renderings_match_one_to_one() -> None:
    assert set(SPECS) == set(ReasonCode)
    assert len({code.value for code in ReasonCode}) == len(ReasonCode)


def test_a_reason_takes_exactly_its_arguments() -> None:
    with pytest.raises(TypeError, match="takes \\(resource\\), got \\(\\)"):
        Reason.of(ReasonCode.INSUFFICIENT)
    with pytest.raises(TypeError, match="takes \\(\\), got \\(extra\\)"):
        Reason.of(ReasonCode.NODE_SELECTOR, extra=1)


def test_amounts_render_as_quantities_and_negative_room_as_zero() -> None:
    headroom = Reason.of(ReasonCode.CLUSTER_HEADROOM, amounts=(("cpu", 4000, -500),), factor=1.2)
    assert render(headroom) == ("minResources exceed the cluster's headroom for cpu (needs 4, headroom 0 = "
                                "allocatable × overcommit-factor 1.2 − admitted)")


def test_fragments_name_what_blocked_without_counts_or_amounts() -> None:
    cause = nodes_unavailable(24, {INSUFFICIENT: 16, Reason.of(ReasonCode.NODE_SELECTOR): 8})
    assert fragments(cause) == ["Insufficient huawei.com/Ascend910"]  # the shortage, not the static misses
    static_only = nodes_unavailable(3, {Reason.of(ReasonCode.UNTOLERATED_TAINT, taint="{a: b}"): 3})
    assert fragments(static_only) == ["node(s) had untolerated taint {a: b}"]
    gate = Reason.of(ReasonCode.CLUSTER_HEADROOM, amounts=(("cpu", 4000, 0),), factor=1.2)
    assert fragments(gate) == ["minResources exceed the cluster's headroom for cpu"]
    assert fragments(Reason.of(ReasonCode.GANG_UNSCHEDULABLE, missing=1, min_member=2, cause=cause)) == \
        fragments(cause)

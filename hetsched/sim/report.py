"""The simulation report: one self-contained HTML file with the plots a person looks at after a run.

Who calls it: ``hetsched simulate … --report report.html`` (and ``hetsched demo --report``). Plots are drawn
with matplotlib (Agg, no display) and embedded as base64 PNG, so the file opens anywhere, offline, and can
be attached to a ticket. Sections, each a ``<figure>`` with an ``<h2>`` title:

1. Accelerator allocation over time — chips held / chips present, per kind (ascend, cambricon, nvidia);
2. Queue wait distribution — per queue, the waits (gang start − submit) of the jobs that started;
3. Queue share vs deserved — per queue, allocated and deserved dominant shares over time (proportion);
4. Chip occupancy per node pool — one heatmap per pool, node × time, share of the node's chips held;
5. Fault timeline — injected faults per target, how long each took to recover, and evictions;
6. Network domains (only with HyperNodes) — each tier-1 HyperNode's chip occupancy over time, and how
   many HyperNodes of each tier were wholly free.

A section without data (no queues with a deserved share, no faults) says so in words instead of a blank plot.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

from hetsched.sim.results import Results

# The sections every report has, in order; NETWORK_TITLE's only when the cluster declares HyperNodes.
TITLES = ("Accelerator allocation over time", "Queue wait distribution", "Queue share vs deserved",
          "Chip occupancy per node pool", "Fault timeline")
NETWORK_TITLE = "Network domains"


def _figure_png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _steps(times: list[float], end: float) -> list[float]:
    return [*times, max(end, times[-1] if times else 0.0)]


def _allocation(results: Results, end: float) -> str | None:
    import matplotlib.pyplot as plt

    timeline = results.timeline
    if timeline is None or not timeline.times or not timeline.kind_physical:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for kind, physical in sorted(timeline.kind_physical.items()):
        if not physical:
            continue
        values = [sample.get(kind, 0) / physical for sample in timeline.kind_held]
        ax.step(_steps(timeline.times, end), [*values, values[-1]], where="post", label=f"{kind} ({physical} chips)")
    ax.set_title(TITLES[0])
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("chips held / chips")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    return _figure_png(fig)


def _waits(results: Results) -> str | None:
    import matplotlib.pyplot as plt

    by_queue: dict[str, list[float]] = {}
    for job in results.jobs:
        if job["start"] is not None:
            by_queue.setdefault(job["queue"], []).append(job["start"] - job["submit"])
    if not by_queue:
        return None
    names = sorted(by_queue)
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.5 * max(len(names), 3)))
    ax.boxplot([by_queue[n] for n in names], orientation="horizontal", showmeans=True,
               tick_labels=[f"{n} ({len(by_queue[n])})" for n in names])
    ax.set_title(TITLES[1])
    ax.set_xlabel("queue wait: gang start − submit (simulated s)")
    ax.grid(alpha=0.3, axis="x")
    return _figure_png(fig)


def _shares(results: Results, end: float) -> str | None:
    import matplotlib.pyplot as plt

    if not results.queues:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, data) in enumerate(sorted(results.queues.items())):
        series = data["series"]
        if not series:
            continue
        times = [row[0] for row in series]
        color = colors[i % len(colors)]
        allocated = [row[1] for row in series]
        deserved = [row[2] for row in series]
        ax.step(_steps(times, end), [*allocated, allocated[-1]], where="post", color=color, label=f"{name} allocated")
        ax.step(_steps(times, end), [*deserved, deserved[-1]], where="post", color=color, linestyle="--",
                label=f"{name} deserved")
    ax.set_title(TITLES[2])
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("dominant share of the cluster")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize="small", ncol=2)
    return _figure_png(fig)


def _heatmaps(results: Results, end: float) -> list[tuple[str, str]]:
    import matplotlib.pyplot as plt

    timeline = results.timeline
    if timeline is None or not timeline.times:
        return []
    matrix = timeline.matrix()
    physical = timeline.physical
    pools: dict[str, list[int]] = {}
    for index, pool in enumerate(timeline.pools):
        if index < len(physical) and physical[index] > 0:
            pools.setdefault(pool or "(no pool)", []).append(index)
    images = []
    edges = np.asarray(_steps(timeline.times, end))
    for pool, rows in sorted(pools.items()):
        share = matrix[:, rows] / physical[rows][None, :]
        fig, ax = plt.subplots(figsize=(10, 0.8 + min(0.12 * len(rows), 6)))
        mesh = ax.pcolormesh(edges, np.arange(len(rows) + 1), share.T, vmin=0, vmax=1, cmap="viridis",
                             shading="flat")
        ax.set_title(f"{TITLES[3]}: {pool} ({len(rows)} nodes)")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("node")
        if len(rows) <= 16:
            ax.set_yticks(np.arange(len(rows)) + 0.5, [timeline.nodes[r] for r in rows], fontsize="small")
        fig.colorbar(mesh, ax=ax, label="chips held / chips", pad=0.01)
        images.append((pool, _figure_png(fig)))
    return images


def _faults(results: Results, end: float) -> str | None:
    import matplotlib.pyplot as plt

    if not results.faults and not results.evictions:
        return None
    targets = sorted({f["target"] for f in results.faults})
    rows = {target: i for i, target in enumerate(targets)}
    if results.evictions:
        rows["evictions"] = len(rows)
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.45 * max(len(rows), 2)))
    for fault in results.faults:
        y = rows[fault["target"]]
        recover = fault["time_to_recover_s"]
        if recover:
            ax.barh(y, recover, left=fault["time"], height=0.35, color="#f4a261", alpha=0.8)
        ax.plot([fault["time"]], [y], marker="v", color="#c0392b", markersize=9)
        ax.annotate(fault["kind"], (fault["time"], y), textcoords="offset points", xytext=(4, 7), fontsize="small")
    if results.evictions:
        times = [e["time"] for e in results.evictions]
        ax.plot(times, [rows["evictions"]] * len(times), "|", color="#34495e", markersize=12)
    ax.set_yticks(list(rows.values()), list(rows))
    ax.set_xlim(0, max(end, 1.0))
    ax.set_title(TITLES[4])
    ax.set_xlabel("simulated time (s) — ▼ fault, bar: until the jobs it hit run again, | eviction")
    ax.grid(alpha=0.3, axis="x")
    return _figure_png(fig)


def _fault_table(results: Results) -> str:
    """Each fault and each kind of eviction with what it cost (the CLI's Faults and Evictions tables)."""
    def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f'<table class="summary faults"><tr>{cells}</tr>{body}</table>'

    parts = []
    if results.faults:
        parts.append(table(
            ("time (s)", "target", "kind", "jobs hit", "recovered after (s)", "fault retries", "chip-seconds lost"),
            [(f"{f['time']:,.0f}", f["target"], f["kind"], ", ".join(f["jobs"]) or "—",
              "—" if f["time_to_recover_s"] is None else f"{f['time_to_recover_s']:,.0f}", str(f["retries_used"]),
              f"{f['lost_chip_seconds']:,.0f}") for f in results.faults]))
    evictions = results.summary["evictions"]
    if evictions["total"]:
        parts.append(table(("eviction", "pods", "jobs", "chip-seconds lost"),
                           [(action, str(count), str(evictions["jobsByAction"].get(action, 0)),
                             f"{evictions['lostChipSecondsByAction'].get(action, 0.0):,.0f}")
                            for action, count in evictions["byAction"].items()]))
    return "".join(parts)


def _domains(results: Results, end: float) -> str | None:
    """Occupancy per tier-1 HyperNode (heatmap, HyperNode × time) above the wholly free HyperNodes per tier."""
    import matplotlib.pyplot as plt

    timeline = results.timeline
    if timeline is None or not timeline.domain_share:
        return None
    offset = len(timeline.times) - len(timeline.domain_share)  # samples before the tree existed have none
    times = timeline.times[offset:]
    width = max(len(row) for row in timeline.domain_share)
    share = np.zeros((len(times), width))
    for i, row in enumerate(timeline.domain_share):
        share[i, : len(row)] = row
    edges = np.asarray(_steps(times, end))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 2.5 + min(0.1 * width, 6)), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    mesh = top.pcolormesh(edges, np.arange(width + 1), share.T, vmin=0, vmax=1, cmap="viridis", shading="flat")
    top.set_title(f"{NETWORK_TITLE}: chips held per tier-1 HyperNode ({width})")
    top.set_ylabel("tier-1 HyperNode")
    if width <= 16:
        top.set_yticks(np.arange(width) + 0.5, timeline.domains[:width], fontsize="small")
    fig.colorbar(mesh, ax=top, label="chips held / chips", pad=0.01)
    tiers = sorted({tier for row in timeline.whole for tier in row})
    for tier in tiers:
        values = [row.get(tier, 0) for row in timeline.whole]
        bottom.step(_steps(times, end), [*values, values[-1]], where="post", label=f"tier {tier}")
    bottom.set_ylabel("wholly free")
    bottom.set_xlabel("simulated time (s)")
    bottom.grid(alpha=0.3)
    bottom.legend(loc="upper right", fontsize="small", ncol=len(tiers) or 1)
    return _figure_png(fig)


def _section(title: str, image: str | None, empty: str) -> str:
    body = (f'<img alt="{html.escape(title)}" src="data:image/png;base64,{image}">' if image
            else f'<p class="empty">{html.escape(empty)}</p>')
    return f"<figure><h2>{html.escape(title)}</h2>{body}</figure>"


def _summary_table(results: Results) -> str:
    summary = results.summary
    waits = summary["queueWaitSeconds"]
    rows = [("jobs", str(summary["jobs"])),
            ("phases", ", ".join(f"{k}: {v}" for k, v in summary["phases"].items())),
            ("queue wait p50 / p95 (s)", f"{waits['p50'] or 0:,.1f} / {waits['p95'] or 0:,.1f}"),
            ("simulated", f"{summary['simulatedSeconds']:,.0f} s, {summary['schedulerCycles']} cycles, "
                          f"{summary['binds']} binds")]
    rows += [(f"allocation {kind}", f"{ratio:.1%}") for kind, ratio in summary["allocationRatio"].items()]
    network = summary.get("network")
    if network:
        rows += [(f"jobs bound {name}", f"{entry['started']}/{entry['jobs']} started, mean wait "
                                        f"{entry['meanWaitSeconds'] or 0:,.0f} s")
                 for name, entry in network["byBound"].items()]
        rows.append(("gangs crossing a tier", ", ".join(f"{tier}: {count}" for tier, count in
                                                        network["jobsCrossing"].items())))
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary">{cells}</table>'


def render(results: Results, title: str) -> str:
    """The report as one HTML document (no external resources)."""
    import matplotlib

    matplotlib.use("Agg")
    end = float(results.summary["simulatedSeconds"])
    sections = [
        _section(TITLES[0], _allocation(results, end), "No accelerator chips in this cluster."),
        _section(TITLES[1], _waits(results), "No job started."),
        _section(TITLES[2], _shares(results, end),
                 "No queue had a deserved share (the proportion plugin is off in this configuration)."),
    ]
    heatmaps = _heatmaps(results, end)
    if heatmaps:
        sections += [_section(f"{TITLES[3]}: {pool}", image, "") for pool, image in heatmaps]
    else:
        sections.append(_section(TITLES[3], None, "No accelerator nodes."))
    sections.append(_section(TITLES[4], _faults(results, end), "No faults were injected and nothing was evicted.")
                    + _fault_table(results))
    domains = _domains(results, end)
    if domains is not None:
        sections.append(_section(NETWORK_TITLE, domains, ""))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}figure{margin:1.5em 0}"
             "img{max-width:100%}h2{font-size:1.1em}.empty{color:#777;font-style:italic}"
             "table.summary{border-collapse:collapse}table.summary th,table.summary td{border:1px solid #ccc;"
             "padding:4px 10px;text-align:left}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{_summary_table(results)}"
            f"{''.join(sections)}</body></html>\n")

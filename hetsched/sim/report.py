"""The simulation report: one self-contained HTML file a person reads at a glance after a run.

Who calls it: ``hetsched simulate … --report report.html`` (and ``hetsched demo --report``). Plots are drawn
with matplotlib (Agg, no display) and embedded as base64 PNG, so the file opens anywhere, offline, and can
be attached to a ticket. The page, top to bottom:

- the title (``hetsched simulation report``) and what was run: the inputs (cluster files, workloads,
  faults, scheduler configuration, end time), then the summary (jobs by phase, waits, allocation);
- the jobs: one row each — queue, phase, submitted, started, finished, waited, pods, and the reason it
  ended or waits (the scheduler's last unschedulable reasons) — waiting and failed jobs first;
- the charts, each a ``<figure>`` under its ``<h2>`` (the title is said once: not again inside the plot;
  legends sit outside the plotting area, so they never cover data):

  1. Accelerator allocation over time — chips held / chips present, per kind;
  2. Queue wait distribution — per queue, the share of its started jobs that had started within each wait
     (an empirical CDF: equal waits are a clear step, never a dot);
  3. Queue share vs deserved — per queue that had a share or held something, allocated and deserved
     dominant shares over time (proportion);
  4. Chip occupancy per node pool — one heatmap per pool, node × time, share of the node's chips held;
  5. Fault timeline — faults (▼, red) and recoveries (▲, green) per target, how long until the jobs a
     fault hit ran again, and evictions; with the table of what each cost;
  6. Network domains (only with HyperNodes) — each tier-1 HyperNode's chip occupancy over time, and how
     many HyperNodes of each tier were wholly free;
  7. Budgets and usage (only when a queue has a budget) — per queue and budgeted resource, the hours used
     in each period of the run against the budget, with the table of the books (``QueueUsage``).

A section without data (no queues with a deserved share, no faults) says so in words instead of a blank plot.
Every name in the page (jobs, queues, nodes, reasons) is user text: escaped.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any

import numpy as np

from hetsched import periods
from hetsched.sim.faults import RECOVERIES
from hetsched.sim.results import Results

# The sections every report has, in order; NETWORK_TITLE's only when the cluster declares HyperNodes.
TITLES = ("Accelerator allocation over time", "Queue wait distribution", "Queue share vs deserved",
          "Chip occupancy per node pool", "Fault timeline")
NETWORK_TITLE = "Network domains"
BUDGETS_TITLE = "Budgets and usage"
MAX_BUDGET_PLOTS = 12
"""Queue × resource panels drawn at most (the table lists every one)."""


def _figure_png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _legend_outside(ax: Any, **options: Any) -> None:
    """The legend to the right of the plotting area, never over the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small", **options)


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
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("chips held / chips")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _figure_png(fig)


def _waits(results: Results) -> str | None:
    """Per queue, the empirical CDF of the waits of the jobs that started: the share of them that had
    started within x seconds. Equal waits make one clear step (a box plot of them collapses to a dot)."""
    import matplotlib.pyplot as plt

    by_queue: dict[str, list[float]] = {}
    for job in results.jobs:
        if job["start"] is not None:
            by_queue.setdefault(job["queue"], []).append(max(0.0, job["start"] - job["submit"]))
    if not by_queue:
        return None
    longest = max(max(waits) for waits in by_queue.values())
    right = max(1.0, longest * 1.08)
    fig, ax = plt.subplots(figsize=(10, 3.2))
    for name in sorted(by_queue):
        waits = sorted(by_queue[name])
        shares = [(i + 1) / len(waits) for i in range(len(waits))]
        ax.step([0.0, *waits, right], [0.0, *shares, 1.0], where="post", label=f"{name} ({len(waits)} jobs)")
    ax.set_xlim(-right * 0.02, right)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("queue wait: gang start − submit (simulated s)")
    ax.set_ylabel("share of started jobs")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _figure_png(fig)


def _shares(results: Results, end: float) -> str | None:
    import matplotlib.pyplot as plt

    if not results.queues:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, data) in enumerate(sorted(results.queues.items())):
        series = data["series"]
        if not series or not any(row[1] or row[2] for row in series):
            continue  # a queue that never had a share nor held anything (root, say): nothing to show
        times = [row[0] for row in series]
        color = colors[i % len(colors)]
        allocated = [row[1] for row in series]
        deserved = [row[2] for row in series]
        ax.step(_steps(times, end), [*allocated, allocated[-1]], where="post", color=color, label=f"{name} allocated")
        ax.step(_steps(times, end), [*deserved, deserved[-1]], where="post", color=color, linestyle="--",
                label=f"{name} deserved")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("dominant share of the cluster")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
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
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel("node")
        if len(rows) <= 16:
            ax.set_yticks(np.arange(len(rows)) + 0.5, [timeline.nodes[r] for r in rows], fontsize="small")
        fig.colorbar(mesh, ax=ax, label="chips held / chips", pad=0.01)
        images.append((f"{pool} ({len(rows)} nodes)", _figure_png(fig)))
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
        recovery = fault["kind"] in RECOVERIES
        recover = fault["time_to_recover_s"]
        if recover and not recovery:
            ax.barh(y, recover, left=fault["time"], height=0.35, color="#f4a261", alpha=0.8)
        ax.plot([fault["time"]], [y], marker="^" if recovery else "v", color="#2e8b57" if recovery else "#c0392b",
                markersize=9)
        ax.annotate(fault["kind"], (fault["time"], y), textcoords="offset points", xytext=(4, -12 if recovery else 7),
                    fontsize="small")
    if results.evictions:
        times = [e["time"] for e in results.evictions]
        ax.plot(times, [rows["evictions"]] * len(times), "|", color="#34495e", markersize=12)
    ax.set_yticks(list(rows.values()), list(rows))
    ax.set_xlim(0, max(end, 1.0))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("simulated time (s) — ▼ fault, bar: until the jobs it hit run again, ▲ recovery, | eviction")
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
            ("time (s)", "target", "event", "kind", "jobs hit", "recovered after (s)", "fault retries",
             "chip-seconds lost"),
            [(f"{f['time']:,.0f}", f["target"], "recovery" if f["kind"] in RECOVERIES else "fault", f["kind"],
              ", ".join(f["jobs"]) or "—",
              "—" if f["time_to_recover_s"] is None or f["kind"] in RECOVERIES else f"{f['time_to_recover_s']:,.0f}",
              "—" if f["kind"] in RECOVERIES else str(f["retries_used"]),
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
    top.set_ylabel(f"tier-1 HyperNode ({width})")
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
    _legend_outside(bottom)
    return _figure_png(fig)


def _budgeted(results: Results) -> list[tuple[str, str, str, str, float, list[tuple[float, float]]]]:
    """(queue, resource, period kind, when exhausted, budget, [(period start, hours used)]) for each budgeted
    resource of each queue, from the books at the end of the run (closed periods, then the current one)."""
    found = []
    for entry in sorted(results.usage, key=lambda e: str(e.get("queue", ""))):
        spec, status = entry.get("spec") or {}, entry.get("status") or {}
        budget = spec.get("budget") or {}
        stretches = [(p["periodStart"], p.get("used") or {}) for p in status.get("history") or []]
        if status.get("periodStart") is not None:
            stretches.append((status["periodStart"], status.get("used") or {}))
        for resource, limit in sorted(budget.items()):
            found.append((str(entry["queue"]), resource, str(spec.get("period", "")),
                          str(spec.get("whenExhausted", "")), float(limit),
                          [(float(start), float(used.get(resource, 0.0))) for start, used in stretches]))
    return found


def _budgets(results: Results) -> str | None:
    import matplotlib.pyplot as plt

    panels = _budgeted(results)[:MAX_BUDGET_PLOTS]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 0.6 + 1.9 * len(panels)), squeeze=False)
    for ax, (queue, resource, period, when, limit, stretches) in zip(axes[:, 0], panels, strict=True):
        used = [hours for _, hours in stretches]
        ax.bar(range(len(used)), used, color=["#c0392b" if h > limit + 1e-6 else "#4c72b0" for h in used])
        ax.axhline(limit, color="#333", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(used)), [periods.iso(start)[:10] for start, _ in stretches], fontsize="small")
        ax.set_ylabel("hours", fontsize="small")
        ax.set_title(f"queue {queue}: {resource} per {period.lower()} (budget {limit:g}, {when}; red: over)",
                     fontsize="small", loc="left")
    fig.tight_layout()
    return _figure_png(fig)


def _budget_table(results: Results) -> str:
    rows = [(queue, resource, periods.iso(start), f"{hours:,.2f}", f"{limit:g}", f"{hours - limit:+,.2f}")
            for queue, resource, _, _, limit, stretches in _budgeted(results) for start, hours in stretches]
    head = ("queue", "resource", "period start", "hours used", "budget", "over (+) / left (−)")
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="summary budgets"><tr>{cells}</tr>{body}</table>'


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


JOB_ROWS = 500
"""Jobs listed in the page at most (results.json has every one)."""


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _job_table(results: Results) -> str:
    """One row per job, those that did not complete first: when it came, ran and ended, and why."""
    def why(job: dict[str, Any]) -> str:
        said = ": ".join(part for part in (job.get("reason") or "", job.get("message") or "") if part)
        if said:
            return said
        reasons = job.get("unschedulableReasons") or []
        if job["phase"] != "Completed" and reasons:
            return f"waiting: {reasons[-1]}"
        if job.get("faultRetries"):
            return f"restarted {job['faultRetries']}× after a fault ({job.get('lostChipSeconds', 0):,.0f} chip-s lost)"
        return "—"

    jobs = sorted(results.jobs, key=lambda j: (j["phase"] == "Completed", j["submit"], j["namespace"], j["name"]))
    head = ("job", "queue", "phase", "submitted (s)", "started (s)", "ended (s)", "waited (s)", "pods", "why")
    rows = [(f"{j['namespace']}/{j['name']}", j["queue"], j["phase"], _seconds(j["submit"]), _seconds(j["start"]),
             _seconds(j["end"]), _seconds(None if j["start"] is None else j["start"] - j["submit"]),
             str(len(j["pods"])), why(j)) for j in jobs[:JOB_ROWS]]
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join('<tr class="' + ("done" if row[2] == "Completed" else "open") + '">'
                   + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    more = (f'<p class="empty">and {len(jobs) - JOB_ROWS:,} more (results.json lists every job)</p>'
            if len(jobs) > JOB_ROWS else "")
    return f'<h2>Jobs</h2><table class="summary jobs"><tr>{cells}</tr>{body}</table>{more}'


def _inputs(inputs: list[tuple[str, str]]) -> str:
    if not inputs:
        return ""
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in inputs)
    return f'<h2>Inputs</h2><table class="summary inputs">{cells}</table>'


def render(results: Results, title: str, inputs: list[tuple[str, str]] | None = None) -> str:
    """The report as one HTML document (no external resources). ``title``: what was run (the page says
    "hetsched simulation report: <title>"); ``inputs``: (what, value) rows — cluster files, workloads,
    faults, scheduler configuration, end time."""
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
    budgets = _budgets(results)
    if budgets is not None:
        sections.append(_section(BUDGETS_TITLE, budgets, "") + _budget_table(results))
    style = ("body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}figure{margin:1.5em 0}"
             "img{max-width:100%}h2{font-size:1.1em;margin-top:1.6em}.empty{color:#777;font-style:italic}"
             "table.summary{border-collapse:collapse;margin:0.5em 0}table.summary th,table.summary td{border:1px "
             "solid #ccc;padding:4px 10px;text-align:left;vertical-align:top}table.jobs td:last-child{max-width:"
             "460px}tr.open td{background:#fff7e6}")
    heading = f"hetsched simulation report: {title}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(heading)}</title>'
            f"<style>{style}</style></head><body><h1>{html.escape(heading)}</h1>{_inputs(inputs or [])}"
            f"<h2>Summary</h2>{_summary_table(results)}{_job_table(results)}{''.join(sections)}</body></html>\n")

"""``hetsched sweep``: placement policies × openb pod lists × seeds, one replay per cell, one table and plot;
``hetsched families``: the held-out pod lists it judges a rule on (``replay.families``).

Who calls it: users comparing policies before touching production (docs/replay.md). The grid and the table
are ``replay.sweep``'s; this module picks the executor — a local process pool (``--jobs``), or a Dask
cluster (``--dask ADDRESS``; ``--dask local`` starts a LocalCluster on 127.0.0.1) — and shows progress.
Bad options and trace files exit 2 with one line naming them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from hetsched.cli.extras import need
from hetsched.cli.options import DEFAULT_TRACE_DIR, check_jobs, parse_seeds
from hetsched.cli.output import say, stderr_console, stdout_console, write_file, writing
from hetsched.replay.openb import TraceError

errors = stderr_console()
console = stdout_console()


@contextlib.contextmanager
def executor(jobs: int | None, dask: str | None) -> Iterator[Executor]:
    """Where the cells run: ``jobs`` local processes, or the Dask cluster at ``dask`` ("local": a
    LocalCluster of ``jobs`` single-threaded worker processes on loopback, closed afterwards)."""
    if dask is None:
        with ProcessPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            yield pool
        return
    from distributed import Client, LocalCluster

    if dask == "local":
        with LocalCluster(n_workers=jobs or os.cpu_count() or 1, threads_per_worker=1,  # type: ignore[no-untyped-call]
                          processes=True, host="127.0.0.1", dashboard_address=None) as cluster, \
                Client(cluster) as client:  # type: ignore[no-untyped-call]
            yield client.get_executor()
        return
    with Client(dask, timeout=30) as client:  # type: ignore[no-untyped-call]
        yield client.get_executor()


def sweep(
    pods: Annotated[str, typer.Option(help="pod lists (csv/openb_pod_list_<NAME>.csv): a comma list, or all")]
    = "default",
    policy: Annotated[str, typer.Option(help="policies, as replay-openb takes them (a comma list, best, all)")]
    = "fgd,best",
    seeds: Annotated[str, typer.Option(help="shuffle seeds, e.g. 42-51")] = "42-51",
    trace_dir: Annotated[Path, typer.Option(help="the alibaba-gpu-v2023 folder")] = DEFAULT_TRACE_DIR,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", help="cells at once [default: the machine's cores]")]
    = None,
    dask: Annotated[str | None, typer.Option(
        help="run the cells on a Dask cluster: its scheduler address (tcp://host:8786; every worker needs "
             "hetsched and the trace at --trace-dir), or 'local' (needs the 'distributed' extra)")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="write every cell here (CSV)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the cells and the summary here")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="write the summary as bars (PNG) here")] = None,
) -> None:
    """Replay the openb trace for every policy × pod list × seed; one table (CSV/JSON), one plot. The same
    table whatever runs the cells: local processes or a Dask cluster."""
    from hetsched.replay.report import resolve_policies
    from hetsched.replay.sweep import as_json, cells, pod_lists, run_sweep, summary, write_csv

    if plot_out is not None:
        need("report", "sweep --plot")
    if dask is not None:
        need("distributed", "sweep --dask")
    try:
        grid = cells(pod_lists(trace_dir, pods), resolve_policies(policy), parse_seeds(seeds))
        with executor(check_jobs(jobs), dask) as pool:
            rows = run_sweep(trace_dir, grid, pool)
    except (TraceError, ValueError, OSError) as exc:
        say(errors, "error", f"{exc}")
        raise typer.Exit(2) from None
    if csv_out is not None:
        with writing(csv_out, "table"):
            write_csv(rows, csv_out)
    if json_out is not None:
        write_file(json_out, json.dumps(as_json(rows), indent=2) + "\n", "table")
    if plot_out is not None:
        from hetsched.replay.sweep import plot

        with writing(plot_out, "plot"):
            plot(rows, plot_out)
    table = Table(title=f"openb sweep: unallocated GPU % at 100 % arrived ({len(rows)} replays)")
    table.add_column("pod list")
    table.add_column("policy")
    table.add_column("mean ± std", justify="right")
    table.add_column("wins / losses vs first", justify="right")
    table.add_column("mean diff", justify="right")
    table.add_column("p (sign; signed-rank)", justify="right")
    first = rows[0].policy if rows else ""
    for entry in summary(rows):
        if entry["policy"] == first:
            paired = ("–", "–", "–")
        else:
            rank = entry.get(f"signed_rank_p_vs_{first}")
            paired = (f"{entry[f'wins_vs_{first}']} / {entry[f'losses_vs_{first}']}",
                      f"{entry[f'mean_diff_vs_{first}']:+.3f}",
                      f"{entry[f'sign_p_vs_{first}']:.3g}" + (f"; {rank:.3g}" if rank is not None else ""))
        table.add_row(entry["pods"], entry["policy"], f"{entry['mean']:.2f} ± {entry['std']:.2f}", *paired)
    console.print(table)


def families(
    out: Annotated[Path, typer.Option(help="folder to write the families into (as a trace: OUT/csv/…)")],
    trace_dir: Annotated[Path, typer.Option(help="the alibaba-gpu-v2023 folder (its 8 shared pod lists)")]
    = DEFAULT_TRACE_DIR,
    family: Annotated[str, typer.Option(help="mix-uniform, mix-random, share, nodes, cpu: a comma list, or all")]
    = "all",
    members: Annotated[int, typer.Option(help="members per family")] = 4,
    seed: Annotated[int, typer.Option(help="the members' random streams")] = 1,
) -> None:
    """Write held-out workload families made from the trace's shared pod lists (mixtures, perturbed shares,
    node subsets, CPU-heavier lists); replay them with ``hetsched sweep --trace-dir OUT --pods all``."""
    from hetsched.replay.families import FAMILIES, generate

    wanted = list(FAMILIES) if family.strip() == "all" else [f.strip() for f in family.split(",") if f.strip()]
    try:
        names = generate(trace_dir, out, members, seed, wanted)
    except (TraceError, ValueError, OSError) as exc:
        say(errors, "error", f"{exc}")
        raise typer.Exit(2) from None
    console.print(f"wrote {len(names)} pod lists to {out / 'csv'}: {', '.join(names)}")

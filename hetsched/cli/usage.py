"""``hetsched usage``: chargeback — hours per business line (queue), team (namespace), period and resource, with
each current period's budget and what is left — from a cluster's QueueUsages or a simulation's results.

Who calls it: the CLI (``cli.main``). The rows are ``api.usage_report``'s; this module reads, filters and
prints them (a table, CSV or JSON). A results file or answer that is not what it should be is a clear error
(exit 2), never a traceback.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from hetsched.api.objects import QueueUsage
from hetsched.api.usage_report import COLUMNS, rows
from hetsched.api.yamlsafe import YamlLimitError, read_text
from hetsched.cli.connection import CaFile, Connection, Context, Insecure, Kubeconfig, Server, TokenFile, fail
from hetsched.cli.output import stdout_console

USAGES = "/apis/hetsched.io/v1alpha1/queueusages"
FORMATS = ("table", "csv", "json")
MAX_RESULTS = 1 << 30
"""Bytes of a results file read at most (a month of a busy simulated cluster is a few hundred MB)."""


def _from_results(path: Path) -> list[QueueUsage]:
    try:
        data = json.loads(read_text(path, limit=MAX_RESULTS))
    except (OSError, ValueError, RecursionError, YamlLimitError) as exc:  # RecursionError: JSON nested too deep
        raise fail(f"{path}: cannot read it as a simulation's results ({' '.join(str(exc).split())[:200]})") from None
    entries = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise fail(f"{path}: no \"usage\" list (results of `hetsched simulate --output`)")
    found = []
    for index, entry in enumerate(entries):
        try:
            found.append(QueueUsage.model_validate({"metadata": {"name": entry["queue"]}, "spec": entry["spec"],
                                                    "status": entry["status"]}))
        except (KeyError, TypeError, ValidationError) as exc:
            raise fail(f"{path}: usage[{index}]: {' '.join(str(exc).split())[:200]}") from None
    return found


def _from_cluster(connection: Connection) -> list[QueueUsage]:
    from hetsched.cluster.kubernetes import from_api

    client = connection.client()
    try:
        items = client.request("GET", USAGES).get("items") or []
    except Exception as exc:
        raise fail(f"QueueUsages: {' '.join(str(exc).split())[:300]}") from None
    found = []
    for item in items:
        try:
            usage = from_api("QueueUsage", item)
        except Exception as exc:
            raise fail(f"QueueUsage: {' '.join(str(exc).split())[:300]}") from None
        if isinstance(usage, QueueUsage):
            found.append(usage)
    return found


def usage(
    results: Annotated[Path | None, typer.Option(help="a simulation's results (`hetsched simulate --output`) "
                                                      "instead of a cluster")] = None,
    queue: Annotated[str, typer.Option(help="one queue (business line) only")] = "",
    period: Annotated[str, typer.Option(help="all, current, or a period's start: YYYY-MM or YYYY-MM-DD (UTC)")]
    = "all",
    output: Annotated[str, typer.Option("--format", help="table, csv or json")] = "table",
    kubeconfig: Kubeconfig = None, context: Context = None, server: Server = None, token_file: TokenFile = None,
    ca_file: CaFile = None, insecure: Insecure = False,
) -> None:
    """Chip-, core- and GiB-hours per queue, namespace, period and resource, with budgets (chargeback)."""
    if output not in FORMATS:
        raise fail(f"--format: one of {', '.join(FORMATS)}, not {output[:40]!r}")
    if period not in ("all", "current") and not _period_prefix(period):
        raise fail(f"--period: all, current, YYYY-MM or YYYY-MM-DD, not {period[:40]!r}")
    usages = _from_results(results) if results is not None else _from_cluster(
        Connection(kubeconfig, context, server, token_file, ca_file, insecure))
    found = rows(usages, queue=queue, period=period)
    if output == "json":
        print(json.dumps(found, indent=2))
    elif output == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(found)
        print(buffer.getvalue(), end="")
    else:
        _table(found)


def _period_prefix(text: str) -> bool:
    parts = text.split("-")
    return (len(parts) in (2, 3) and len(parts[0]) == 4 and all(p.isdigit() and p.isascii() for p in parts)
            and all(len(p) == 2 for p in parts[1:]))


def _table(found: list[dict[str, Any]]) -> None:
    table = Table(box=None, pad_edge=False)
    for column in ("QUEUE", "NAMESPACE", "PERIOD START", "RESOURCE", "HOURS", "BUDGET", "REMAINING"):
        table.add_column(column, no_wrap=True)
    for row in found:
        table.add_row(row["queue"], row["namespace"], row["periodStart"], row["resource"], f"{row['hours']:,.2f}",
                      "-" if row["budget"] is None else f"{row['budget']:,.2f}",
                      "-" if row["remaining"] is None else f"{row['remaining']:,.2f}")
    stdout_console().print(table)

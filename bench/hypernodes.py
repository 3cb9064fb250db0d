"""How long a large network tree takes to build from a cluster spec and to check: HyperNodes discovered
from a 3-tier pool's labels (``ClusterSpec.hypernodes``) and the tree checked against the nodes
(``api.hypernodes.build``, what ``simulate`` runs before it starts).

    .venv/bin/python bench/hypernodes.py [--servers 10000] [--sizes 16 4 8]
"""

from __future__ import annotations

import argparse
import time

from hetsched.api import hypernodes
from hetsched.cluster.spec import parse_cluster_spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", type=int, default=10_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 4, 8], help="units per HyperNode, per tier")
    args = parser.parse_args()
    spec = parse_cluster_spec({"kind": "ClusterSpec", "metadata": {"name": "bench"}, "pools": [{
        "name": "s", "count": args.servers, "accelerators": [{"kind": "ascend", "model": "Ascend910", "count": 8}],
        "topology": [{"tier": tier, "size": size} for tier, size in enumerate(args.sizes, start=1)]}]})
    nodes = spec.nodes()
    started = time.perf_counter()
    made = spec.hypernodes(nodes)
    discovered = time.perf_counter()
    _, problems = hypernodes.build(made, nodes)
    checked = time.perf_counter()
    assert not problems, problems[:3]
    print(f"{args.servers:,} servers, tiers of {args.sizes}: {len(made)} HyperNodes, discovered in "
          f"{discovered - started:.3f} s, checked in {checked - discovered:.3f} s")


if __name__ == "__main__":
    main()

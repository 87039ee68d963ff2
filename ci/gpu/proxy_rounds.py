# SPDX-License-Identifier: MIT
"""Summarises proxy_ab.sh's ``rounds`` stage: per build (base, new, new-flags, new-env), the median and the
range over rounds of the proxy's GB/s per PE and its share of the conduit per size, and of the
8-byte put-with-signal half round trip beside the socket ping-pong of the same runs."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main(folder: str) -> None:
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(Path(folder).glob("r*/proxy-*.json")):
        runs[path.stem.removeprefix("proxy-")].append(json.loads(path.read_text()))
    for build, results in sorted(runs.items()):
        print(f"{build}: {len(results)} rounds, median (range)")
        by_size: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for result in results:
            for row in result["rows"]:
                by_size[row["size_bytes"]].append(row)
        for size, rows in sorted(by_size.items()):
            gbps = _spread([r["per_pe_GBps"] for r in rows])
            share = _spread([100 * r["proxy_over_conduit"] for r in rows], 0)
            print(f"  {size >> 20:>4} MiB  proxy {gbps} GB/s per PE, of the conduit {share} %")
        latency = _spread([r["latency_us"] for r in results], 1)
        socket = _spread([r["socket_latency_us"] for r in results], 1)
        print(f"  put-with-signal {latency} us, socket ping-pong {socket} us")


if __name__ == "__main__":
    main(sys.argv[1])

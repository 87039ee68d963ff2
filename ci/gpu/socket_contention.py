# SPDX-License-Identifier: MIT
"""The loopback socket copy that mori-ep-bench sets inter-node rows against, run by 1, 2 and 4
senders at once (each to a receiver process of its own, 2 connections each), as the PEs of a
2 x 2 inter-node EP run send at once: what one sender gets of the host when every PE of the job
is on the wire (issue 32). Prints a table and writes JSON to the path given (or stdout only).

    python3 ci/gpu/socket_contention.py [--sizes 1048576 4194304] [--senders 1 2 4] [--output F]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from mori._provenance import provenance

_ONE_SENDER = """
import json, sys, time
from mori.shmem.bench.remote import _remote_iterations, _socket_copy
sizes, start = json.loads(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
copied = _socket_copy(sizes, 2, pingpongs=0, repeats=5)
print(json.dumps([s * _remote_iterations(s) / t / 1e9 for s, t in zip(sizes, copied["seconds"])]))
"""


def run(sizes: list[int], senders: int) -> list[list[float]]:
    """Each sender's GB/s per size, all started at the same moment."""
    start = time.time() + 3.0  # after every interpreter has imported
    procs = [
        subprocess.Popen([sys.executable, "-c", _ONE_SENDER, json.dumps(sizes), str(start)], stdout=subprocess.PIPE)
        for _ in range(senders)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"a sender exited with {proc.returncode}")
        results.append(json.loads(out))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1 << 20, 4 << 20])
    parser.add_argument("--senders", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--output")
    args = parser.parse_args()
    rows = []
    for senders in args.senders:
        per_sender = run(args.sizes, senders)
        for index, size in enumerate(args.sizes):
            gbps = [r[index] for r in per_sender]
            rows.append(
                {
                    "senders": senders,
                    "size_bytes": size,
                    "gbps_per_sender": gbps,
                    "min_gbps": min(gbps),
                    "mean_gbps": sum(gbps) / len(gbps),
                }
            )
    print(f"{'senders':>8} {'size':>10} {'mean GB/s':>10} {'min GB/s':>9}")
    for row in rows:
        print(f"{row['senders']:>8} {row['size_bytes']:>10} {row['mean_gbps']:>10.2f} {row['min_gbps']:>9.2f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"rows": rows, "streams_per_sender": 2, "provenance": provenance()}, f, indent=1)


if __name__ == "__main__":
    main()

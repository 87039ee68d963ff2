# SPDX-License-Identifier: MIT
"""``mori-shmem-bench --device-proxy``: kernels putting to a PE they cannot load/store.

2 PEs on the cuda backend with ``MORI_SHMEM_PES_PER_NODE=1``, so each PE's peer is on another
"node": the same put kernels as the cuda benchmark (bench_gpu.pe_program) hand every put to the
PE's device proxy, whose host thread moves it over the remote conduit (``--conduit``, tcp by
default) and completes the kernel's quiet. Both PEs put at once; the table gives the mean per PE
beside the same puts issued by the host through the conduit (the proxy's ceiling:
``proxy_over_conduit``) and a plain loopback socket copy of the same sizes in one direction
(bench_remote), and the 8-byte put-with-signal ping-pong through both proxies beside a socket
ping-pong. A PE's grid is sized for its share of the GPU's SMs (``sm_count`` in the JSON), as if
each node had a GPU of its own. ``sweep_s`` is the wall time of the PEs' whole run (every size, scope and ping-pong).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

from mori.bench_report import Column, header, size_ladder, write_json
from mori.bench_report import row as table_row
from mori.shmem.bench import DEFAULT_SCOPES, require_two_pes
from mori.shmem.bench.remote import _remote_iterations, _socket_copy
from mori.shmem.proxy_hazards import NEEDED_ENV

STREAMS = 2
# The GPU benchmark moves 16 GiB per size, minutes over a socket; this bounds each size to
# about a second at loopback rates.
BYTES_PER_SIZE = 256 << 20


_COLUMNS = (
    Column("scope", 6), Column("size", 10), Column("proxy GB/s", 11, ".2f"), Column("conduit GB/s", 13, ".2f"),
    Column("proxy/conduit", 14, ".0%"), Column("socket GB/s", 12, ".2f"), Column("proxy/socket", 13, ".0%"),
    Column("put us", 9, ".1f"),
)  # fmt: skip


def main_device_proxy(args: argparse.Namespace) -> int:
    from mori.shmem.bench import gpu as bench_gpu
    from mori.shmem.device import shmem_cuda_available
    from mori.shmem.testing import run_pes

    require_two_pes(args, "--device-proxy")
    if not shmem_cuda_available():
        raise SystemExit("--device-proxy needs a GPU: the device proxy serves kernels, and no CUDA device is visible")
    sizes = size_ladder(args.min_size or 4 << 10, args.max_size or 64 << 20)
    # Block scope unless asked: a thread-scope put of a large buffer becomes thousands of proxy
    # requests, which measures the ring rather than the transfer.
    scope_text = "block" if args.scopes == DEFAULT_SCOPES else args.scopes
    scopes = [s.strip() for s in scope_text.split(",") if s.strip()]
    pingpongs = args.pingpongs or 500
    conduit = "tcp" if args.conduit == "auto" else args.conduit
    env = {
        "MORI_SHMEM_BACKEND": "cuda",
        "MORI_SHMEM_HEAP_SIZE": str(2 * max(sizes) + (64 << 20)),
        "MORI_SHMEM_PES_PER_NODE": "1",
        "MORI_SHMEM_REMOTE_CONDUIT": conduit,
        "MORI_SHMEM_REMOTE_STREAMS": str(STREAMS),
        **NEEDED_ENV,
    }
    started = time.perf_counter()
    per_pe = run_pes(bench_gpu.pe_program, 2, sizes, scopes, pingpongs, BYTES_PER_SIZE, timeout=args.timeout, env=env)
    sweep_s = time.perf_counter() - started
    ceiling = _socket_copy(sizes, STREAMS, pingpongs, args.repeats)
    socket_gbps = {
        size: size * _remote_iterations(size) / seconds / 1e9
        for size, seconds in zip(sizes, ceiling["seconds"], strict=True)
    }
    socket_us = statistics.median(ceiling["latency_s"]) * 1e6
    summary = bench_gpu.summarize(per_pe)
    conduit_gbps = {row["size_bytes"]: row["GBps"] / len(per_pe) for row in summary if row["scope"] == "conduit"}
    rows = []
    lines = [
        f"mori-shmem-bench --device-proxy: 2 PEs on one GPU, each a node of its own, {conduit} conduit on "
        f"loopback ({STREAMS} streams); GB/s per PE (both put at once, each a grid for "
        f"{per_pe[0]['sm_count']} SMs); conduit = the same puts from the host; socket = a plain socket copy, "
        "one direction",
        header(_COLUMNS),
    ]
    for measured in summary:
        if measured["scope"] in ("copy", "conduit"):
            continue
        per_pe_gbps = measured["GBps"] / len(per_pe)
        sock = socket_gbps[measured["size_bytes"]]
        host = conduit_gbps[measured["size_bytes"]]
        rows.append({**measured, "per_pe_GBps": per_pe_gbps, "conduit_GBps": host,
                     "proxy_over_conduit": per_pe_gbps / host, "socket_GBps": sock})  # fmt: skip
        cells = (measured["scope"], measured["size_bytes"], per_pe_gbps, host, per_pe_gbps / host, sock,
                 per_pe_gbps / sock, measured["us"])  # fmt: skip
        lines.append(table_row(_COLUMNS, cells))
    latency_us = per_pe[0]["latency_s"] * 1e6
    lines.append(
        f"8-byte put-with-signal latency, kernel to kernel through both proxies (half round trip): "
        f"{latency_us:.1f} us; socket ping-pong: {socket_us:.1f} us"
    )
    lines.append(f"whole sweep (PEs' run, every size and the ping-pong): {sweep_s:.1f} s")
    sys.stdout.write("\n".join(lines) + "\n")
    document = {
        "benchmark": "mori-shmem-bench --device-proxy",
        "conduit": conduit,
        "streams": STREAMS,
        "host": platform.node(),
        "rows": rows,
        "latency_us": latency_us,
        "socket_latency_us": socket_us,
        "sweep_s": sweep_s,
        "sm_count": per_pe[0]["sm_count"],
    }
    write_json(args.output, document)
    return 0

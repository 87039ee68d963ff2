# SPDX-License-Identifier: MIT
"""``mori-umbp-bench``: trace replay against a pool; writes JSON (and a PNG with matplotlib).

Without ``--master`` it starts its own single-node pool in this process: a master and
``--peers`` peers that own the pages, plus the client that replays (which owns none), so every
block crosses mori-io. With ``--master ADDR`` the client joins an existing pool.

``--profile hbm`` (needs torch with CUDA) gives each peer an HBM tier of ``--peer-capacity``
bytes (puts go there first, evicted blocks demote to the peer's DRAM of the same size) and makes
the replaying client's KV buffer a CUDA tensor registered with mori-io, so blocks move GPU to GPU
(mori-io's P2P backend on one host).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

from mori.bench_report import add_json, write_json
from mori.umbp.bench import ops, report, runner, trace
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.config import (
    UMBPConfig,
    UMBPDistributedConfig,
    UMBPDramConfig,
    UMBPHbmConfig,
    UMBPMasterClientConfig,
)
from mori.umbp.errors import TierUnavailableError
from mori.umbp.master.server import MasterServer, MasterServerConfig


def _client(
    master: str, node_id: str, capacity: int, page: int, staging: int, hbm: int = 0, policy: str = "lru"
) -> UMBPClient:
    mc = UMBPMasterClientConfig(master, node_id, "127.0.0.1")
    dist = UMBPDistributedConfig(mc, staging_buffer_size=staging)
    config = UMBPConfig(UMBPDramConfig(capacity, page), dist, hbm=UMBPHbmConfig(hbm, page))
    config.eviction.policy = policy
    return UMBPClient(config)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mori-umbp-bench", description=__doc__)
    p.add_argument("--trace", type=Path, help="JSON Lines trace ({'keys': [...]} per request); default synthetic")
    p.add_argument("--requests", type=int, default=200, help="synthetic: requests")
    p.add_argument("--sessions", type=int, default=16, help="synthetic: sessions (Zipf-popular)")
    p.add_argument("--blocks-per-turn", type=int, default=4, help="synthetic: new blocks per turn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block-bytes", type=int, default=256 << 10)
    p.add_argument("--master", help="join an existing pool at host:port instead of starting one")
    p.add_argument("--peers", type=int, default=2, help="peers of the pool this command starts")
    p.add_argument("--peer-capacity", type=int, default=256 << 20, help="DRAM (and HBM) bytes per peer")
    p.add_argument("--profile", choices=("dram", "hbm"), default="dram", help="hbm: peers own HBM, the client CUDA")
    p.add_argument("--policy", choices=("lru", "prefix_aware_lru"), default="lru", help="the peers' eviction.policy")
    add_json(p, Path("umbp-bench.json"), aliases=("--out",), dest="out")
    p.add_argument("--png", type=Path, default=None, help="also draw latency CDFs and hit rate here")
    p.add_argument("--mode", choices=("trace", "ops"), default="trace", help="ops: put/get cost matrix (see ops.py)")
    p.add_argument("--blocks", default="16384,262144,2097152", help="ops: block sizes in bytes, comma-separated")
    p.add_argument("--apis", default="single,batch", help="ops: single and/or batch")
    p.add_argument("--threads", default="1,4", help="ops: client thread counts, comma-separated")
    p.add_argument("--batch", type=int, default=16, help="ops: keys per batch call")
    p.add_argument("--bytes-per-case", type=int, default=32 << 20, help="ops: bytes put per case (then got)")
    p.add_argument("--max-keys", type=int, default=2000, help="ops: at most this many keys per case")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.mode == "ops":
        return _main_ops(args)
    reqs = (trace.load(args.trace) if args.trace else
            trace.synthetic(args.requests, args.sessions, args.blocks_per_turn, args.seed))  # fmt: skip
    page = min(args.block_bytes, 2 << 20)
    staging = max(args.block_bytes, 4 << 20)
    hbm = args.peer_capacity if args.profile == "hbm" else 0
    with contextlib.ExitStack() as stack:
        master = args.master
        try:
            if master is None:
                server = stack.enter_context(MasterServer(MasterServerConfig(listen_address="127.0.0.1:0")))
                master = server.address
                for i in range(args.peers):
                    peer = _client(master, f"bench-peer-{i}", args.peer_capacity, page, staging, hbm, args.policy)
                    stack.enter_context(peer)
            client = stack.enter_context(_client(master, "bench-client", 0, page, staging))
            res = runner.replay(client, reqs, args.block_bytes, device=0 if hbm else -1)
        except TierUnavailableError as exc:
            sys.stderr.write(f"mori-umbp-bench --profile {args.profile}: {exc}\n")
            return 2
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    out = report.summary(res, config)
    # The same trace against a pool that never evicts: the hit rate no policy can beat.
    out["hit_rate_unlimited_pool"] = sum(trace.expected_hits(reqs)) / res.blocks if res.blocks else 0.0
    png = report.write(out, res, args.out, args.png)
    lat = out["latency_ms"]["request"]
    sys.stdout.write(
        f"profile={args.profile} requests={out['requests']} blocks={out['blocks']} hit_rate={out['hit_rate']:.3f} "
        f"(unlimited pool {out['hit_rate_unlimited_pool']:.3f}) put_failed={out['put_failed']} "
        f"req_per_s={out['requests_per_s']:.1f} MiB_per_s={out['MiB_per_s']:.1f} "
        f"request_ms p50={lat.get('p50', 0):.2f} p99={lat.get('p99', 0):.2f} corrupt={out['corrupt_blocks']} "
        f"json={args.out}{f' png={png}' if png else ''}\n"
    )
    return 0 if out["corrupt_blocks"] == 0 else 1


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"mori-umbp-bench: {name}={text!r} must be comma-separated integers") from None
    if not values or min(values) <= 0:
        raise SystemExit(f"mori-umbp-bench: {name}={text!r} must list positive integers")
    return values


def _main_ops(args: argparse.Namespace) -> int:
    apis = [a for a in args.apis.split(",") if a]
    if not apis or set(apis) - {"single", "batch"}:
        raise SystemExit(f"mori-umbp-bench: --apis={args.apis!r} must list single and/or batch")
    blocks, threads = _ints(args.blocks, "--blocks"), _ints(args.threads, "--threads")
    staging = max(max(blocks), 4 << 20)
    out = ops.run(
        blocks,
        apis,
        threads,
        args.batch,
        args.bytes_per_case,
        args.max_keys,
        args.peers,
        args.peer_capacity,
        lambda master, page: _client(master, "bench-client", 0, page, staging),
    )
    out["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    write_json(args.out, out)
    for c in out["cases"]:
        sys.stdout.write(
            f"{c['block_bytes']:>8} {c['api']:>6} t={c['threads']} {c['op']}: {c['ops_per_s']:9.0f} ops/s "
            f"{c['GB_per_s']:6.3f} GB/s p50={c['p50_ms']:.3f} ms p99={c['p99_ms']:.3f} ms "
            f"cpu={c['cpu_client_us_per_key']:.0f}+{c['cpu_pool_us_per_key']:.0f} us/key "
            f"failed={c['failed']} corrupt={c['corrupt']}\n"
        )
    for c in out["ceiling"]:
        w, r = c["write"], c["read"]
        sys.stdout.write(
            f"ceiling {c['block_bytes']:>8} x{c['blocks_per_call']}: write p50={w['p50_ms']:.3f} ms "
            f"{w['GB_per_s']:.3f} GB/s, read p50={r['p50_ms']:.3f} ms {r['GB_per_s']:.3f} GB/s\n"
        )
    for f in out["floor"]:
        sys.stdout.write(f"floor {f['block_bytes']:>8}: one RPC p50={f['p50_ms']:.3f} ms p99={f['p99_ms']:.3f} ms\n")
    bad = sum(c["corrupt"] + c["failed"] for c in out["cases"])
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

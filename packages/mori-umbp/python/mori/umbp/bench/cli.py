# SPDX-License-Identifier: MIT
"""``mori-umbp-bench``: trace replay against a pool; writes JSON (and a PNG with matplotlib).

Without ``--master`` it starts its own pool: a master and ``--peers`` peers that own the pages
(``--pool-layout processes``: each in a process of its own; ``single``: master and peers in this
process, the layout before that flag), plus the client that replays (which owns none), so every
block crosses mori-io. With ``--master ADDR`` the client joins an existing pool.

Beside the replay it reports the hit rate of the same trace against the configured eviction
policy simulated with the pool's capacity in blocks, Belady's OPT and a pool that never evicts
(ceiling.py), and, unless ``--skip_mooncake`` or not installed, Mooncake Store's on the same trace
(mooncake.py), in ``--rounds`` alternating rounds.

``--profile hbm`` (needs torch with CUDA) gives each peer an HBM tier of ``--peer-capacity``
bytes (puts go there first, evicted blocks demote to the peer's DRAM of the same size) and makes
the replaying client's KV buffer a CUDA tensor registered with mori-io, so blocks move GPU to GPU
(mori-io's P2P backend on one host).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import sys
from pathlib import Path
from typing import Any

from mori.bench_report import add_json, write_json
from mori.umbp import settings
from mori.umbp.bench import ceiling, mooncake, ops, report, runner, trace
from mori.umbp.bench.pool import LAYOUTS, PoolProcess
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.config import (
    UMBPConfig,
    UMBPDistributedConfig,
    UMBPDramConfig,
    UMBPHbmConfig,
    UMBPMasterClientConfig,
)
from mori.umbp.client.pool_client import PEER_CHUNK
from mori.umbp.errors import TierUnavailableError
from mori.umbp.master.server import MasterServer, MasterServerConfig
from mori.umbp.peer.lru import POLICIES

log = logging.getLogger(__name__)


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
    p.add_argument("--policy", choices=POLICIES, default="lru", help="the peers' eviction.policy")
    add_json(p, Path("umbp-bench.json"), aliases=("--out",), dest="out")
    p.add_argument("--png", type=Path, default=None, help="also draw latency CDFs and hit rate here")
    p.add_argument(
        "--prepared-blocks",
        action="store_true",
        help="trace: make every block's bytes before the replay (a copy and a compare per block in it, "
        "instead of generating each), so the stores' own rates show; both stores take this path",
    )
    p.add_argument("--mode", choices=("trace", "ops"), default="trace", help="ops: put/get cost matrix (see ops.py)")
    p.add_argument("--blocks", default="16384,262144,2097152", help="ops: block sizes in bytes, comma-separated")
    p.add_argument("--apis", default="single,batch", help="ops: single and/or batch")
    p.add_argument("--threads", default="1,4", help="ops: client thread counts, comma-separated")
    p.add_argument("--batch", type=int, default=16, help="ops: keys per batch call")
    p.add_argument("--bytes-per-case", type=int, default=32 << 20, help="ops: bytes put per case (then got)")
    p.add_argument("--max-keys", type=int, default=2000, help="ops: at most this many keys per case")
    p.add_argument("--pool-layout", choices=LAYOUTS, default="processes",
                   help="processes: master and each peer in its own process; single: all in one")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds of mori-umbp and Mooncake Store")
    p.add_argument("--skip_mooncake", action="store_true", help="do not measure Mooncake Store beside mori-umbp")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.rounds < 1:
        raise SystemExit(f"mori-umbp-bench: --rounds={args.rounds} must be at least 1")
    if args.mode == "ops":
        return _main_ops(args)
    reqs = (trace.load(args.trace) if args.trace else
            trace.synthetic(args.requests, args.sessions, args.blocks_per_turn, args.seed))  # fmt: skip
    rounds: list[dict[str, Any]] = []
    first: runner.Result | None = None
    mc_why: str | None = "skipped (--skip_mooncake)" if args.skip_mooncake else None
    mc_info: dict[str, Any] = {}
    for r in range(args.rounds):
        try:
            res = _replay_umbp(args, reqs)
        except TierUnavailableError as exc:
            sys.stderr.write(f"mori-umbp-bench --profile {args.profile}: {exc}\n")
            return 2
        entry: dict[str, Any] = {"round": r, "mori-umbp": report.summary(res, {})}
        first = first or res
        if mc_why is None:
            try:
                with mooncake.MooncakeStorePool(args.peers, args.peer_capacity) as mc:
                    mc_info = {"version": mc.version, **mc.info}
                    got = mc.trace(reqs, args.block_bytes, args.prepared_blocks)
                    entry[mooncake.NAME] = report.summary(got, {})
            except mooncake.MooncakeUnavailableError as exc:
                mc_why = str(exc)
                log.warning("Mooncake Store not measured: %s", exc)
        rounds.append(entry)
    assert first is not None  # --rounds >= 1
    out = report.summary(first, _config(args))
    for entry in rounds:
        entry["mori-umbp"].pop("config", None)
        entry.get(mooncake.NAME, {}).pop("config", None)
    out.update(_ceilings(args, reqs, first))
    measured = [e[mooncake.NAME] for e in rounds if mooncake.NAME in e]
    out["mooncake_store"] = {"measured": bool(measured), "not_measured": mc_why, "version": mooncake.version(),
                             **mc_info, **_mooncake_trace(measured)}  # fmt: skip
    out["rounds"] = rounds
    png = report.write(out, first, args.out, args.png)
    lat = out["latency_ms"]["request"]
    mc = out["mooncake_store"]
    mc_text = (f"mooncake hit_rate={mc['hit_rate']:.3f} req_per_s={mc['requests_per_s']:.1f}"
               if measured else f"mooncake not measured: {mc_why}")  # fmt: skip
    sys.stdout.write(
        f"profile={args.profile} layout={args.pool_layout} requests={out['requests']} blocks={out['blocks']} "
        f"hit_rate={out['hit_rate']:.3f} (policy ceiling {out['hit_rate_policy_ceiling']:.3f}, with read leases "
        f"{out['hit_rate_policy_with_leases']:.3f}, OPT {out['hit_rate_opt']:.3f}, unlimited pool "
        f"{out['hit_rate_unlimited_pool']:.3f}) put_failed={out['put_failed']} "
        f"req_per_s={out['requests_per_s']:.1f} MiB_per_s={out['MiB_per_s']:.1f} "
        f"request_ms p50={lat.get('p50', 0):.2f} p99={lat.get('p99', 0):.2f} corrupt={out['corrupt_blocks']}; "
        f"{mc_text} json={args.out}{f' png={png}' if png else ''}\n"
    )
    bad = out["corrupt_blocks"] + sum(e["corrupt_blocks"] for e in measured)
    return 0 if bad == 0 else 1


def _replay_umbp(args: argparse.Namespace, reqs: list[list[str]]) -> runner.Result:
    """One replay on a fresh pool (or the pool at ``--master``)."""
    page = min(args.block_bytes, 2 << 20)
    staging = max(args.block_bytes, 4 << 20)
    hbm = args.peer_capacity if args.profile == "hbm" else 0
    with contextlib.ExitStack() as stack:
        master = args.master
        if master is None and args.pool_layout == "processes":
            pool = PoolProcess(args.peers, args.peer_capacity, page, 0, "processes", hbm=hbm, policy=args.policy)
            master = stack.enter_context(pool).info.master
        elif master is None:
            server = stack.enter_context(MasterServer(MasterServerConfig(listen_address="127.0.0.1:0")))
            master = server.address
            for i in range(args.peers):
                peer = _client(master, f"bench-peer-{i}", args.peer_capacity, page, staging, hbm, args.policy)
                stack.enter_context(peer)
        client = stack.enter_context(_client(master, "bench-client", 0, page, staging))
        return runner.replay(client, reqs, args.block_bytes, device=0 if hbm else -1, prepared=args.prepared_blocks)


def _ceilings(args: argparse.Namespace, reqs: list[list[str]], res: runner.Result) -> dict[str, Any]:
    """The hit rates of the same trace that bound the replay's (ceiling.py)."""
    blocks = res.blocks
    high = settings.get_float("UMBP_DRAM_HIGH_WM")
    lease = settings.get_int("UMBP_DRAM_READ_LEASE_MS") / 1000
    starts = [0.0, *itertools.accumulate(res.request_s)][: len(res.request_s)]
    capacity = ceiling.capacity_blocks(args.peers, args.peer_capacity, args.block_bytes, high)
    # A peer whose every block is busy (read leases, unacknowledged commits) fills past its watermark
    # rather than refuse, so the absolute ceiling takes the whole capacity.
    full = ceiling.capacity_blocks(args.peers, args.peer_capacity, args.block_bytes, 1.0)
    window = UMBPConfig(UMBPDramConfig(0, 0)).eviction.candidate_window

    def rate(hits: list[int]) -> float:
        return sum(hits) / blocks if blocks else 0.0

    return {
        # The configured policy on a pool of the same capacity (each peer at its high watermark).
        "hit_rate_policy_ceiling": rate(ceiling.policy_hits(reqs, capacity, args.policy, window)),
        # The same with the peers' read leases, timed as this replay's requests were.
        "hit_rate_policy_with_leases": rate(ceiling.policy_hits(reqs, capacity, args.policy, window, lease, starts)),
        # The same with the chain order kept per RPC chunk only, chunks head first: the order a client
        # that sends a long batch to a peer in PEER_CHUNK-key RPCs leaves behind.
        "hit_rate_policy_per_chunk": rate(ceiling.policy_hits(reqs, capacity, args.policy, window, chunk=PEER_CHUNK)),
        # Belady's OPT on the whole capacity: no policy can do better.
        "hit_rate_opt": rate(ceiling.opt_hits(reqs, full)),
        # A pool that never evicts.
        "hit_rate_unlimited_pool": rate(trace.expected_hits(reqs)),
        "ceiling_model": {
            "capacity_blocks": capacity,
            "capacity_blocks_opt": full,
            "high_watermark": high,
            "policy": args.policy,
            "candidate_window": window,
            "read_lease_s": lease,
            "chunk_keys": PEER_CHUNK,
        },
    }


def _mooncake_trace(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Mooncake Store's first round, as the top level's figures are mori-umbp's first round."""
    if not measured:
        return {}
    m = measured[0]
    keys = ("hit_rate", "requests_per_s", "MiB_per_s", "put_failed", "lost_after_probe", "stored_at_end",
            "corrupt_blocks", "latency_ms")  # fmt: skip
    return {k: m[k] for k in keys}


def _config(args: argparse.Namespace) -> dict[str, Any]:
    """The flags, and the transport of the data path's calls (NOTE [wire] in mori.umbp.wire), which
    an A/B of the two sets through the environment."""
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    return {**config, "UMBP_WIRE": settings.get_bool("UMBP_WIRE")}


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
        args.pool_layout,
        args.rounds,
        not args.skip_mooncake,
    )
    out["config"] = _config(args)
    write_json(args.out, out)
    for c in out["summary"]:
        sys.stdout.write(
            f"{c['store']:>14} {c['block_bytes']:>8} {c['api']:>6} t={c['threads']} {c['op']}: "
            f"{c['ops_per_s']:9.0f} ops/s {c['GB_per_s']:6.3f} GB/s ({c['ceiling_share']:.0%} of the ceiling, "
            f"{c['ceiling_share_spread']:.0%} of it spread over the peers) "
            f"p50={c['p50_ms']:.3f} ms p99={c['p99_ms']:.3f} ms "
            f"cpu={c['cpu_client_us_per_key']:.0f}+{c['cpu_pool_us_per_key']:.0f} us/key "
            f"failed={c['failed']} corrupt={c['corrupt']} (median of {c['rounds']} round(s))\n"
        )
    for c in out["skipped"]:
        sys.stdout.write(
            f"{'both stores':>14} {c['block_bytes']:>8} {c['api']:>6} t={c['threads']}: not measured: {c['why']}\n"
        )
    mc = out["mooncake_store"]
    if mc["not_measured"]:
        sys.stdout.write(f"{mooncake.NAME}: not measured: {mc['not_measured']}\n")
    for c in out["ceiling"]:
        w, r = c["write"], c["read"]
        spread = "".join(
            f", {name} spread p50={c[name + '_spread']['p50_ms']:.3f} ms {c[name + '_spread']['GB_per_s']:.3f} GB/s"
            for name in ("write", "read")
            if name + "_spread" in c
        )
        sys.stdout.write(
            f"ceiling {c['block_bytes']:>8} x{c['blocks_per_call']} round {c['round']}: write p50={w['p50_ms']:.3f} ms "
            f"{w['GB_per_s']:.3f} GB/s, read p50={r['p50_ms']:.3f} ms {r['GB_per_s']:.3f} GB/s{spread}\n"
        )
    for f in out["floor"]:
        sys.stdout.write(f"floor {f['block_bytes']:>8}: one RPC p50={f['p50_ms']:.3f} ms p99={f['p99_ms']:.3f} ms\n")
    # Mooncake's failed keys are its own answer (reported); a wrong byte from either store is not.
    bad = sum(c["corrupt"] + (c["failed"] if c["store"] == ops.UMBP else 0) for c in out["cases"])
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

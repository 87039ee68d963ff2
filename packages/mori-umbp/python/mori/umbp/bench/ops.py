# SPDX-License-Identifier: MIT
"""``mori-umbp-bench --mode ops``: put/get cost per block size, API and thread count, beside the
data-plane ceiling (a bare mori-io transfer of the same bytes to one peer's process, and spread over
every peer's process as a batch is)
and the control-plane floor (one authenticated gRPC round trip to the master), all in one run.

Every get is checked byte for byte against what was put (outside the timed call).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    StatusCode,
    TcpBackendConfig,
)
from mori.umbp.bench import mooncake
from mori.umbp.bench.api import CpuMeter, StoreClient
from mori.umbp.bench.pool import PoolProcess
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.master_client import UMBPMasterClient

#: The ``store`` of a case: mori-umbp, or Mooncake Store beside it.
UMBP = "mori-umbp"
#: Timed calls a case makes at least (over all its threads): with one, large blocks' p50 was one
#: call (a 32 MiB case is a single batch of 16 x 2 MiB), whose time moved by half between rounds.
MIN_CALLS = 4

log = logging.getLogger(__name__)


@dataclass
class Case:
    block_bytes: int
    api: str  # "single" or "batch"
    threads: int
    op: str  # "put" or "get"
    keys: int = 0
    failed: int = 0
    corrupt: int = 0
    wall_s: float = 0.0
    cpu_client_s: float = 0.0
    cpu_pool_s: float = 0.0
    call_s: list[float] = field(default_factory=list)


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000, q)) if samples else 0.0


def summary(c: Case) -> dict[str, Any]:
    moved = (c.keys - c.failed) * c.block_bytes
    return {
        "block_bytes": c.block_bytes,
        "api": c.api,
        "threads": c.threads,
        "op": c.op,
        "keys": c.keys,
        "calls": len(c.call_s),
        "failed": c.failed,
        "corrupt": c.corrupt,
        "ops_per_s": c.keys / c.wall_s if c.wall_s else 0.0,
        "GB_per_s": moved / c.wall_s / 1e9 if c.wall_s else 0.0,
        "p50_ms": pct(c.call_s, 50),
        "p99_ms": pct(c.call_s, 99),
        "cpu_client_us_per_key": c.cpu_client_s / c.keys * 1e6 if c.keys else 0.0,
        "cpu_pool_us_per_key": c.cpu_pool_s / c.keys * 1e6 if c.keys else 0.0,
    }


def _in_threads(threads: int, work: Callable[[int], None]) -> None:
    """``work(t)`` for each of ``threads`` threads at once; returns when all are done."""
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def _timed(pool: CpuMeter, case: Case, threads: int, work: Callable[[int], None]) -> None:
    cpu0, pcpu0 = time.process_time(), pool.cpu_s()
    t0 = time.perf_counter()
    _in_threads(threads, work)
    case.wall_s = time.perf_counter() - t0
    case.cpu_client_s = time.process_time() - cpu0
    case.cpu_pool_s = pool.cpu_s() - pcpu0


def _per_call(api: str, batch: int) -> int:
    """Blocks one call of ``api`` moves."""
    return batch if api == "batch" else 1


def _case_bytes(pool_bytes: int) -> int:
    """The most a case may hold: half the pool. A case that fills the pool evicts its own blocks
    before its gets, and its threads' puts wait for each other's room and for read leases (16 x
    8 MiB on four threads against two 256 MiB peers: 570 ms a call)."""
    return pool_bytes // 2


def case_keys(api: str, block: int, batch: int, bytes_per_case: int, max_keys: int, pool_bytes: int) -> int:
    """Keys a case puts: ``bytes_per_case`` of blocks (at most ``max_keys``), but at least
    MIN_CALLS calls' worth, and at most ``_case_bytes``, though never less than a call
    (``run_case`` gives each thread a call at least; ``overfills`` says when that alone is too much)."""
    step = _per_call(api, batch)
    wanted = max(MIN_CALLS * step, min(max_keys, bytes_per_case // block))
    return max(step, min(wanted, _case_bytes(pool_bytes) // block))


def overfills(api: str, block: int, batch: int, threads: int, pool_bytes: int) -> str:
    """Why a case cannot be measured ('' when it can): one call per thread in flight at once holds
    more than ``_case_bytes``."""
    step = _per_call(api, batch)
    held, most = threads * step * block, _case_bytes(pool_bytes)
    if held <= most:
        return ""
    return f"{threads} thread(s) x {step} block(s) of {block} bytes = {held} bytes, over half the pool ({most})"


def run_case(
    client: StoreClient, pool: CpuMeter, tag: str, block: int, api: str, threads: int, keys: int, batch: int
) -> tuple[Case, Case]:
    """Puts ``keys`` fresh blocks (split over ``threads``), then gets them back and checks them,
    after one untimed put and get per thread."""
    per = max(1, keys // threads)
    step = _per_call(api, batch)
    per = max(step, per - per % step)
    src = np.random.default_rng(block).integers(0, 256, (threads, step, block), dtype=np.uint8)
    # Every block read lands in a place of its own and is checked after the timed phase, so the
    # gets' wall time (and GB/s, set beside the ceiling's bare transfers) is the calls' alone. The
    # buffer is written once first, as a KV cache is warm: np.zeros maps its pages at first touch,
    # which would bill the page faults to the gets.
    dst = np.empty((threads, per, block), dtype=np.uint8)
    dst.fill(0)
    client.register_memory(src.ctypes.data, src.nbytes)
    client.register_memory(dst.ctypes.data, dst.nbytes)
    put, get = Case(block, api, threads, "put"), Case(block, api, threads, "get")
    lock = threading.Lock()
    got: list[list[tuple[int, list[bool]]]] = [[] for _ in range(threads)]

    def names(t: int, i: int) -> list[str]:
        return [f"{tag}-{block}-{api}-{threads}-{t}-{i + j}" for j in range(step)]

    def timed_call(batch: Any, single: Any, ks: list[str], p: list[int], lat: list[float]) -> list[bool]:
        """One batch call (one single call when a step is one key), its time appended to ``lat``."""
        t0 = time.perf_counter()
        ok = batch(ks, p, [block] * step) if step > 1 else [single(ks[0], p[0], block)]
        lat.append(time.perf_counter() - t0)
        return list(ok)

    def do_put(t: int) -> None:
        lat: list[float] = []
        failed = 0
        p = [int(src[t, j].ctypes.data) for j in range(step)]
        for i in range(0, per, step):
            ok = timed_call(client.batch_put_from_ptr, client.put_from_ptr, names(t, i), p, lat)
            failed += ok.count(False)
        with lock:
            put.call_s += lat
            put.failed += failed
            put.keys += per

    def do_get(t: int) -> None:
        lat: list[float] = []
        base = int(dst[t].ctypes.data)
        calls = [(i, names(t, i), [base + (i + j) * block for j in range(step)]) for i in range(0, per, step)]
        for i, ks, p in calls:
            got[t].append((i, timed_call(client.batch_get_into_ptr, client.get_into_ptr, ks, p, lat)))
        with lock:
            get.call_s += lat
            get.keys += per

    def warm_up(t: int) -> None:
        """One untimed put and get per thread: a case's first call paid for what later calls reuse
        (its buffers' first transfers, connections), 1.5-3x a later call's time at 2 MiB."""
        ks = [f"{tag}-{block}-{api}-{threads}-{t}-warm-{j}" for j in range(step)]
        p = [int(src[t, j].ctypes.data) for j in range(step)]
        timed_call(client.batch_put_from_ptr, client.put_from_ptr, ks, p, [])
        timed_call(
            client.batch_get_into_ptr, client.get_into_ptr, ks, [int(dst[t, j].ctypes.data) for j in range(step)], []
        )

    try:
        _in_threads(threads, warm_up)
        _timed(pool, put, threads, do_put)
        _timed(pool, get, threads, do_get)
        for t, calls in enumerate(got):
            for i, ok in calls:
                get.failed += ok.count(False)
                get.corrupt += sum(1 for j in range(step) if ok[j] and not np.array_equal(dst[t, i + j], src[t, j]))
    finally:
        client.deregister_memory(src.ctypes.data)
        client.deregister_memory(dst.ctypes.data)
    return put, get


class Ceiling:
    """Bare mori-io transfers from this process to the pool's registered buffers: to the first
    peer's process (``write``, ``read``) and, where the peers have processes of their own, spread
    over all of them at once, in even shares, as a batch is placed over its owners
    (``write_spread``, ``read_spread``: the same bytes between the same processes as the batch)."""

    def __init__(self, pool: PoolProcess, max_bytes: int) -> None:
        self.engine = IOEngine("bench-ceiling-initiator", IOEngineConfig(host="127.0.0.1", port=0))
        self.engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=2))
        self.buf = np.random.default_rng(1).integers(0, 256, max_bytes, dtype=np.uint8)
        self.local = self.engine.register_memory(self.buf.ctypes.data, max_bytes, -1, MemoryLocationType.CPU)
        self.remotes = []
        for engine, mem in pool.info.targets:
            self.engine.register_remote_engine(EngineDesc.unpack(engine))
            self.remotes.append(MemoryDesc.unpack(mem))
        self.remote = self.remotes[0]
        self.max_bytes = min(max_bytes, pool.info.target_bytes)

    def measure(self, block: int, count: int, calls: int) -> dict[str, Any]:
        """``calls`` writes then reads of ``count`` blocks each (one batch transfer per call and
        process), to the first peer's process and, for more than one block, spread over all."""
        out: dict[str, Any] = {"block_bytes": block, "blocks_per_call": count}
        spread = len(self.remotes) > 1 and count > 1
        for name in ("write", "read"):
            out[name] = self.timed(name, block, [(self.remote, count)], calls)
            if spread:
                shares = [
                    (r, len(part))
                    for r, part in zip(self.remotes, _even(count, len(self.remotes)), strict=True)
                    if part
                ]
                out[f"{name}_spread"] = self.timed(name, block, shares, calls)
        return out

    def timed(self, name: str, block: int, shares: list[tuple[Any, int]], calls: int) -> dict[str, float]:
        """``calls`` transfers (``name``: "write" or "read") of ``n`` blocks to each (remote, n) of
        ``shares``, posted at once and waited for together, after one untimed (as a case's calls
        are: the first paid for what the rest reuse): their p50/p99 and throughput."""
        op = self.engine.batch_write if name == "write" else self.engine.batch_read

        def one() -> None:
            statuses, start = [], 0
            for remote, n in shares:
                offs = [(start + i) * block for i in range(n)]
                uid = self.engine.allocate_transfer_uid()
                (st,) = op([self.local], [offs], [remote], [offs], [[block] * n], [uid])
                statuses.append(st)
                start += n
            for st in statuses:
                st.WaitFor(30000)
                if st.Code() != StatusCode.SUCCESS:
                    raise RuntimeError(f"ceiling {name} failed: {st.Code().name}: {st.Message()}")

        one()
        lat = []
        t0 = time.perf_counter()
        for _ in range(calls):
            t = time.perf_counter()
            one()
            lat.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        total = sum(n for _, n in shares)
        return {
            "p50_ms": pct(lat, 50),
            "p99_ms": pct(lat, 99),
            "GB_per_s": calls * total * block / wall / 1e9,
            "ops_per_s": calls * total / wall,
        }

    def close(self) -> None:
        self.engine.deregister_memory(self.local)
        self.engine.shutdown()


def floor(master: str, calls: int) -> dict[str, float]:
    """One authenticated unary RPC to the master (BatchLookup of one key): the control-plane floor."""
    mc = UMBPMasterClient(master, "bench-floor")
    try:
        mc.batch_lookup(["bench-floor-probe"])
        lat = []
        for _ in range(calls):
            t = time.perf_counter()
            mc.batch_lookup(["bench-floor-probe"])
            lat.append(time.perf_counter() - t)
    finally:
        mc.close()
    return {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "calls": calls}


def _start_mooncake(peers: int, capacity: int) -> tuple[mooncake.MooncakeStorePool | None, str | None]:
    try:
        return mooncake.MooncakeStorePool(peers, capacity), None
    except mooncake.MooncakeUnavailableError as exc:
        log.warning("Mooncake Store not measured: %s", exc)
        return None, str(exc)


def run(
    blocks: list[int],
    apis: list[str],
    threads: list[int],
    batch: int,
    bytes_per_case: int,
    max_keys: int,
    peers: int,
    peer_capacity: int,
    client_factory: Callable[[str, int], UMBPClient],
    layout: str = "processes",
    rounds: int = 1,
    with_mooncake: bool = True,
) -> dict[str, Any]:
    """The whole matrix; returns the JSON body (without provenance). Each block size gets a pool
    of its own whose page is the block (at most 2 MiB), as a deployment sizes pages to its blocks,
    and (unless skipped or not installed) a Mooncake Store of the same peers and capacity. Each
    round runs every case on mori-umbp and then on Mooncake Store, case by case, so both see the
    same machine load."""
    out: dict[str, Any] = {
        "cases": [], "ceiling": [], "floor": [], "skipped": [], "pool_layout": layout, "rounds": rounds,
    }  # fmt: skip
    why: str | None = None if with_mooncake else "skipped (--skip_mooncake)"
    measured_mooncake = False
    info: dict[str, Any] = {}
    for block in blocks:
        page = min(block, 2 << 20)
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(PoolProcess(peers, peer_capacity, page, block * batch, layout))
            out["floor"].append({"block_bytes": block, **floor(pool.info.master, 500)})
            ceiling = Ceiling(pool, block * batch)
            stack.callback(ceiling.close)
            calls = max(8, min(500, bytes_per_case // (block * batch)))
            mc: mooncake.MooncakeStorePool | None = None
            if with_mooncake and why is None:
                mc, why = _start_mooncake(peers, peer_capacity)
            if mc is not None:
                stack.enter_context(mc)
                info = {"version": mc.version, **mc.info}
            keys = {api: case_keys(api, block, batch, bytes_per_case, max_keys, peers * peer_capacity) for api in apis}
            measured: list[tuple[str, int]] = []
            for api in apis:
                for n in threads:
                    too_much = overfills(api, block, batch, n, peers * peer_capacity)
                    if too_much:
                        log.warning("block=%d %s threads=%d not measured: %s", block, api, n, too_much)
                        out["skipped"].append({"block_bytes": block, "api": api, "threads": n, "why": too_much})
                    else:
                        measured.append((api, n))
            client = stack.enter_context(client_factory(pool.info.master, page))
            for r in range(rounds):
                # The data plane's ceiling in every round, beside the cases it bounds: it moves by
                # half between runs on a shared machine, so a share of another round's misleads.
                bare = {n: ceiling.measure(block, n, calls * 4 if n == 1 else calls) for n in dict.fromkeys((1, batch))}
                out["ceiling"].extend({"round": r, **c} for c in bare.values())
                for api, n in measured:
                    tag = f"r{time.time_ns()}"
                    bound = bare[_per_call(api, batch)]
                    for case in run_case(client, pool, tag, block, api, n, keys[api], batch):
                        out["cases"].append({"store": UMBP, "round": r, **_share(summary(case), bound)})
                    if mc is None:
                        continue
                    try:
                        kw = {"tag": tag, "block": block, "api": api, "threads": n, "keys": keys[api], "batch": batch}
                        for got in mc.ops_case(**kw):
                            out["cases"].append({"store": mooncake.NAME, "round": r, **_share(got, bound)})
                        measured_mooncake = True
                    except mooncake.MooncakeUnavailableError as exc:
                        why = f"failed at block={block} {api} threads={n}: {exc}; not measured further"
                        log.warning("%s", why)
                        mc = None
    out["mooncake_store"] = {"measured": measured_mooncake, "not_measured": why, "version": mooncake.version(), **info}
    out["summary"] = medians(out["cases"])
    return out


def _even(count: int, parts: int) -> list[range]:
    """``range(count)`` cut into ``parts`` contiguous runs whose lengths differ by at most one."""
    cuts = [count * k // parts for k in range(parts + 1)]
    return [range(cuts[k], cuts[k + 1]) for k in range(parts)]


def _share(case: dict[str, Any], bound: dict[str, Any]) -> dict[str, Any]:
    """``case`` with ``ceiling_share``: its GB/s over the same round's bare mori-io transfer of the
    same blocks per call to one peer's process (a write for puts, a read for gets), and
    ``ceiling_share_spread``: over the same transfer spread over every peer's process (the same as
    ``ceiling_share`` where there is one)."""
    name = "write" if case["op"] == "put" else "read"
    one = bound[name]["GB_per_s"]
    spread = bound.get(f"{name}_spread", bound[name])["GB_per_s"]
    return {
        **case,
        "ceiling_share": case["GB_per_s"] / one if one else 0.0,
        "ceiling_share_spread": case["GB_per_s"] / spread if spread else 0.0,
    }


def medians(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per block, API, threads, op and store: the median over rounds of ops/s, GB/s, the share of
    the ceiling, p50 and p99, with the rounds' failed and corrupt keys summed."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for c in cases:
        groups.setdefault((c["block_bytes"], c["api"], c["threads"], c["op"], c["store"]), []).append(c)
    out = []
    for (block, api, n, op, store), cs in groups.items():
        row: dict[str, Any] = {"block_bytes": block, "api": api, "threads": n, "op": op, "store": store,
                               "rounds": len(cs)}  # fmt: skip
        for k in (
            "ops_per_s",
            "GB_per_s",
            "ceiling_share",
            "ceiling_share_spread",
            "p50_ms",
            "p99_ms",
            "cpu_client_us_per_key",
            "cpu_pool_us_per_key",
        ):
            row[k] = float(np.median([c[k] for c in cs]))
        row["failed"] = sum(c["failed"] for c in cs)
        row["corrupt"] = sum(c["corrupt"] for c in cs)
        out.append(row)
    return out

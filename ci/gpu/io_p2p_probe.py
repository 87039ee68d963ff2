# SPDX-License-Identifier: MIT
"""Where a P2P transfer's time goes (developer probe, GPU machine): copy into the peer's IPC
mapping against a local copy, and the engine's post / wait split per size, launching a kernel
per transfer and with the resident copier."""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

SIZE = 256 << 20


def target(conn: Connection) -> None:
    import torch

    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType

    buf = torch.zeros(SIZE, dtype=torch.uint8, device="cuda:0")
    engine = IOEngine("probe-target", IOEngineConfig())
    engine.create_backend(BackendType.XGMI)
    mem = engine.register_memory(buf.data_ptr(), SIZE, 0, MemoryLocationType.GPU)
    conn.send((engine.get_engine_desc().pack(), mem.pack()))
    conn.recv()
    engine.shutdown()


def med_us(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1e6, 2)


def driver_costs(cu: Any, src: int, dst: int) -> dict[str, float]:
    """Per-call costs through cuda-bindings (each call also pays ~0.3 us of Python)."""
    ok = cu.CUresult.CUDA_SUCCESS
    _, stream = cu.cuStreamCreate(1)
    _, event = cu.cuEventCreate(2)  # disable timing
    n = 1 << 20
    out: dict[str, float] = {}

    def timed(label: str, body: Callable[[], object], iters: int = 2000) -> None:
        for _ in range(50):
            body()
        t = time.perf_counter()
        for _ in range(iters):
            body()
        out[label] = round((time.perf_counter() - t) / iters * 1e6, 2)

    timed("noop_python", lambda: None)
    timed("event_record", lambda: cu.cuEventRecord(event, stream))
    cu.cuStreamSynchronize(stream)
    timed("event_query_idle", lambda: cu.cuEventQuery(event))
    timed("stream_query_idle", lambda: cu.cuStreamQuery(stream))

    def copy_sync() -> None:
        cu.cuMemcpyAsync(dst, src, n, stream)
        cu.cuStreamSynchronize(stream)

    def copy_event_spin() -> None:
        cu.cuMemcpyAsync(dst, src, n, stream)
        cu.cuEventRecord(event, stream)
        while cu.cuEventQuery(event)[0] != ok:
            pass

    def copy_stream_spin() -> None:
        cu.cuMemcpyAsync(dst, src, n, stream)
        while cu.cuStreamQuery(stream)[0] != ok:
            pass

    def copy_only() -> None:
        cu.cuMemcpyAsync(dst, src, n, stream)

    timed("copy_1m_sync", copy_sync)
    timed("copy_1m_event_spin", copy_event_spin)
    timed("copy_1m_stream_spin", copy_stream_spin)
    timed("copy_1m_call_only", copy_only, 200)
    cu.cuStreamSynchronize(stream)
    timed("dtod_1m_call_only", lambda: cu.cuMemcpyDtoDAsync(dst, src, n, stream), 200)
    cu.cuStreamSynchronize(stream)
    timed("copy_256m_call_only", lambda: cu.cuMemcpyAsync(dst, src, 256 << 20, stream), 20)
    cu.cuStreamSynchronize(stream)
    timed("dtod_256m_call_only", lambda: cu.cuMemcpyDtoDAsync(dst, src, 256 << 20, stream), 20)
    cu.cuStreamSynchronize(stream)
    return out


def main() -> None:
    import torch
    from cuda.bindings import driver as cu  # type: ignore[import-not-found]  # GPU machine only

    from mori.io import BackendType, EngineDesc, IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType
    from mori.io._native import _C
    from mori.io.config import XgmiBackendConfig

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child,))
    proc.start()
    edesc, mdesc = parent.recv()
    remote = MemoryDesc.unpack(mdesc)
    src = torch.ones(SIZE, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(SIZE, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    handle = cu.CUipcMemHandle()
    handle.reserved = remote.ipc_handle
    err, ipc_base = cu.cuIpcOpenMemHandle(handle, cu.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    peer = int(ipc_base) + remote.ipc_offset

    engines = {}
    for name, config in (
        ("launch", XgmiBackendConfig()),
        ("resident", XgmiBackendConfig(resident_blocks=torch.cuda.get_device_properties(0).multi_processor_count)),
    ):
        e = IOEngine(f"probe-{name}", IOEngineConfig())
        e.create_backend(BackendType.XGMI, config)
        e.register_remote_engine(EngineDesc.unpack(edesc))
        local = e.register_memory(src.data_ptr(), SIZE, 0, MemoryLocationType.GPU)
        session = e.create_session(local, remote)
        assert session is not None
        engines[name] = (e, session, local)

    e, _, local = engines["launch"]
    rows: dict[str, Any] = {}
    t = time.perf_counter()
    for _ in range(10000):
        e._native.has_p2p_backend()
    rows["binding_noop_us"] = round((time.perf_counter() - t) / 10000 * 1e6, 3)
    t = time.perf_counter()
    for _ in range(10000):
        e.allocate_transfer_uid()
    rows["uid_us"] = round((time.perf_counter() - t) / 10000 * 1e6, 2)

    rows["driver"] = driver_costs(cu, src.data_ptr(), peer)
    print(rows["driver"], flush=True)
    for size in (4096, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20):
        iters = 1000 if size <= (16 << 20) else 50
        row: dict[str, float] = {}
        for label, d in (("local", dst.data_ptr()), ("ipc", peer)):
            for timed in (True, False):
                s = _C.time_device_copies(0, d, src.data_ptr(), size, 10, iters, timed)
                row[f"{label}_{'host' if timed else 'event'}_us"] = med_us(s)
        for name, (eng, sess, _) in engines.items():
            posts, waits, totals = [], [], []
            for i in range(iters + 10):
                uid = eng.allocate_transfer_uid()
                t0 = time.perf_counter()
                st = sess.write(0, 0, size, uid)
                t1 = time.perf_counter()
                st.WaitFor(60000)
                t2 = time.perf_counter()
                assert st.Succeeded(), st.Message()
                if i >= 10:
                    posts.append(t1 - t0)
                    waits.append(t2 - t1)
                    totals.append(t2 - t0)
            row[f"{name}_post_us"] = med_us(posts)
            row[f"{name}_wait_us"] = med_us(waits)
            row[f"{name}_total_us"] = med_us(totals)
            # Back to back, as the benchmark loop runs: post + wait only.
            t0 = time.perf_counter()
            for _ in range(iters):
                sess.write(0, 0, size, 1).WaitFor(60000)
            row[f"{name}_loop_us"] = round((time.perf_counter() - t0) / iters * 1e6, 2)
        rows[str(size)] = row
        print(size, row, flush=True)
    print(json.dumps(rows, indent=1))
    for eng, _, _ in engines.values():
        eng.shutdown()
    parent.send("exit")
    proc.join(30)


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: MIT
"""What the ranks of the multi-process tests run: fn(rank, nranks, uid, *args), module level so
that spawned processes can import them. Each returns data for the test to check, or raises."""

from __future__ import annotations

import os
import threading
from typing import Any

import mori.cco


def _device(backend: str) -> str:
    if backend != "cuda":
        return "cpu"
    import torch

    torch.cuda.set_device(0 if torch.cuda.device_count() == 1 else int(os.environ.get("LOCAL_RANK", "0")))
    return f"cuda:{torch.cuda.current_device()}"


def _init(rank: int, nranks: int, uid: bytes, backend: str, per_rank_vmm: int = 0) -> Any:
    import mori.cco

    _device(backend)
    return mori.cco.Communicator.init(nranks, rank, uid, per_rank_vmm, backend=backend)


def _on_stream(stream: Any) -> Any:
    import contextlib

    import torch

    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def _gloo(rank: int, nranks: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks)


def invalid_argument_messages(checks: list[Any]) -> list[str]:
    """Runs each call; the CcoInvalidArgumentError message it raised, or "no error"."""
    messages = []
    for check in checks:
        try:
            check()
        except mori.cco.CcoInvalidArgumentError as exc:
            messages.append(str(exc))
        else:
            messages.append("no error")
    return messages


def memory_and_windows(rank: int, nranks: int, uid: bytes, backend: str) -> dict[str, Any]:
    """Symmetric offsets, peer load/store through the flat range, windows, free and reuse."""
    import torch

    with _init(rank, nranks, uid, backend) as comm:
        a = comm.alloc_mem(1000)
        b = comm.alloc_mem(4096, alignment=4096)
        t = comm.tensor((16,), torch.int64)
        t.fill_(rank * 100)
        comm.barrier()
        # Write into the next rank's copy, read the previous rank's copy of what it wrote to us.
        nxt = comm.peer_tensor(t, (rank + 1) % nranks)
        nxt[1] = rank
        if comm.backend == "cuda":
            torch.cuda.synchronize()
        comm.barrier()
        seen = [int(comm.peer_tensor(t, pe)[0].item()) for pe in range(nranks)]
        written_by = int(t[1].item())
        win = comm.register_window(b.ptr, 2048)
        win_alloc = comm.register_window(size=512)
        comm.free_mem(a)
        again = comm.alloc_mem(512)
        return {
            "offsets": (a.ptr - comm.ptr, b.ptr - comm.ptr, again.ptr - comm.ptr),
            "window": (win.handle.offset, win.handle.size, win_alloc.handle.offset),
            "seen": seen,
            "written_by": written_by,
            "lsa": (comm.lsa_rank, comm.lsa_size, comm.num_nodes),
            "backend": comm.backend,
        }


def collectives(rank: int, nranks: int, uid: bytes, backend: str, port: int) -> list[str]:
    """Every collective, dtype, reduction and algorithm against torch.distributed (gloo) on the
    same inputs; returns the failures (an empty list when all agree)."""
    import torch
    import torch.distributed as dist

    device = _device(backend)
    _gloo(rank, nranks, port)
    failures: list[str] = []
    gen = torch.Generator().manual_seed(1234 + rank)
    # Odd sizes exercise tails, the fp8 block edge and uneven two-shot slices.
    sizes = (1, 127, 129, 4096 + 3, 300_001)
    with _init(rank, nranks, uid, backend) as comm:
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64):
            for op, gloo_op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN)):
                for algorithm in ("one_shot", "two_shot"):
                    for n in sizes:
                        # Small integers: every partial sum is exact in every dtype, so the result
                        # must match bit for bit whatever order the peers are summed in.
                        x = torch.randint(-8, 9, (n,), generator=gen).to(dtype)
                        ref = x.clone()
                        dist.all_reduce(ref, op=gloo_op)
                        got = comm.all_reduce(x.to(device), op, algorithm=algorithm).cpu()
                        if not torch.equal(got, ref):
                            bad = (got != ref).nonzero().flatten()[:3].tolist()
                            failures.append(f"all_reduce {dtype} {op} {algorithm} n={n}: first bad {bad}")
        # Random floats: tolerance, since gloo may sum in another order.
        x = torch.randn(100_003, generator=gen)
        ref = x.clone()
        dist.all_reduce(ref)
        for algorithm in ("one_shot", "two_shot"):
            got = comm.all_reduce(x.to(device), out=torch.empty_like(x, device=device), algorithm=algorithm).cpu()
            if not torch.allclose(got, ref, rtol=1e-5, atol=1e-5):
                failures.append(f"all_reduce random float32 {algorithm}: max err {(got - ref).abs().max()}")
        # fp8 wire: per-block scaled e4m3 keeps ~2^-4 relative error per element.
        for dtype in (torch.float32, torch.bfloat16):
            for algorithm in ("one_shot", "two_shot"):
                x = torch.randn(70_000, generator=gen).to(dtype)
                ref = x.float().clone()
                dist.all_reduce(ref)
                got = comm.all_reduce(x.to(device), algorithm=algorithm, wire_dtype="fp8").cpu().float()
                rel = float((got - ref).norm() / ref.norm())
                if not 0 < rel < 0.06:
                    failures.append(f"fp8 wire {dtype} {algorithm}: relative error {rel}")
        for dtype in (torch.uint8, torch.bfloat16, torch.int64):
            for n in (1, 333, 65_537):
                x = torch.randint(0, 100, (n,), generator=gen).to(dtype)
                gathered = [torch.empty_like(x) for _ in range(nranks)]
                dist.all_gather(gathered, x)
                out = torch.empty(nranks * n, dtype=dtype, device=device)
                comm.all_gather(out, x.to(device))
                if not torch.equal(out.cpu(), torch.cat(gathered)):
                    failures.append(f"all_gather {dtype} n={n}")
                y = torch.randint(0, 100, (nranks * n,), generator=gen).to(dtype)
                expect = torch.empty_like(y)
                dist.all_to_all_single(expect, y)
                out = torch.empty_like(y, device=device)
                comm.all_to_all(out, y.to(device))
                if not torch.equal(out.cpu(), expect):
                    failures.append(f"all_to_all {dtype} n={n}")
    dist.destroy_process_group()
    return failures


def gemm_all_reduce(rank: int, nranks: int, uid: bytes, backend: str, port: int) -> dict[str, float]:
    """The fused GEMM + all-reduce against matmul + gloo all_reduce; fp8's relative error."""
    import torch
    import torch.distributed as dist

    device = _device(backend)
    _gloo(rank, nranks, port)
    gen = torch.Generator().manual_seed(99 + rank)
    a = torch.randn(300, 64, generator=gen)
    b = torch.randn(64, 96, generator=gen)
    ref = a @ b
    dist.all_reduce(ref)
    with _init(rank, nranks, uid, backend) as comm:
        errors = {}
        for chunks in (1, 2, 4):
            got = mori.cco.gemm_all_reduce(comm, a.to(device), b.to(device), chunks=chunks).cpu()
            errors[f"chunks{chunks}"] = float((got - ref).abs().max())
        got = mori.cco.gemm_all_reduce(comm, a.to(device), b.to(device), wire_dtype="fp8").cpu()
        errors["fp8_rel"] = float((got - ref).norm() / ref.norm())
    dist.destroy_process_group()
    return errors


def copy_engine(rank: int, nranks: int, uid: bytes, backend: str) -> bool:
    """Each rank copies a pattern into the next rank's window over two queues; the receiver waits
    on the copy-engine signals and checks the bytes."""
    import torch

    with _init(rank, nranks, uid, backend) as comm:
        dev = comm.create_dev_comm(mori.cco.CCODevCommRequirements(sdma_queue_count=2))
        src = comm.register_window(size=1 << 16)
        dst = comm.register_window(size=1 << 16)
        from mori.cco.tensors import tensor_at

        src_t = tensor_at(src.local_ptr, (1 << 16,), torch.uint8, comm.device)
        dst_t = tensor_at(dst.local_ptr, (1 << 16,), torch.uint8, comm.device)
        src_t.copy_((torch.arange(1 << 16) * (rank + 1) % 251).to(torch.uint8))
        dst_t.zero_()
        if comm.backend == "cuda":
            torch.cuda.synchronize()
        comm.barrier()
        peer = (rank + 1) % nranks
        half = 1 << 15
        v0 = comm.copy_engine_put(dev, peer, dst, 0, src, 0, half, queue=0)
        v1 = comm.copy_engine_put(dev, peer, dst, half, src, half, half, queue=1)
        prev = (rank - 1) % nranks
        comm.copy_engine_wait(dev, prev, 0, v0)
        comm.copy_engine_wait(dev, prev, 1, v1)
        expect = (torch.arange(1 << 16) * (prev + 1) % 251).to(torch.uint8)
        ok = torch.equal(dst_t.cpu(), expect)
        comm.copy_engine_quiet()
        comm.barrier()
        comm.destroy_dev_comm(dev)
        return ok


def two_communicators_two_threads(rank: int, nranks: int, uid: bytes, backend: str, uid2: bytes) -> list[float]:
    """Two communicators in one process, each driven by its own thread at the same time."""
    import torch

    results: list[float] = [0.0, 0.0]
    errors: list[BaseException] = []
    device = _device(backend)

    def work(index: int, comm_uid: bytes) -> None:
        try:
            # Each communicator on its own stream: on one stream the two kernels would queue in
            # different orders on different ranks and wait for each other forever (as with NCCL).
            stream = torch.cuda.Stream() if backend == "cuda" else None
            with _init(rank, nranks, comm_uid, backend) as comm, _on_stream(stream):
                x = torch.full((1000,), float(rank + 1 + 10 * index), device=device)
                for _ in range(20):
                    y = comm.all_reduce(x.clone())
                results[index] = float(y[0].item())
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, u)) for i, u in enumerate((uid, uid2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def asymmetric_alloc(rank: int, nranks: int, uid: bytes, backend: str) -> str:
    with _init(rank, nranks, uid, backend) as comm:
        try:
            comm.alloc_mem(1024 * (rank + 1))
        except mori.cco.CcoSymmetryError as exc:
            return str(exc)
        return "no error"


def exhausted_slot(rank: int, nranks: int, uid: bytes, backend: str) -> str:
    with _init(rank, nranks, uid, backend, per_rank_vmm=8 << 20) as comm:
        try:
            comm.alloc_mem(64 << 20)
        except mori.cco.CcoOutOfMemoryError as exc:
            return str(exc)
        return "no error"


def bad_arguments(rank: int, nranks: int, uid: bytes, backend: str) -> list[str]:
    import torch

    device = _device(backend)
    other = "cpu" if backend == "cuda" else "meta"

    def zeros(n: int, dtype: Any = None, on: str = device) -> Any:
        return torch.zeros(n, dtype=dtype or torch.float32, device=on)

    with _init(rank, nranks, uid, backend) as comm:
        mem = comm.alloc_mem(256)
        checks = [
            lambda: comm.get_peer_ptr(mem.ptr, nranks),
            lambda: comm.register_window(comm.ptr + comm.per_rank_size + 64, 16),
            lambda: comm.register_window(mem.ptr, 10_000),
            lambda: comm.all_reduce(zeros(4, torch.uint8)),
            lambda: comm.all_reduce(zeros(4), op="prod"),
            lambda: comm.all_reduce(zeros(4, torch.int32), wire_dtype="fp8"),
            lambda: comm.all_reduce(zeros(4), algorithm="ring"),
            lambda: comm.all_gather(zeros(3), zeros(2)),
            lambda: comm.all_to_all(zeros(nranks * 2 + 1), zeros(nranks * 2 + 1)),
            lambda: comm.all_reduce(zeros(8)[::2]),
            lambda: comm.all_reduce(zeros(4, on=other)),
        ]
        return invalid_argument_messages(checks)


def dead_peer(rank: int, nranks: int, uid: bytes, backend: str) -> str:
    """The last rank leaves after init; the others' all-reduce must fail with a timeout."""
    import torch

    comm = _init(rank, nranks, uid, backend)
    comm.all_reduce(torch.ones(16, device=_device(backend)))
    if rank == nranks - 1:
        os._exit(0)
    try:
        comm.all_reduce(torch.ones(16, device=_device(backend)))
        if backend == "cuda":
            torch.cuda.synchronize()
            comm._engine().close()
    except (mori.cco.CcoTimeoutError, mori.cco.CcoDeviceError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def graph_replay(rank: int, nranks: int, uid: bytes, backend: str) -> list[float]:
    """One all-reduce captured in a CUDA graph and replayed: the scratch buffers still alternate
    (their parity comes from the barrier epoch), so every replay is right."""
    import torch

    device = _device(backend)
    with _init(rank, nranks, uid, backend) as comm:
        x = torch.ones(1 << 16, device=device)
        for algorithm in ("one_shot", "two_shot"):
            comm.all_reduce(x, algorithm=algorithm)  # grows the scratch area and loads the kernels
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            comm.all_reduce(x, algorithm="one_shot")
            comm.all_reduce(x, algorithm="two_shot")
        seen = []
        for replay in range(8):
            x.fill_(float(rank + replay))
            graph.replay()
            torch.cuda.synchronize()
            seen.append(float(x[-1].item()))
        comm.check_device_error(comm._engine().dev_comm)
        return seen

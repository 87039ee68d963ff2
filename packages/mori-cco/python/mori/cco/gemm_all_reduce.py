# SPDX-License-Identifier: MIT
"""GEMM + all-reduce for tensor-parallel (row-parallel) linear layers: ``out = sum_r a_r @ b_r``.

With ``chunks > 1`` the rows of the output are cut into chunks. Each chunk's GEMM writes straight
into ``out``, and the chunk is all-reduced in place while the next chunk's GEMM runs: on cuda the
reductions go on a side stream that waits for each chunk's GEMM with an event (a depth-one
pipeline: chunk i's reduction overlaps chunk i+1's GEMM). That pays where the all-reduce does not
compete with the GEMM for the same SMs; see ``default_chunks``. The host never
synchronises, so the call can be captured in a CUDA graph once the scratch area has its size.
``wire_dtype="fp8"`` halves (bf16) or quarters (fp32) the bytes each rank reads from its peers,
at the numerical cost docs/benchmarks/cco.md measures.
"""

from __future__ import annotations

from typing import Any

from mori.cco.errors import CcoInvalidArgumentError

_side_streams: dict[int, Any] = {}


def _side_stream(device: int) -> Any:
    import torch

    stream = _side_streams.get(device)
    if stream is None:
        stream = _side_streams[device] = torch.cuda.Stream(device=device)
    return stream


def default_chunks(rows: int, *, shared_gpu: bool = False) -> int:
    """1 when the ranks share one GPU (or run on the cpu backend): there the all-reduce competes
    with the GEMM for the same SMs and the pipeline only adds smaller GEMMs (measured on the H200,
    docs/benchmarks/cco.md). Otherwise 4 chunks when every chunk keeps at least 128 rows (a GEMM
    tile), fewer below that."""
    return 1 if shared_gpu else max(1, min(4, rows // 128))


def _shares_gpu(comm: Any) -> bool:
    if comm.backend != "cuda":
        return True
    from mori.cco.kernels import shares_one_gpu

    return shares_one_gpu(comm.nranks)


def gemm_all_reduce(
    comm: Any,
    a: Any,
    b: Any,
    *,
    out: Any = None,
    wire_dtype: Any = None,
    chunks: int | None = None,
    algorithm: str = "auto",
) -> Any:
    """COLLECTIVE: ``out [M, N]`` = the sum over ranks of ``a [M, K] @ b [K, N]`` (each rank's
    shard of K). ``chunks``: pieces of M pipelined against each other (default: :func:`default_chunks`;
    1 = GEMM then all-reduce on the caller's stream). ``wire_dtype`` and ``algorithm`` are those of
    ``Communicator.all_reduce``."""
    import torch

    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise CcoInvalidArgumentError(f"{name} must be a 2-D torch.Tensor, got {getattr(t, 'shape', type(t))}")
    if a.shape[1] != b.shape[0]:
        raise CcoInvalidArgumentError(
            f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a.shape[1] must equal b.shape[0]"
        )
    if a.dtype != b.dtype:
        raise CcoInvalidArgumentError(f"a.dtype={a.dtype} and b.dtype={b.dtype} differ")
    rows, cols = a.shape[0], b.shape[1]
    if out is None:
        out = torch.empty((rows, cols), dtype=a.dtype, device=a.device)
    elif tuple(out.shape) != (rows, cols) or out.dtype != a.dtype or not out.is_contiguous():
        raise CcoInvalidArgumentError(
            f"out must be a contiguous {a.dtype} tensor of shape ({rows}, {cols}), got {out.dtype} {tuple(out.shape)}"
        )
    chunks = default_chunks(rows, shared_gpu=_shares_gpu(comm)) if chunks is None else chunks
    if not 1 <= chunks <= max(1, rows):
        raise CcoInvalidArgumentError(f"chunks={chunks} is outside [1, M={rows}]")
    step = -(-rows // chunks)
    bounds = [(start, min(rows, start + step)) for start in range(0, rows, step)]

    def reduce(piece: Any) -> None:
        comm.all_reduce(piece, out=piece, algorithm=algorithm, wire_dtype=wire_dtype)

    if comm.backend != "cuda" or len(bounds) == 1:
        for start, end in bounds:
            torch.matmul(a[start:end], b, out=out[start:end])
            reduce(out[start:end])
        return out

    compute = torch.cuda.current_stream(comm.device)
    side = _side_stream(comm.device)
    for start, end in bounds:
        torch.matmul(a[start:end], b, out=out[start:end])
        done = torch.cuda.Event()
        done.record(compute)
        side.wait_event(done)
        with torch.cuda.stream(side):
            reduce(out[start:end])
    compute.wait_stream(side)
    # The reductions ran on `side` with memory the caller's stream allocated: keep it alive for it.
    out.record_stream(side)
    return out

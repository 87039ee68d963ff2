# SPDX-License-Identifier: MIT
"""Zero-copy arrays over the heap: SymmetricBuffer via DLPack to numpy and torch, peer views,
and MORI's torch tensor helpers."""

from __future__ import annotations

import pytest

from mori.shmem.testing import run_pes

import pe_programs


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
@pytest.mark.parametrize("nranks", [2, 4])
def test_numpy_views_share_heap_memory(dtype: str, nranks: int) -> None:
    import numpy as np

    for rank, r in enumerate(run_pes(pe_programs.dlpack_numpy, nranks, dtype, timeout=90)):
        a = r["attrs"]
        assert a["shape"] == (1000,)
        assert a["dtype_eq"], f"SymmetricBuffer.dtype should be the numpy dtype {dtype}, got {a['dtype_repr']}"
        assert a["nbytes"] == 1000 * np.dtype(dtype).itemsize
        assert a["pe"] == rank
        assert a["in_heap"] and a["aligned"]
        assert a["device"] == (1, 0), "kDLCPU, device 0"
        assert a["from_dlpack_ptr_ok"], "np.from_dlpack copied instead of aliasing the heap"
        assert a["from_dlpack_shape"] == (1000,) and a["from_dlpack_dtype"] == dtype
        assert a["numpy_ptr_ok"], ".numpy() copied instead of aliasing the heap"
        assert a["numpy_sees_write"] and a["raw_sees_write"]
        assert r["failures"] == [], f"rank {rank}: {r['failures']}"


def test_shapes_zeros_and_lifetime() -> None:
    for r in run_pes(pe_programs.dlpack_shapes_zeros_lifetime, 2, timeout=90):
        assert r["shape3"] == (3, 5, 7)
        assert r["strides3"] == (5 * 7 * 4, 7 * 4, 4)
        assert r["nbytes3"] == 3 * 5 * 7 * 4
        assert r["c_contig"]
        assert r["zeros_all_zero"], "shmem_zeros returned non-zero memory"
        assert r["in_with_num"] == 1 and r["after_with_num"] == 0, "the context manager did not free the buffer"
        assert r["second_free"] is None, f"a second SymmetricBuffer.free() should be a no-op: {r['second_free']}"
        assert r["after_double_free_num"] == 0


def test_zeros_really_reused_a_dirty_block() -> None:
    """Guards the previous test: zeroing was observed on a block that had been dirtied."""
    for r in run_pes(pe_programs.dlpack_shapes_zeros_lifetime, 1, timeout=90):
        assert r["zeros_reused_block"], "first-fit allocator should hand the freed block back"


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_torch_views_share_heap_memory() -> None:
    pytest.importorskip("torch")
    for rank, r in enumerate(run_pes(pe_programs.dlpack_torch, 2, timeout=180)):
        assert r["failures"] == [], f"rank {rank}: {r['failures']}"
        assert r["bf16_dtype_attr"] == "bfloat16"
        assert r["bf16_nbytes"] == 512


@pytest.mark.torch
@pytest.mark.timeout(240)
@pytest.mark.parametrize("nranks", [2, 4])
def test_symm_tensors(nranks: int) -> None:
    pytest.importorskip("torch")
    for rank, r in enumerate(run_pes(pe_programs.symm_tensors, nranks, timeout=180)):
        assert r["failures"] == [], f"rank {rank}: {r['failures']}"
        assert r["symm_attr"] is True
        assert r["shape"] == (4, 16) and r["dtype"] == "torch.float32"
        assert r["in_heap"]
        assert r["num_allocs"] == 2
        assert r["num_after_free"] == 0
        assert r["list_len"] == nranks
        assert r["list_ptr_in_heap"]

# SPDX-License-Identifier: MIT
"""On a GPU: the tests' traced kernel (kernels/traced.cu), built by mori-shmem's JIT with and
without trace points, run, and its buffer read back. Skips (with the reason) without a GPU, torch
or mori-shmem; mori-viz itself needs none of them."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest
from chrome_checks import check_chrome_trace

import mori.viz
from mori.viz import codegen
from mori.viz.slots import SlotTable

pytestmark = pytest.mark.gpu

KERNELS = Path(__file__).resolve().parent / "kernels"
BLOCKS, THREADS = 4, 96  # 3 warps per block, 12 warps
ITERS, SPIN_CYCLES = 3, 20_000
# A clock64 spin of c cycles lasts at least c / f; no GPU clocks its SMs above 3 GHz.
MAX_SM_GHZ = 3.0


@pytest.fixture(scope="module")
def gpu():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    jit = pytest.importorskip("mori.shmem.jit", reason="mori-shmem (its JIT builds the test kernel) is not installed")
    if not jit.is_available():
        pytest.skip(f"no GPU: {jit.driver.unavailable_reason()}")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch, jit


@pytest.fixture(scope="module")
def table() -> SlotTable:
    return SlotTable.from_json(KERNELS / "test_slots.json")


def _kernel(gpu, table, tmp_path_factory, enabled: bool):
    _, jit = gpu
    generated = tmp_path_factory.mktemp("generated")
    codegen.write(generated / "test_slots.h", codegen.render_header(table))
    module = jit.load_module(
        KERNELS / "traced.cu",
        defines=mori.viz.jit_defines(enabled=enabled),
        include_dirs=[generated, mori.viz.get_include()],
    )
    return module.function("traced_kernel")


def _run(gpu, kernel, buffer, n=10_000):
    torch, _ = gpu
    data = torch.arange(n, dtype=torch.float32, device="cuda")
    args = [buffer, data, ctypes.c_int32(n), ctypes.c_int32(ITERS), ctypes.c_int64(SPIN_CYCLES)]
    kernel.launch(BLOCKS, THREADS, args, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    expected = torch.arange(n, dtype=torch.float32, device="cuda")
    for _ in range(ITERS):
        expected = expected * 2 + 1
    assert torch.equal(data, expected - 1)


def test_every_warp_records_its_nested_phases(gpu, table, tmp_path_factory, tmp_path):
    kernel = _kernel(gpu, table, tmp_path_factory, enabled=True)
    buffer = mori.viz.allocate(BLOCKS * THREADS // 32, 64, pe=0)
    _run(gpu, kernel, buffer)
    trace = mori.viz.read_trace(buffer)
    assert trace.dropped_warps == 0
    assert [w.warp_slot for w in trace.warps] == list(range(12))
    for warp in trace.warps:
        assert (warp.block, warp.warp) == divmod(warp.warp_slot, 3)
        assert warp.table_id == table.table_id
        assert warp.recorded == 2 + 2 * ITERS + 2 + 1
        assert (warp.events["timestamp_ns"][1:] >= warp.events["timestamp_ns"][:-1]).all()
    pairing = mori.viz.pair(trace)
    assert (pairing.orphan_ends, pairing.unclosed_begins) == (0, 0)
    names = table.names()
    for warp in trace.warps:
        mine = [s for s in pairing.slices if s.warp is warp]
        outer = [s for s in mine if names[s.slot] == "kernel/outer"]
        inner = [s for s in mine if names[s.slot] == "kernel/inner"]
        scoped = [s for s in mine if names[s.slot] == "kernel/scoped"]
        assert len(outer) == 1 and len(scoped) == 1 and len(inner) == ITERS
        assert [s.begin_arg for s in inner] == list(range(ITERS)) == [s.end_arg for s in inner]
        assert all(s.depth == 1 and outer[0].start_ns <= s.start_ns <= s.end_ns <= outer[0].end_ns for s in inner)
        assert all(s.duration_ns >= SPIN_CYCLES / MAX_SM_GHZ for s in inner)
        assert scoped[0].depth == 0 and scoped[0].start_ns >= outer[0].end_ns
        (done,) = [i for i in pairing.instants if i.warp is warp]
        assert done.arg == warp.block and done.timestamp_ns >= scoped[0].end_ns

    report = mori.viz.export_to_perfetto(buffer, tmp_path / "trace.json", table)
    document = json.loads((tmp_path / "trace.json").read_text())
    check_chrome_trace(document)
    assert (report.slices, report.instants, report.tracks) == (12 * (2 + ITERS), 12, 12)
    summary = {s.name: s for s in mori.viz.summarize(buffer, table)}
    assert summary["kernel/inner"].count == 12 * ITERS and summary["kernel/inner"].warps == 12


def test_disabled_build_leaves_the_buffer_untouched(gpu, table, tmp_path_factory):
    torch, _ = gpu
    kernel = _kernel(gpu, table, tmp_path_factory, enabled=False)
    buffer = mori.viz.allocate(12, 64)
    before = buffer.clone()
    _run(gpu, kernel, buffer)
    assert torch.equal(buffer, before)
    assert mori.viz.read_trace(buffer).warps == ()


def test_ring_wrap_dropped_warps_repeated_launches_and_reset(gpu, table, tmp_path_factory):
    kernel = _kernel(gpu, table, tmp_path_factory, enabled=True)
    buffer = mori.viz.allocate(8, 4)  # 12 warps, 8 slots, 11 events each into rings of 4
    _run(gpu, kernel, buffer)
    _run(gpu, kernel, buffer)
    trace = mori.viz.read_trace(buffer)
    assert trace.dropped_warps == 2 * 4
    assert len(trace.warps) == 8
    assert all(w.recorded == 22 and w.overwritten == 18 for w in trace.warps)
    # The newest 4 events of each warp: END outer, BEGIN and END scoped, the done instant.
    assert all(w.events["kind"].tolist() == [2, 1, 2, 3] for w in trace.warps)
    mori.viz.reset(buffer)
    cleared = mori.viz.read_trace(buffer)
    assert cleared.warps == () and cleared.dropped_warps == 0

# SPDX-License-Identifier: MIT
"""The device API through the device proxy (NOTE [device proxy]), on the cuda backend.

The same PE programs and numpy references as test_device_api.py, run where some or all peers are
not load/store reachable: MORI_SHMEM_PES_PER_NODE makes one GPU stand for several hosts, so the
kernels' calls to "remote" PEs go through the proxy ring and the TCP remote transport. With 4 PEs
and 2 per node each PE has one P2P peer and two remote ones, so both paths run in one kernel.
"""

from __future__ import annotations

import itertools
import random

import pytest

from mori.shmem.proxy_hazards import NEEDED_ENV
from mori.shmem.testing import run_pes

import device_programs

BASE_ENV = {
    "MORI_SHMEM_BACKEND": "cuda",
    "MORI_SHMEM_HEAP_SIZE": "256M",
    "MORI_SHMEM_DEVICE_SPIN_TIMEOUT": "60",
    **NEEDED_ENV,
}
LAYOUTS = {
    "all-remote": {"MORI_SHMEM_PES_PER_NODE": "1"},
    "two-per-node": {"MORI_SHMEM_PES_PER_NODE": "2"},
    # the vmm heap maps its P2P peer's chunks and leaves the remote ones to the proxy
    "two-per-node-vmm": {"MORI_SHMEM_PES_PER_NODE": "2", "MORI_SHMEM_MODE": "vmm_heap"},
}
TIMEOUT = 400


@pytest.fixture
def gpu(gpu_available):
    if not gpu_available:
        pytest.skip("no GPU: the device proxy serves kernels")


def _run(program, nranks, layout, *args):
    return run_pes(program, nranks, *args, env={**BASE_ENV, **LAYOUTS[layout]}, timeout=TIMEOUT)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_put_get_through_the_proxy(gpu, layout):
    rng = random.Random(7)
    sizes = (1, 4096 + 5, (9 << 20) + 7)  # the largest is staged in five pieces (NOTE [staging pipeline])
    cases = [(op, scope, nbytes, rng.randrange(16), rng.randrange(16), False)
             for op, scope in itertools.product(range(4), range(3)) for nbytes in sizes]  # fmt: skip
    cases += [(op, 2, 1000, 3, 5, True) for op in range(4)]  # module-global form
    assert all(n == len(cases) for n in _run(device_programs.put_get, 4, layout, cases))


@pytest.mark.gpu
def test_put_kernels_queued_back_to_back_through_the_proxy(gpu):
    """Kernels waiting in the launch queue behind one the proxy serves: the proxy's copies run in a
    CUDA context of their own, so a launching thread that waits for the GPU cannot hold them back
    (the 4 KiB hang of mori-shmem-bench --device-proxy before 0.1.10)."""
    launches = 64
    assert _run(device_programs.queued_puts, 2, "all-remote", launches, 4096) == [launches] * 2


@pytest.mark.gpu
def test_put_with_signal_and_immediates_through_the_proxy(gpu):
    cases = [(scope, 0, nbytes, op, 11) for scope in range(3) for nbytes in (4, 4096 + 4) for op in (3, 4, 9, 10)]
    # Payloads of up to MORI_SHMEM_PROXY_INLINE_BYTES (40) travel in the proxy's entry: its edges,
    # from and to unaligned addresses.
    cases += [(0, 0, nbytes, 9, 11, shift) for nbytes in (1, 8, 13, 40, 41) for shift in (0, 3)]
    assert _run(device_programs.put_signal, 2, "all-remote", cases) == [len(cases)] * 2
    values = [0x0123456789ABCDEF, 0x80]
    imm = [(api, scope, dtype, v) for api in range(3) for scope in range(2) for dtype in range(8) for v in values]
    assert _run(device_programs.put_imm, 4, "two-per-node", imm) == [len(imm)] * 4


@pytest.mark.gpu
def test_atomics_through_the_proxy(gpu):
    init, value = 0xF0F0_0000_8000_0007, 0x0FF0_0000_7FFF_FFFB
    codes = [2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19]
    cases = [(scope, 0, amo, itype, init, value, init if amo == 19 else 0)
             for amo, itype, scope in itertools.product(codes, range(4), range(2))]  # fmt: skip
    cases += [(0, 0, 19, itype, init, value, init + 1) for itype in range(4)]  # a compare-swap that fails
    assert _run(device_programs.atomic, 2, "all-remote", cases) == [len(cases)] * 2


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_signal_wait_ordering_through_the_proxy(gpu, layout):
    cases = [(mode, scope, op, nbytes, 3, 5) for mode in range(5) for scope in range(3)
             for op, nbytes in ((9, 4000), (10, 300_000), (10, (5 << 20) + 3))]  # fmt: skip
    assert _run(device_programs.signal_pingpong, 4, layout, cases) == [len(cases)] * 4


@pytest.mark.gpu
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_device_barrier_through_the_proxy(gpu, layout):
    rounds = 20
    for failed, last, final in _run(device_programs.barrier_loop, 4, layout, 1, rounds, False):
        assert (failed, last, final) == (0, rounds * 4, rounds * 4)


@pytest.mark.gpu
def test_a_kernel_load_does_not_stall_a_remote_wait_under_the_needed_settings(gpu):
    """The proxy applies a remote signal with this process's own CUDA work; with eager loading a
    first kernel lookup and torch op meanwhile leave it free (proxy_hazards.py), and init warns when
    loading is lazy."""
    env = {**BASE_ENV, **LAYOUTS["all-remote"], "MORI_SHMEM_DEVICE_SPIN_TIMEOUT": "20"}
    waiter, signaller = run_pes(device_programs.wait_while_loading, 2, True, env=env, timeout=TIMEOUT)
    assert waiter["seen"] == 1 and waiter["seconds"] < 10, waiter
    assert waiter["warnings"] == signaller["warnings"] == []
    defaults = {**env, "CUDA_MODULE_LOADING": "LAZY"}
    for pe in run_pes(device_programs.wait_while_loading, 2, False, env=defaults, timeout=TIMEOUT):
        assert any("CUDA_MODULE_LOADING" in w for w in pe["warnings"]), pe


@pytest.mark.gpu
def test_remote_writes_land_while_the_application_captures_a_graph(gpu):
    """The remote transport's copies, signal sets and atomics synchronize mori's own stream; under a
    global-mode capture in another thread that would invalidate the capture (and drop the peer)
    unless mori relaxes its thread's capture mode for them."""
    rounds = 10
    env = {**BASE_ENV, **LAYOUTS["all-remote"]}
    capturer, _ = run_pes(device_programs.remote_writes_during_graph_capture, 2, rounds, env=env, timeout=TIMEOUT)
    assert capturer == {"graph_ok": True, "data_ok": True, "signal": rounds, "added": rounds * (rounds + 1) // 2}

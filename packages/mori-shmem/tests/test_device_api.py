# SPDX-License-Identifier: MIT
"""The device API (mori_shmem/mori_shmem_device.cuh) on the cuda backend, against numpy references.

The kernels in gpu_kernels/device_api_test_kernels.cu call every device function at thread, warp
and block scope; the PE programs in device_programs.py launch them and check the bytes. Without a
GPU only the compile tests run: every device source the suite and the library use must build with
each compiler found (CI has nvcc and the NVRTC wheel).
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mori.shmem.testing import run_pes

import device_programs

ENV = {"MORI_SHMEM_BACKEND": "cuda", "MORI_SHMEM_HEAP_SIZE": "256M"}
TIMEOUT = 300


def _compilers() -> list[str]:
    from mori.shmem.jit import compiler

    return [name for name, found in (("nvcc", compiler.find_nvcc()), ("nvrtc", compiler.find_nvrtc())) if found]


@pytest.mark.parametrize("compiler_name", ["nvcc", "nvrtc"])
def test_device_sources_compile(compiler_name, tmp_path, monkeypatch):
    if compiler_name not in _compilers():
        pytest.skip(f"{compiler_name} is not installed here")
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    from mori.shmem import jit

    # With and without the device proxy's code (the JIT leaves it out in jobs without remote PEs).
    sources = [(device_programs.KERNELS, {}), (device_programs.KERNELS, {"MORI_SHMEM_DISABLE_DEVICE_PROXY": 1})]
    sources += [(jit.source_dir() / "shmem_kernels.cu", {})]
    sources += [(jit.source_dir() / "bench_kernels.cu", {"MORI_BENCH_SCOPE": s}) for s in (0, 1, 2)]
    specs = [
        jit.KernelSpec(f"compile-test-{i}", source, defines, [jit.include_dir()])
        for i, (source, defines) in enumerate(sources)
    ]
    # nvcc on sm_90 only: NVRTC compiles sm_80's paths, and nvcc on sm_80 as well cost 29 s of CI.
    arches = ("sm_90", "sm_80") if compiler_name == "nvrtc" else ("sm_90",)
    for arch in arches:  # each arch's compiles at once (compile_specs), on every core
        cubins = jit.compile_specs(specs, arch=arch, compiler=compiler_name)
        assert len(cubins) == len(specs)
        for cubin in cubins:
            assert cubin.read_bytes()[:4] == b"\x7fELF"


@pytest.fixture
def gpu(gpu_available):
    if not gpu_available:
        pytest.skip("no GPU: the device API runs on the cuda backend only")


def _run(program, nranks, *args, timeout=TIMEOUT):
    return run_pes(program, nranks, *args, env=ENV, timeout=timeout)


# ----------------------------------------------------------------------------- put / get

SIZES = [1, 3, 16, 255, 4096 + 5, (1 << 20) + 7]


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_put_get_every_op_scope_and_alignment(gpu, nranks):
    rng = random.Random(nranks)
    cases = []
    for op, scope in itertools.product(range(4), range(3)):
        for nbytes in SIZES if nranks == 2 else SIZES[::2]:
            cases.append((op, scope, nbytes, rng.randrange(16), rng.randrange(16), False))
    cases += [(op, scope, 1000, 3, 5, True) for op in range(4) for scope in range(3)]  # module-global form
    assert all(n == len(cases) for n in _run(device_programs.put_get, nranks, cases))


@pytest.mark.gpu
def test_small_messages_every_size_and_skew(gpu):
    # Every size up to 40 bytes, at offsets that agree modulo 16, modulo 8 and not at all: messages
    # that are all head and tail, and those with a few vectors between.
    skews = [(0, 0), (8, 0), (3, 3), (5, 13), (15, 7), (1, 9), (6, 2)]
    cases = [(op, scope, nbytes, dest_off, src_off, False) for op in (0, 2) for scope in range(3)
             for nbytes in range(1, 41) for dest_off, src_off in skews]  # fmt: skip
    assert _run(device_programs.put_get, 2, cases) == [len(cases)] * 2


@pytest.mark.gpu
def test_typed_put_get_every_dtype_and_name(gpu):
    cases = [(op, scope, dtype, api, n) for op in range(4) for scope in range(3) for dtype in range(10)
             for api in range(2) for n in (1, 77)]  # fmt: skip
    assert _run(device_programs.typed_put, 2, cases) == [len(cases)] * 2


@pytest.mark.gpu
def test_immediate_put_every_size(gpu):
    values = [0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFF, 0x80]
    cases = [(api, scope, dtype, v) for api in range(3) for scope in range(2) for dtype in range(8) for v in values]
    assert _run(device_programs.put_imm, 4, cases) == [len(cases)] * 4


@pytest.mark.gpu
def test_put_with_signal_set_and_add(gpu):
    cases = [(scope, typed, nbytes, op, 11) for scope in range(3) for typed in range(3)
             for nbytes in (4, 4096 + 4) for op in (3, 4, 9, 10)]  # fmt: skip
    assert _run(device_programs.put_signal, 2, cases) == [len(cases)] * 2


# ----------------------------------------------------------------------------- atomics and waits

AMO_CODES = [2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19]


@pytest.mark.gpu
def test_atomics_every_op_type_scope_and_name(gpu):
    init, value = 0xF0F0_0000_8000_0007, 0x0FF0_0000_7FFF_FFFB
    cases = []
    for amo, itype, scope, api in itertools.product(AMO_CODES, range(6), range(2), range(3)):
        cases.append((scope, api, amo, itype, init, value, init if amo == 19 else 0))
    cases += [(0, 0, 19, itype, init, value, init + 1) for itype in range(6)]  # a compare-swap that fails
    assert _run(device_programs.atomic, 2, cases) == [len(cases)] * 2


def _compare(cmp: int, a: int, b: int) -> bool:
    return [a == b, a != b, a > b, a <= b, a < b, a >= b][cmp]


@pytest.mark.gpu
def test_wait_until_and_test_every_comparison(gpu):
    cases = []
    for itype in range(6):
        signed = itype in (0, 2, 4)
        current = -3 if signed else 7
        for cmp in range(6):
            for value in (current - 1, current, current + 1):
                holds = _compare(cmp, current, value)
                cases.append((3, itype, cmp, current, value, holds))  # test only
                if holds:
                    cases.append((0, itype, cmp, current, value, True))  # wait returns at once
        cases.append((1, itype, 2, current, current - 1, True))  # WaitUntilGreaterThan
        cases.append((2, itype, 0, current, current, True))  # WaitUntilEquals
    assert _run(device_programs.wait_test, 2, cases) == [len(cases)] * 2


@pytest.mark.gpu
def test_bounded_wait_sets_the_error_word_and_the_host_raises(gpu):
    for out in _run(device_programs.wait_timeout, 2):
        assert out == {"raised": "WaitTimeoutError", "observed": 0, "after": None}


# ----------------------------------------------------------------------------- ordering stress


@pytest.mark.gpu
@settings(max_examples=4, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),  # mode: put+signal, fence, quiet(pe), blocking put, quiet()
            st.integers(0, 2),  # scope
            st.sampled_from([3, 4, 9, 10]),  # signal op (mode 0)
            st.integers(1, 300_000),  # bytes
            st.integers(0, 15),  # misalignment
            st.integers(1, 40),  # rounds
        ),
        min_size=1,
        max_size=6,
    )
)
def test_signal_wait_ordering_stress(gpu, cases):
    assert _run(device_programs.signal_pingpong, 4, cases) == [len(cases)] * 4


# ----------------------------------------------------------------------------- barrier and addressing


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4, 8])
@pytest.mark.parametrize(("scope", "global_form"), [(0, False), (1, False), (1, True)])
def test_device_barrier(gpu, nranks, scope, global_form):
    rounds = 50
    for failed, last, final in _run(device_programs.barrier_loop, nranks, scope, rounds, global_form):
        assert (failed, last, final) == (0, rounds * nranks, rounds * nranks)


@pytest.mark.gpu
def test_ptr_p2p_matches_the_host(gpu):
    nranks = 4
    for rank, rows in enumerate(_run(device_programs.ptr_p2p, nranks)):
        for pe, (device, device_3arg, mype, npes, host) in enumerate(rows[:nranks]):
            assert device == device_3arg == host != 0
            assert (mype, npes) == (rank, nranks)
            if pe == rank:
                assert device == rows[rank][4]
        assert rows[nranks][0] == 0, "an out-of-range PE gives NULL"
        assert rows[nranks + 1][0] == 0, "an address outside the heap gives NULL"

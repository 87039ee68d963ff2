# SPDX-License-Identifier: MIT
"""The Triton frontend without a GPU: wrappers, argument casting, linking, and the hook's logic.

Every kernel of triton_kernels.py is compiled with ``triton.compile`` for sm_90 down to a cubin
(Triton's bundled ptxas), with the mori-ir bitcode linked through ``extern_libs``, and the IR is
checked: every call has the table's types, nothing stays unresolved, the device-state global is
a visible .const, and the kernels together call all of DEVICE_FUNCTIONS. Skips (saying why) when
triton is not installed or no bitcode can be had here.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from typing import Any

import pytest

triton = pytest.importorskip("triton", reason="the Triton frontend needs triton: pip install triton")

import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, CompilationError, make_backend  # noqa: E402

import mori.ir.triton as mori_ir  # noqa: E402
from mori.ir.functions import DEVICE_FUNCTIONS, LLVM_TYPES  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
MLIR_TYPES = {"i32": "i32", "i64": "i64", "float": "f32", "double": "f64"}
EXTERN_OP = re.compile(r'pure = (true|false), symbol = "(mori_shmem_\w+)"\} : \(([^)]*)\) -> (\w+)')
STATE_GLOBAL = re.compile(r"\.visible \.const \.align \d+ \.b8 mori_shmem_device_state\[(\d+)\];")


@pytest.fixture(scope="module")
def extern_libs(bitcode_path):
    return {mori_ir.EXTERN_LIB_NAME: bitcode_path}


@pytest.fixture(scope="module")
def kernels():
    import triton_kernels

    return triton_kernels


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory):
    """A Triton cache of our own, so that every compile runs the whole pipeline (ptxas included)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield


def compile_kernel(kernel, signature, constexprs, extern_libs, **options):
    return triton.compile(ASTSource(kernel, signature, constexprs), target=TARGET,
                          options={"extern_libs": extern_libs, **options})  # fmt: skip


@pytest.fixture(scope="module")
def compiled(kernels, extern_libs, fresh_cache) -> dict[str, Any]:
    return {k.fn.__name__: compile_kernel(k, sig, ce, extern_libs) for k, sig, ce in kernels.COMPILE_SPECS}


def extern_calls(ttir: str) -> list[tuple[str, bool, list[str], str]]:
    """(symbol, pure, argument types, result type) of every tt.extern_elementwise in the TTIR."""
    calls = []
    for pure, symbol, args, ret in EXTERN_OP.findall(ttir):
        types = [a.strip() for a in args.split(",") if a.strip()]
        calls.append((symbol, pure == "true", types, ret))
    return calls


def expected_types(name: str) -> tuple[list[str], str]:
    fn = DEVICE_FUNCTIONS[name]
    return [MLIR_TYPES[LLVM_TYPES[t]] for _, t in fn.args], MLIR_TYPES[LLVM_TYPES[fn.ret]]


BY_SYMBOL = {f.symbol: f for f in DEVICE_FUNCTIONS.values()}


# ----------------------------------------------------------------------------- the wrappers


def test_every_table_entry_has_a_builtin_wrapper():
    assert len(DEVICE_FUNCTIONS) == 100
    assert list(mori_ir.WRAPPERS) == list(DEVICE_FUNCTIONS)
    for name, fn in DEVICE_FUNCTIONS.items():
        wrapper = getattr(mori_ir, name)
        assert wrapper is mori_ir.WRAPPERS[name]
        assert name in mori_ir.__all__
        assert tl.core.is_builtin(wrapper), name
        params = list(inspect.signature(wrapper).parameters)
        assert params == [arg for arg, _ in fn.args] + ["_semantic"], name
        assert fn.symbol in wrapper.__doc__ and wrapper.__name__ == name
        for arg, type_name in fn.args:
            assert f"{arg}: {type_name}" in wrapper.__doc__


def test_constants_and_exports():
    assert mori_ir.SIGNAL_SET == 9 and mori_ir.SIGNAL_ADD == 10
    assert isinstance(mori_ir.SIGNAL_SET, tl.constexpr)
    for name in ("get_extern_libs", "install_hook", "uninstall_hook", "init_kernel", "SIGNAL_SET", "SIGNAL_ADD"):
        assert name in mori_ir.__all__ and hasattr(mori_ir, name)
    assert len(set(mori_ir.__all__)) == len(mori_ir.__all__)


def test_a_wrapper_outside_a_kernel_says_so():
    with pytest.raises(ValueError, match=r"triton\.jit"):
        mori_ir.my_pe()


def test_without_triton_the_import_error_says_what_to_install():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # what an absent package looks like to import
        "try:\n    import mori.ir.triton\nexcept ImportError as e:\n    print(e)\nelse:\n    print('imported')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert "pip install triton" in out, out


def test_get_extern_libs_names_the_bitcode(bitcode_path):
    assert mori_ir.get_extern_libs() == {"mori_shmem": bitcode_path}


# ----------------------------------------------------------------------------- compile and link


def test_every_kernel_compiles_to_a_cubin_with_the_bitcode_linked(compiled):
    for name, kernel in compiled.items():
        ptx = kernel.asm["ptx"]
        assert ".extern" not in ptx, f"{name}: unresolved declarations left in the PTX"
        code = re.sub(r"//[^\n]*", "", ptx)  # labels' comments name the inlined functions
        referenced = {s for s in re.findall(r"\b(mori_shmem_\w+)\b", code) if s != "mori_shmem_device_state"}
        defined = set(re.findall(r"\.func (?:\([^)]*\) )?(mori_shmem_\w+)\(", code))
        assert referenced <= defined, f"{name}: calls {referenced - defined} without a definition"
        assert STATE_GLOBAL.search(ptx), f"{name}: mori_shmem_device_state is not a .visible .const global"
        assert kernel.asm["cubin"][:4] == b"\x7fELF", f"{name}: ptxas produced no cubin"
        assert mori_ir._uses_device_state(kernel) is True


def test_the_state_global_has_mori_shmems_size(compiled):
    import ctypes

    try:
        from mori.shmem import device
    except (ImportError, OSError) as exc:  # the wheel, or its native library, is not here
        pytest.skip(f"mori-shmem is not importable here: {exc}")

    for name, kernel in compiled.items():
        size = int(STATE_GLOBAL.search(kernel.asm["ptx"]).group(1))
        assert size == ctypes.sizeof(device.DeviceState), name


def test_calls_have_the_table_types_and_purity(compiled):
    for name, kernel in compiled.items():
        calls = extern_calls(kernel.asm["ttir"])
        assert calls, f"{name}: no mori-ir call found in the TTIR"
        for symbol, pure, args, ret in calls:
            fn = BY_SYMBOL[symbol]
            assert (args, ret) == expected_types(fn.name), f"{name}: {symbol}({args}) -> {ret}"
            assert pure == fn.pure, f"{name}: {symbol} pure={pure}"


def test_the_kernels_call_every_device_function(compiled):
    called = {symbol for kernel in compiled.values() for symbol, *_ in extern_calls(kernel.asm["ttir"])}
    missing = sorted(f.name for f in DEVICE_FUNCTIONS.values() if f.symbol not in called)
    assert not missing, f"no test kernel calls {missing}"


# ----------------------------------------------------------------------------- argument casting


@triton.jit
def cast_kernel(ptr, wide, out):
    a = mori_ir.uint64_p(ptr, 0xFEDCBA9876543210, 1, 0)  # a Python int above the int64 range
    b = mori_ir.int32_p(ptr, -1, wide, 0)  # an int64 tensor where int32 is declared
    c = mori_ir.ptr(ptr.to(tl.uint64, bitcast=True), 0)  # the explicit spelling still works
    d = mori_ir.ptr(ptr, 0)  # a pointer, cast by the wrapper
    e = mori_ir.float_p(ptr, 3, 0, 0)  # a Python int where float32 is declared
    f = mori_ir.double_p(ptr, 2.5, 0, 0)
    g = mori_ir.uint32_p(ptr, 0xFFFFFFFF, True, 0)  # an unsigned 32-bit constant; a bool pe
    h = mori_ir.uint64_atomic_add_thread(ptr, wide.to(tl.int32), 0, 0)  # int32 tensor -> uint64
    tl.store(out, a + b + e + f + g + h)
    tl.store(out + 1, (c - d).to(tl.int64))


def test_arguments_are_cast_to_the_declared_types(extern_libs, fresh_cache):
    kernel = compile_kernel(cast_kernel, {"ptr": "*i64", "wide": "i64", "out": "*i64"}, {}, extern_libs)
    ttir = kernel.asm["ttir"]
    calls = extern_calls(ttir)
    # The two spellings of the pointer argument give the same (pure) call, which CSE merges.
    names = ["uint64_p", "int32_p", "ptr", "float_p", "double_p", "uint32_p", "uint64_atomic_add_thread"]
    assert [s for s, *_ in calls] == [f"mori_shmem_{n}" for n in names]
    for symbol, _, args, ret in calls:
        assert (args, ret) == expected_types(BY_SYMBOL[symbol].name)
    assert "tt.ptr_to_int" in ttir
    assert re.search(r"arith\.trunci %wide\w* : i64 to i32", ttir), "the int64 pe was not truncated"
    val = re.search(r"tt\.extern_elementwise %[\w-]+, (%[\w-]+), .*mori_shmem_uint64_atomic_add_thread", ttir).group(1)
    assert re.search(rf"{val} = arith\.extsi %[\w-]+ : i32 to i64", ttir), "the int32 value was not sign-extended"
    assert f"{0xFEDCBA9876543210 - (1 << 64)} : i64" in ttir  # the bit pattern of the uint64 constant
    assert "3.000000e+00 : f32" in ttir and "2.500000e+00 : f64" in ttir
    assert kernel.asm["cubin"][:4] == b"\x7fELF"


@triton.jit
def pointer_for_an_int_kernel(ptr):
    mori_ir.quiet_thread_pe(ptr)


@triton.jit
def float_for_an_int_kernel(ptr):
    mori_ir.int64_p(ptr, 1.5, 0, 0)


@triton.jit
def too_wide_kernel(ptr):
    mori_ir.int32_p(ptr, 1 << 32, 0, 0)


@triton.jit
def missing_argument_kernel(ptr):
    mori_ir.ptr(ptr)


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        (pointer_for_an_int_kernel, "argument 'pe': a pointer"),
        (float_for_an_int_kernel, "argument 'val': a float"),
        (too_wide_kernel, "does not fit in int32"),
        (missing_argument_kernel, "missing a required argument: 'pe'"),
    ],
)
def test_bad_arguments_fail_at_compile_time_with_the_argument_named(kernel, message, extern_libs, fresh_cache):
    with pytest.raises(CompilationError, match=re.escape(message)):
        compile_kernel(kernel, {"ptr": "*i64"}, {}, extern_libs)


@triton.jit
def my_pe_kernel(out):
    tl.store(out, mori_ir.my_pe())


def test_a_kernel_without_the_bitcode_in_extern_libs_is_refused_clearly(fresh_cache):
    with pytest.raises(CompilationError, match=r"extern_libs=mori\.ir\.triton\.get_extern_libs\(\)"):
        triton.compile(ASTSource(my_pe_kernel, {"out": "*i32"}, {}), target=TARGET)


def test_the_bitcode_may_be_linked_under_another_name(bitcode_path, fresh_cache):
    kernel = compile_kernel(my_pe_kernel, {"out": "*i32"}, {}, {"anything": bitcode_path})
    assert ".extern" not in kernel.asm["ptx"] and STATE_GLOBAL.search(kernel.asm["ptx"])


@triton.jit
def plain_kernel(out):
    tl.store(out, 1)


def test_uses_device_state_tells_mori_kernels_apart(compiled, extern_libs, fresh_cache):
    plain = compile_kernel(plain_kernel, {"out": "*i32"}, {}, extern_libs)
    assert mori_ir._uses_device_state(plain) is False
    assert mori_ir._uses_device_state(compiled["query_kernel"]) is True


# ----------------------------------------------------------------------------- the hook (no GPU)


class FakeKernel:
    """What the hook touches of a CompiledKernel: asm, _init_handles() and module."""

    def __init__(self, ptx: str = ".visible .const .align 8 .b8 mori_shmem_device_state[112];") -> None:
        self.asm = {"ptx": ptx}
        self.module = None
        self.loads = 0

    def _init_handles(self) -> None:
        self.loads += 1
        self.module = 0xC0DE


@pytest.fixture
def knobs_hook():
    """Restores triton.knobs.runtime.jit_post_compile_hook after the test."""
    runtime = triton.knobs.runtime
    saved = runtime.jit_post_compile_hook
    runtime.jit_post_compile_hook = None
    yield runtime
    runtime.jit_post_compile_hook = saved


@pytest.fixture
def module_inits(monkeypatch):
    handles: list[int] = []

    def fake_module_init(handle: int) -> int:
        handles.append(handle)
        return 0

    monkeypatch.setattr(mori_ir, "_shmem_module_init", fake_module_init)
    monkeypatch.setattr(mori_ir, "_shmem_initialized", lambda: True)
    return handles


def test_install_is_idempotent_chains_and_uninstalls(knobs_hook):
    calls = []

    def previous(**kwargs):
        calls.append(kwargs["key"])
        return "previous-result"

    knobs_hook.jit_post_compile_hook = previous
    mori_ir.install_hook()
    ours = knobs_hook.jit_post_compile_hook
    assert ours is not previous and mori_ir.hook_installed()
    mori_ir.install_hook()
    assert knobs_hook.jit_post_compile_hook is ours, "installing twice wrapped twice"
    assert ours(key="k", fn=None, compile={}) == "previous-result" and calls == ["k"]
    mori_ir.uninstall_hook()
    assert knobs_hook.jit_post_compile_hook is previous and not mori_ir.hook_installed()
    mori_ir.uninstall_hook()  # nothing installed: a no-op
    assert knobs_hook.jit_post_compile_hook is previous


def test_uninstall_under_someone_elses_hook_silences_ours(knobs_hook, module_inits):
    mori_ir.install_hook()
    ours = knobs_hook.jit_post_compile_hook

    def theirs(**kwargs):
        return ours(**kwargs)

    theirs.previous = ours  # a chaining hook that exposes what it wraps, as ours does
    knobs_hook.jit_post_compile_hook = theirs
    mori_ir.uninstall_hook()
    assert knobs_hook.jit_post_compile_hook is theirs and not mori_ir.hook_installed()
    mori_ir.install_hook()  # and installing again puts a live one on top
    assert mori_ir.hook_installed() and knobs_hook.jit_post_compile_hook is not theirs


def _fake_device_cache(jit_fn, device: int, kernels: dict[str, Any]) -> None:
    """What JITFunction.create_binder would store for a device, without a driver."""
    backend = make_backend(TARGET)
    jit_fn.device_caches[device] = (kernels, {}, TARGET, backend, None)


def _call_post_compile_hook(jit_fn, key: str, device: int, warmup: bool = False) -> None:
    """Calls the hook exactly as Triton's JIT does after a compile (JITFunction._call_hook)."""
    options = make_backend(TARGET).parse_options({})
    jit_fn._call_hook(triton.knobs.runtime.jit_post_compile_hook, key, {"out": "*i32"}, device, {}, options, [{}],
                      warmup)  # fmt: skip


def test_the_hook_initialises_the_kernel_triton_just_compiled(knobs_hook, module_inits):
    mori_ir.install_hook()
    kernel, plain = FakeKernel(), FakeKernel(ptx="// no mori here")
    _fake_device_cache(plain_kernel, 5, {"with-state": kernel, "without": plain})
    try:
        _call_post_compile_hook(plain_kernel, "with-state", 5)
        _call_post_compile_hook(plain_kernel, "without", 5)
        _call_post_compile_hook(plain_kernel, "not-compiled", 5)
    finally:
        del plain_kernel.device_caches[5]
    assert kernel.loads == 1 and module_inits == [0xC0DE]
    assert plain.loads == 0, "a kernel without the state global was loaded for nothing"


def test_before_shmem_init_a_warmup_defers_and_a_launch_is_refused(knobs_hook, module_inits, monkeypatch):
    monkeypatch.setattr(mori_ir, "_shmem_initialized", lambda: False)
    mori_ir.install_hook()
    warm, launched = FakeKernel(), FakeKernel()
    cache = {"warm": warm, "launched": launched}
    _fake_device_cache(plain_kernel, 4, cache)
    try:
        _call_post_compile_hook(plain_kernel, "warm", 4, warmup=True)
        with pytest.raises(RuntimeError, match="not initialised"):
            _call_post_compile_hook(plain_kernel, "launched", 4)
    finally:
        del plain_kernel.device_caches[4]
    # Both are forgotten, so that their next launch loads them again and the hook fills them then.
    assert cache == {} and warm.loads == launched.loads == 0 and module_inits == []


def test_a_failed_init_forgets_the_kernel_so_the_next_launch_retries(knobs_hook, monkeypatch):
    def broken(handle: int) -> int:
        raise RuntimeError("the copy failed")

    monkeypatch.setattr(mori_ir, "_shmem_module_init", broken)
    monkeypatch.setattr(mori_ir, "_shmem_initialized", lambda: True)
    mori_ir.install_hook()
    cache = {"kk": FakeKernel()}
    _fake_device_cache(plain_kernel, 6, cache)
    try:
        with pytest.raises(RuntimeError, match="the copy failed"):
            _call_post_compile_hook(plain_kernel, "kk", 6)
    finally:
        del plain_kernel.device_caches[6]
    assert "kk" not in cache


def test_the_hook_runs_after_every_compile_call_including_disk_cache_hits(knobs_hook, module_inits, monkeypatch):
    """JITFunction._do_compile calls the post-compile hook after triton.compile returns, and
    triton.compile returns a kernel loaded from the disk cache the same way as a fresh one: so a
    process that finds its kernels in the cache still gets their device state filled."""
    mori_ir.install_hook()
    from_disk = FakeKernel()
    monkeypatch.setattr(plain_kernel, "compile", lambda src, target, options: from_disk, raising=False)
    monkeypatch.setattr(plain_kernel, "ASTSource", ASTSource, raising=False)
    cache: dict[str, Any] = {}
    _fake_device_cache(plain_kernel, 7, cache)
    options = make_backend(TARGET).parse_options({})
    try:
        got = plain_kernel._do_compile("key", {"out": "*i32"}, 7, {}, options, {}, False)
    finally:
        del plain_kernel.device_caches[7]
    assert got is from_disk and cache == {"key": from_disk}
    assert module_inits == [0xC0DE]

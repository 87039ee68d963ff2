# SPDX-License-Identifier: MIT
"""Triton frontend of mori-ir: call mori-shmem's device API from ``@triton.jit`` kernels.

One Triton builtin per entry of :data:`mori.ir.functions.DEVICE_FUNCTIONS`, under its short name::

    import mori.ir.triton as mori_ir

    mori_ir.install_hook()  # once per process, before the first launch

    @triton.jit
    def kernel(dest, src, nbytes, sig):
        pe = (mori_ir.my_pe() + 1) % mori_ir.n_pes()
        mori_ir.putmem_nbi_signal_block(dest, src, nbytes, sig, 1, mori_ir.SIGNAL_SET, pe, 0)

    kernel[(1,)](dest, src, nbytes, sig, extern_libs=mori_ir.get_extern_libs())

Arguments are cast to the types of the table: Python ints and floats become constants of the
declared type, Triton pointers become ``uint64`` addresses (``ptr.to(tl.uint64, bitcast=True)``
still works), integers of other widths are converted as by ``.to()``. Functions that return
nothing in C return an ``int32`` 0 (``extern_elementwise`` needs a result).

Things to know (Triton 3.x on NVIDIA):

- Only ``extern_libs`` given at launch (or to ``triton.compile``'s options) are linked; the
  ``lib_path`` of ``extern_elementwise`` is not. Launch with ``extern_libs=get_extern_libs()``;
  a kernel traced without the mori-ir bitcode among its ``extern_libs`` fails to compile with a
  message that says so, instead of ptxas' "unresolved extern function".
- The bitcode's ``mori_shmem_device_state`` global is filled per loaded CUDA module by
  :func:`mori.shmem.shmem_module_init`. :func:`install_hook` does it for every kernel the JIT
  compiles or loads from Triton's disk cache, per device; for kernels built with
  ``triton.compile`` call :func:`init_kernel`. Both need mori-shmem initialised first.
- A scalar call in a Triton kernel runs on every thread of the program (Triton has no
  single-thread scalars): ``*_block`` functions are meant to be called that way, ``*_warp`` ones
  run once per warp, and ``*_thread`` ones once per thread, so guard thread-scope atomics, puts
  and ``barrier_all_thread`` by :func:`thread_id` when they must happen once per program.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from mori._compat import note_no_effect
from mori.ir.functions import DEVICE_FUNCTIONS, QP_NO_EFFECT, DeviceFunction
from mori.ir.functions import SIGNAL_ADD as _SIGNAL_ADD
from mori.ir.functions import SIGNAL_SET as _SIGNAL_SET

try:
    # Imported through importlib: Triton ships no type information, and the name of this module
    # must not shadow the real package.
    _triton: Any = importlib.import_module("triton")
    _tl: Any = importlib.import_module("triton.language")
    _core: Any = importlib.import_module("triton.language.core")
except ImportError as exc:  # pragma: no cover - exercised only where triton is absent
    raise ImportError(
        f"mori.ir.triton needs Triton (3.4 or later): pip install triton  (importing it failed: {exc})"
    ) from exc

if not hasattr(_triton, "knobs"):  # pragma: no cover - old Triton
    raise ImportError(
        f"mori.ir.triton needs Triton 3.4 or later (triton.knobs, builtins taking _semantic); found "
        f"{getattr(_triton, '__version__', 'unknown')}: pip install -U triton"
    )

logger = logging.getLogger("mori.ir.triton")

#: The key of the bitcode in ``extern_libs`` (MORI's spelling).
EXTERN_LIB_NAME: Final = "mori_shmem"
# Other keys under which a caller may have handed us the bitcode.
_LIB_ALIASES: Final = (EXTERN_LIB_NAME, "libmori_shmem_device", "mori_ir")
#: The module global that ``shmem_module_init`` fills.
DEVICE_STATE_SYMBOL: Final = "mori_shmem_device_state"

#: ``sig_op`` codes of ``putmem_nbi_signal_*`` (constexpr, so kernels may use them as globals).
SIGNAL_SET: Final[Any] = _tl.constexpr(_SIGNAL_SET)
SIGNAL_ADD: Final[Any] = _tl.constexpr(_SIGNAL_ADD)

_TL_TYPES: Final[dict[str, Any]] = {
    "int32": _tl.int32,
    "uint32": _tl.uint32,
    "int64": _tl.int64,
    "uint64": _tl.uint64,
    "float32": _tl.float32,
    "float64": _tl.float64,
}
_INT_BITS: Final[dict[str, int]] = {"int32": 32, "uint32": 32, "int64": 64, "uint64": 64}


# ----------------------------------------------------------------------------- bitcode


def get_extern_libs() -> dict[str, str]:
    """``{"mori_shmem": <bitcode path>}``: pass as ``extern_libs=`` when launching (or compiling).

    Resolves the bitcode through :func:`mori.ir.bitcode.find_bitcode` (``MORI_SHMEM_BC``, the
    shipped file, the cache, or a build), so the first call may take a while.
    """
    from mori.ir.bitcode import find_bitcode

    return {EXTERN_LIB_NAME: str(find_bitcode())}


def _linked_bitcode(semantic: Any, fn: DeviceFunction) -> str:
    """The bitcode path among the traced kernel's ``extern_libs``; raises when there is none.

    Triton links only ``options.extern_libs`` (``make_llir``); the path given to
    ``extern_elementwise`` is only recorded, so this is what makes a missing ``extern_libs=`` a
    clear error at trace time.
    """
    options = getattr(getattr(semantic, "builder", None), "options", None)
    if options is None or not hasattr(options, "extern_libs"):
        return ""  # a frontend that does not expose its options: let the linker decide
    libs: dict[str, str] = {str(k): str(v) for k, v in (options.extern_libs or ())}
    for name in _LIB_ALIASES:
        if libs.get(name):
            return libs[name]
    for path in libs.values():
        if "mori_shmem" in os.path.basename(path):
            return path
    others = [name for name in libs if name != "libdevice"]
    if others:
        # Linked under a name of the caller's choosing: assume it is ours.
        return libs[others[0]]
    raise ValueError(
        f"mori.ir.triton.{fn.name} calls {fn.symbol} from the mori-ir bitcode, which this kernel does not link: "
        f"launch (or compile) it with extern_libs=mori.ir.triton.get_extern_libs() (Triton links only extern_libs)"
    )


# ----------------------------------------------------------------------------- argument casting


def _is_tensor(value: Any) -> bool:
    return isinstance(value, _core.tensor)


def _int_constant(value: int, type_name: str, semantic: Any, where: str) -> Any:
    bits = _INT_BITS[type_name]
    if not -(1 << (bits - 1)) <= value < (1 << bits):
        raise ValueError(f"{where}: {value} does not fit in {type_name}")
    pattern = value & ((1 << bits) - 1)  # C conversion: keep the low bits
    if type_name.startswith("int") and pattern >= 1 << (bits - 1):
        pattern -= 1 << bits
    return semantic.scalar_constant(pattern, _TL_TYPES[type_name])


def _cast_arg(value: Any, type_name: str, *, _semantic: Any, where: str = "argument") -> Any:
    """``value`` as a Triton tensor of the table type ``type_name`` (used by every wrapper).

    Python ints, bools and floats become constants (ints outside the type's signed or unsigned
    range are an error; ints are stored as their two's-complement bit pattern); pointers become
    ``uint64`` (``ptrtoint``) and are refused for any other type; other tensors (scalars or
    blocks) are converted with Triton's ``cast``, i.e. as ``x.to(dtype)``.
    """
    if type_name not in _TL_TYPES:
        raise ValueError(f"{where}: unknown table type {type_name!r}")
    dtype = _TL_TYPES[type_name]
    value = _core._unwrap_if_constexpr(value)
    if _is_tensor(value):
        scalar = value.type.scalar
        if scalar.is_ptr():
            if type_name != "uint64":
                raise TypeError(f"{where}: a pointer ({scalar}) was passed where {type_name} is expected")
            return _semantic.cast(value, dtype)
        if scalar == dtype:
            return value
        return _semantic.cast(value, dtype)
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if type_name in _INT_BITS:
            return _int_constant(value, type_name, _semantic, where)
        return _semantic.scalar_constant(float(value), dtype)
    if isinstance(value, float):
        if type_name in _INT_BITS:
            raise TypeError(f"{where}: a float ({value!r}) was passed where {type_name} is expected")
        return _semantic.scalar_constant(value, dtype)
    raise TypeError(f"{where}: cannot pass {type(value).__name__} {value!r} as {type_name}")


# ----------------------------------------------------------------------------- the wrappers


def _signature_text(fn: DeviceFunction) -> str:
    args = ", ".join(f"{name}: {type_name}" for name, type_name in fn.args)
    return f"{fn.name}({args}) -> {fn.ret}"


def _docstring(fn: DeviceFunction) -> str:
    args = ", ".join(f"{type_name} {name}" for name, type_name in fn.args) or "void"
    lines = [
        f"{_signature_text(fn)}",
        "",
        f"Calls the device function ``{fn.ret} {fn.symbol}({args})`` of the mori-ir bitcode (a Triton",
        "builtin: use it inside ``@triton.jit`` code, and launch with ``extern_libs=get_extern_libs()``).",
        "",
        "Arguments:",
    ]
    for name, type_name in fn.args:
        note = " (an address: a Triton pointer is accepted)" if _is_address(name) else ""
        lines.append(f"    {name}: {type_name}{note}")
    if not fn.args:
        lines.append("    (none)")
    lines.append("")
    if _returns_value(fn):
        lines.append(f"Returns: {fn.ret}.")
    else:
        lines.append("Returns: int32 0 (the C++ call returns nothing).")
    lines.append(f"Pure (the compiler may merge or drop calls): {'yes' if fn.pure else 'no'}.")
    return "\n".join(lines)


def _returns_value(fn: DeviceFunction) -> bool:
    """Whether the C++ call has a result (the table gives the others an int32 0 to return)."""
    real_int32 = fn.name in ("my_pe", "n_pes") or "_wait_until" in fn.name or fn.name.endswith("_test")
    return fn.ret != "int32" or real_int32


def _is_address(arg_name: str) -> bool:
    return arg_name in ("dest", "src", "ptr", "addr", "sig_addr", "val_ptr")


def _note_qp(value: Any) -> None:
    """Logs (once) that ``qp`` has no effect when a kernel passes anything but the constant 0;
    a runtime value cannot be seen at trace time, so it counts as set."""
    value = _core._unwrap_if_constexpr(value)
    if _is_tensor(value):
        note_no_effect("qp", "<a runtime value>", QP_NO_EFFECT)
    elif value != 0:
        note_no_effect("qp", value, QP_NO_EFFECT)


def _make_wrapper(fn: DeviceFunction) -> Callable[..., Any]:
    names = [name for name, _ in fn.args]
    types = [type_name for _, type_name in fn.args]
    key = tuple(_TL_TYPES[t] for t in types)
    ret = _TL_TYPES[fn.ret]
    plain = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    semantic_param = inspect.Parameter("_semantic", inspect.Parameter.KEYWORD_ONLY, default=None)
    full = plain.replace(parameters=[*plain.parameters.values(), semantic_param])
    text = _signature_text(fn)

    def wrapper(*args: Any, _semantic: Any = None, **kwargs: Any) -> Any:
        try:
            bound = plain.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"mori.ir.triton.{text}: {exc}") from None
        if "qp" in bound.arguments:
            _note_qp(bound.arguments["qp"])
        values = [
            _cast_arg(bound.arguments[n], t, _semantic=_semantic, where=f"mori.ir.triton.{fn.name} argument {n!r}")
            for n, t in zip(names, types, strict=True)
        ]
        lib_path = _linked_bitcode(_semantic, fn)
        return _core.extern_elementwise(
            EXTERN_LIB_NAME, lib_path, values, {key: (fn.symbol, ret)}, is_pure=fn.pure, _semantic=_semantic
        )

    wrapper.__name__ = fn.name
    wrapper.__qualname__ = fn.name
    wrapper.__module__ = __name__
    wrapper.__doc__ = _docstring(fn)
    # Triton passes _semantic only to callables whose signature names it.
    wrapper.__signature__ = full  # type: ignore[attr-defined]
    built: Callable[..., Any] = _core.extern(wrapper)
    return built


#: short name -> Triton builtin, one per DEVICE_FUNCTIONS entry, in table order.
WRAPPERS: Final[dict[str, Callable[..., Any]]] = {name: _make_wrapper(f) for name, f in DEVICE_FUNCTIONS.items()}
globals().update(WRAPPERS)


@_triton.jit
def thread_id():  # type: ignore[no-untyped-def]  # noqa: ANN201 (a Triton function)
    """``%tid.x`` of the calling thread, the one scalar that differs between a program's threads:
    guard thread- and warp-scope calls with it (``if thread_id() == 0:``)."""
    return _tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=_tl.int32, is_pure=True, pack=1)


# ----------------------------------------------------------------------------- module init hook


def _shmem_module_init(handle: int) -> int:
    import mori.shmem

    return int(mori.shmem.shmem_module_init(handle))


def _shmem_initialized() -> bool:
    import mori.shmem

    return bool(mori.shmem.shmem_is_initialized())


def _not_initialized(message: str) -> Exception:
    try:
        from mori.shmem.errors import NotInitializedError
    except ImportError:  # pragma: no cover - mori-shmem is a dependency
        return RuntimeError(message)
    return NotInitializedError(message)


def _uses_device_state(kernel: Any) -> bool | None:
    """Whether the kernel's PTX (or LLVM IR) names the state global; None when neither is kept."""
    asm = getattr(kernel, "asm", None) or {}
    for ext in ("ptx", "llir"):
        if ext in asm:
            text = asm[ext]
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            return DEVICE_STATE_SYMBOL in text
    return None


def init_kernel(kernel: Any) -> int:
    """Loads a Triton ``CompiledKernel`` into the current CUDA context and fills its device state.

    For kernels compiled with ``triton.compile`` (the JIT's are covered by :func:`install_hook`);
    mori-shmem must be initialised and the kernel's device current. Returns 0, or -1 when the
    kernel does not use the mori-ir device state (nothing to do).
    """
    if _uses_device_state(kernel) is False:
        return -1
    kernel._init_handles()
    return _shmem_module_init(int(kernel.module))


class _PostCompileHook:
    """``triton.knobs.runtime.jit_post_compile_hook``: :func:`init_kernel` for each JIT compile.

    Triton 3.6 calls it as ``hook(key=, repr=, fn=JitFunctionInfo, compile={..., "device"},
    is_manual_warmup=, already_compiled=)`` after every in-memory cache miss of a JITFunction on a
    device, whether ``triton.compile`` compiled the kernel or loaded it from the disk cache; the
    CompiledKernel is ``fn.jit_function.device_caches[device][0][key]``.
    """

    def __init__(self, previous: Callable[..., Any] | None) -> None:
        self.previous = previous
        self.active = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.previous(*args, **kwargs) if self.previous is not None else None
        if self.active:
            self._init(kwargs)
        return result

    @staticmethod
    def _init(kwargs: Mapping[str, Any]) -> None:
        info, key, compile_info = kwargs.get("fn"), kwargs.get("key"), kwargs.get("compile") or {}
        jit_function = getattr(info, "jit_function", None)
        device = compile_info.get("device")
        if jit_function is None or device is None:
            logger.debug("post-compile hook called without fn/device: %s", sorted(kwargs))
            return
        kernel_cache = jit_function.device_caches[device][0]
        kernel = kernel_cache.get(key)
        if kernel is None or not hasattr(kernel, "_init_handles"):
            logger.debug("no compiled kernel for %s on device %s yet", kwargs.get("repr"), device)
            return
        if _uses_device_state(kernel) is False:
            return
        name = kwargs.get("repr") or getattr(kernel, "name", "a kernel")
        if not _shmem_initialized():
            # Forget the kernel: the next launch loads it again (from Triton's disk cache) and this
            # hook then fills its state. A launch must not go on with an empty state (its waits
            # would spin forever), so only a warmup may pass.
            kernel_cache.pop(key, None)
            if kwargs.get("is_manual_warmup") or compile_info.get("is_warmup"):
                logger.info("mori.ir: %s was warmed up before mori-shmem was initialised: its state is filled "
                            "at its first launch", name)  # fmt: skip
                return
            raise _not_initialized(
                f"mori.ir: {name} uses mori-shmem's device state, but mori-shmem is not initialised in this "
                "process: initialise it (shmem_init_attr, ...) before the first launch"
            )
        try:
            status = init_kernel(kernel)
        except Exception:
            # Forget the kernel, so that the next launch loads it again and retries, rather than
            # running with an empty device state.
            kernel_cache.pop(key, None)
            logger.exception("mori.ir: initialising the device state of %s failed", name)
            raise
        logger.debug("mori.ir: device state of %s on device %s: %d", name, device, status)


_HOOK_LOCK = threading.Lock()


def _knobs() -> Any:
    return _triton.knobs.runtime


def install_hook() -> None:
    """Makes every JIT-compiled kernel that uses the mori-ir state get it (idempotent).

    Sets ``triton.knobs.runtime.jit_post_compile_hook`` to a hook that, for each kernel whose PTX
    names ``mori_shmem_device_state``, loads the module (``kernel._init_handles()``) and calls
    :func:`mori.shmem.shmem_module_init` on it. A hook installed before is still called (first).
    Installing twice does not wrap twice.

    Triton calls the hook each time a JITFunction misses its in-memory cache on a device, also
    when the kernel comes from Triton's disk cache, so every process and every device (Triton
    keeps one compiled kernel, hence one loaded module, per device) gets its own copy filled.
    Initialise mori-shmem before the first launch: a launch before it raises, a warmup before it
    is forgotten and filled at the kernel's first launch. Kernels already loaded keep the state
    they were given: after shmem_finalize and a new init in the same process, call
    :func:`init_kernel` on them again (or clear their JIT caches).
    """
    with _HOOK_LOCK:
        runtime = _knobs()
        current = runtime.jit_post_compile_hook
        if hook_installed():
            return
        runtime.jit_post_compile_hook = _PostCompileHook(current)
        logger.debug("installed the mori.ir post-compile hook (chained to %r)", current)


def uninstall_hook() -> None:
    """Undoes :func:`install_hook`: restores the hook it chained to.

    If another hook was installed on top of ours since, ours stays in that chain but does nothing
    more than call the one before it.
    """
    with _HOOK_LOCK:
        runtime = _knobs()
        current = runtime.jit_post_compile_hook
        if isinstance(current, _PostCompileHook):
            current.active = False
            runtime.jit_post_compile_hook = current.previous
            return
        hook = current
        while hook is not None:
            # Not on top: we cannot unlink it from a chain we do not own, but we can silence it.
            previous = getattr(hook, "previous", None)
            if isinstance(hook, _PostCompileHook):
                hook.active = False
            hook = previous


def hook_installed() -> bool:
    """Whether an active mori.ir hook is reachable from ``jit_post_compile_hook``."""
    hook = _knobs().jit_post_compile_hook
    while hook is not None:
        if isinstance(hook, _PostCompileHook) and hook.active:
            return True
        hook = getattr(hook, "previous", None)
    return False


__all__ = [
    "DEVICE_STATE_SYMBOL",
    "EXTERN_LIB_NAME",
    "SIGNAL_ADD",
    "SIGNAL_SET",
    "WRAPPERS",
    "get_extern_libs",
    "hook_installed",
    "init_kernel",
    "install_hook",
    "thread_id",
    "uninstall_hook",
]
__all__ += list(WRAPPERS)

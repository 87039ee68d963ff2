# SPDX-License-Identifier: MIT
"""The one ABI table of the device library: every ``mori_shmem_<name>`` the bitcode exports.

Each frontend (the Triton wrappers in :mod:`mori.ir.triton`, a raw LLVM declaration generator,
your own) is generated from :data:`MORI_DEVICE_FUNCTIONS`, and a test checks every entry against
the ``define`` lines of the built bitcode, so the table and ``src/device/mori_shmem_ir.cu`` cannot
drift apart.

Conventions, as MORI's: symmetric addresses and local pointers are ``uint64``; calls that return
nothing in C++ return an ``int32`` 0 (Triton's ``extern_elementwise`` needs a result); ``qp`` is
MORI's queue-pair index, accepted with no effect (:data:`QP_NO_EFFECT` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The argument and result types the table uses, and their LLVM IR spelling.
LLVM_TYPES: Final[dict[str, str]] = {
    "int32": "i32",
    "uint32": "i32",
    "int64": "i64",
    "uint64": "i64",
    "float32": "float",
    "float64": "double",
}

#: Why the ``qp`` argument of the device functions has no effect (the mori-ir row of
#: docs/user-guide/compatibility.md; the Triton frontend logs it once when a kernel passes one).
QP_NO_EFFECT: Final = (
    "mori-shmem reaches load/store peers directly and remote PEs through one device proxy per PE, so "
    "there is no set of RDMA queue pairs per peer to pick from; the device functions ignore qp"
)

#: ``sig_op`` / ``op`` codes (mori.shmem.AmoType values; MORI's core::atomicType).
SIGNAL_SET: Final = 9
SIGNAL_ADD: Final = 10


@dataclass(frozen=True)
class DeviceFunction:
    """One exported device function."""

    name: str  #: short name; the C symbol is ``mori_shmem_<name>``
    args: tuple[tuple[str, str], ...]  #: (argument name, type) pairs
    ret: str = "int32"
    pure: bool = False  #: no side effects: a compiler may merge or drop calls

    @property
    def symbol(self) -> str:
        return f"mori_shmem_{self.name}"

    def as_dict(self) -> dict[str, object]:
        """MORI's entry shape: ``{symbol, args, ret, pure}`` with ``args`` the list of types."""
        return {"symbol": self.symbol, "args": [t for _, t in self.args], "ret": self.ret, "pure": self.pure}


_PE_QP = (("pe", "int32"), ("qp", "int32"))
_SCOPES = ("thread", "warp", "block")
_RMA_TYPES = ("uint32", "uint64", "float", "double")  # MORI's typed put/get names
_RMA_ELEMENT = {"uint32": "uint32", "uint64": "uint64", "float": "float32", "double": "float64"}
_AMO_TYPES = ("uint32", "uint64", "int64")
_WAIT_TYPES = ("uint32", "uint64", "int32", "int64")
_IMM_TYPES = {
    "int32": "int32",
    "int64": "int64",
    "uint32": "uint32",
    "uint64": "uint64",
    "int": "int32",
    "float": "float32",
    "double": "float64",
}


def _f(name: str, *args: tuple[str, str], ret: str = "int32", pure: bool = False) -> DeviceFunction:
    return DeviceFunction(name, tuple(args), ret, pure)


def _table() -> list[DeviceFunction]:
    out = [
        _f("my_pe", pure=True),
        _f("n_pes", pure=True),
        _f("ptr_p2p", ("ptr", "uint64"), ("my_pe", "int32"), ("dest_pe", "int32"), ret="uint64", pure=True),
        _f("ptr", ("dest", "uint64"), ("pe", "int32"), ret="uint64", pure=True),
    ]
    for verb in ("quiet", "fence"):
        out += [_f(f"{verb}_thread"), _f(f"{verb}_thread_pe", ("pe", "int32")), _f(f"{verb}_thread_pe_qp", *_PE_QP)]
    out += [_f("barrier_all_thread"), _f("barrier_all_block")]

    bytes_args = (("dest", "uint64"), ("src", "uint64"), ("nbytes", "uint64"), *_PE_QP)
    elems_args = (("dest", "uint64"), ("src", "uint64"), ("nelems", "uint64"), *_PE_QP)
    # put nbi, get nbi, get (blocking), and put (blocking, an addition to MORI's table)
    for verb, suffix in (("put", "_nbi"), ("get", "_nbi"), ("get", ""), ("put", "")):
        for scope in _SCOPES:
            out.append(_f(f"{verb}mem{suffix}_{scope}", *bytes_args))
            if not (verb == "put" and suffix == ""):
                out += [_f(f"{verb}_{t}{suffix}_{scope}", *elems_args) for t in _RMA_TYPES]
    signal_args = (
        ("dest", "uint64"),
        ("src", "uint64"),
        ("nbytes", "uint64"),
        ("sig_addr", "uint64"),
        ("sig_val", "uint64"),
        ("sig_op", "int32"),
        *_PE_QP,
    )
    out += [_f(f"putmem_nbi_signal_{scope}", *signal_args) for scope in _SCOPES]

    out.append(_f("put_size_imm_nbi_thread", ("dest", "uint64"), ("val_ptr", "uint64"), ("bytes", "uint64"), *_PE_QP))
    out += [_f(f"{name}_p", ("dest", "uint64"), ("val", t), *_PE_QP) for name, t in _IMM_TYPES.items()]

    out.append(
        _f(
            "atomic_size_nonfetch_thread",
            ("dest", "uint64"),
            ("val_ptr", "uint64"),
            ("bytes", "uint64"),
            ("op", "int32"),
            *_PE_QP,
        )
    )
    for t in _AMO_TYPES:
        out.append(_f(f"atomic_{t}_nonfetch_thread", ("dest", "uint64"), ("val", t), ("op", "int32"), *_PE_QP))
    for t in _AMO_TYPES:
        out.append(
            _f(
                f"atomic_{t}_fetch_thread",
                ("dest", "uint64"),
                ("val", t),
                ("compare", t),
                ("op", "int32"),
                *_PE_QP,
                ret=t,
            )
        )
    for t in _AMO_TYPES:
        out.append(_f(f"{t}_atomic_add_thread", ("dest", "uint64"), ("val", t), *_PE_QP))
        out.append(_f(f"{t}_atomic_fetch_add_thread", ("dest", "uint64"), ("val", t), *_PE_QP, ret=t))

    for t in _WAIT_TYPES:
        out.append(_f(f"{t}_wait_until_greater_than", ("addr", "uint64"), ("val", t), ret=t))
        out.append(_f(f"{t}_wait_until_equals", ("addr", "uint64"), ("val", t), ret=t))
    # Any comparison (mori.shmem.CmpOp codes), an addition to MORI's table.
    for t in _WAIT_TYPES:
        out.append(_f(f"{t}_wait_until", ("addr", "uint64"), ("cmp", "int32"), ("val", t), ret=t))
        out.append(_f(f"{t}_test", ("addr", "uint64"), ("cmp", "int32"), ("val", t)))
    return out


#: name -> function, in the order of the table.
DEVICE_FUNCTIONS: Final[dict[str, DeviceFunction]] = {f.name: f for f in _table()}

#: MORI's spelling: name -> ``{"symbol", "args", "ret", "pure"}``.
MORI_DEVICE_FUNCTIONS: Final[dict[str, dict[str, object]]] = {n: f.as_dict() for n, f in DEVICE_FUNCTIONS.items()}

#: Elements of the typed put/get names, for frontends that want the element type.
RMA_ELEMENT_TYPES: Final[dict[str, str]] = dict(_RMA_ELEMENT)


def llvm_declarations() -> str:
    """``declare`` lines for every function, to paste into hand-written LLVM IR."""
    lines = []
    for f in DEVICE_FUNCTIONS.values():
        args = ", ".join(LLVM_TYPES[t] for _, t in f.args)
        lines.append(f"declare {LLVM_TYPES[f.ret]} @{f.symbol}({args})")
    return "\n".join(lines) + "\n"

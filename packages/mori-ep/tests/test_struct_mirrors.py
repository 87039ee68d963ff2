# SPDX-License-Identifier: MIT
"""The ctypes mirrors of C structs are pinned to their C declarations, field by field: same names,
same order, same types (so the same offsets), parsed from the sources that the kernels and the
native module are built from. A field added on one side only fails here, not as a corrupt kernel
argument on a GPU."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

from mori.ep import layout
from mori.jax import region

SRC = Path(__file__).resolve().parents[1] / "src"

_C_TYPES: dict[str, type] = {
    "unsigned long long": ctypes.c_uint64,
    "uint64_t": ctypes.c_uint64,
    "int": ctypes.c_int32,
    "int32_t": ctypes.c_int32,
}


def c_struct_fields(source: str, opening: str, closing: str, constants: dict[str, int]) -> list[tuple[str, object]]:
    """(name, ctypes type) of each member of the struct between ``opening`` and ``closing``."""
    body = source.split(opening, 1)[1].split(closing, 1)[0]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.DOTALL)
    body = re.sub(r"//[^\n]*", "", body)
    fields: list[tuple[str, object]] = []
    for declaration in filter(None, (d.strip() for d in body.split(";"))):
        found = re.fullmatch(r"(.+?)\s+(\w+)(?:\[(\w+)\])?", " ".join(declaration.split()))
        assert found, f"cannot read the member declaration {declaration!r}"
        c_type, name, count = found.groups()
        ctype: object = _C_TYPES[c_type]
        if count is not None:
            ctype = ctype * (constants[count] if count in constants else int(count))  # type: ignore[operator]
        fields.append((name, ctype))
    return fields


def _mirror(structure: type[ctypes.Structure]) -> list[tuple[str, object]]:
    return [(name, ctype) for name, ctype, *_ in structure._fields_]


def _same(c_fields: list[tuple[str, object]], py_fields: list[tuple[str, object]]) -> None:
    assert [n for n, _ in py_fields] == [n for n, _ in c_fields]
    for (name, c_type), (_, py_type) in zip(c_fields, py_fields, strict=True):
        assert ctypes.sizeof(py_type) == ctypes.sizeof(c_type), name  # type: ignore[arg-type]
        assert getattr(py_type, "_type_", py_type) == getattr(c_type, "_type_", c_type), name


def test_ep_args_mirror_matches_ep_args_h() -> None:
    source = (SRC / "device" / "ep_args.h").read_text()
    _same(c_struct_fields(source, "typedef struct mori_ep_args {", "} mori_ep_args_t;", {}), _mirror(layout.EpArgs))


def test_jax_op_spec_mirror_matches_ep_ffi_cpp() -> None:
    source = (SRC / "jax" / "ep_ffi.cpp").read_text()
    max_dtype = int(re.search(r"constexpr int kMaxDtype = (\d+);", source).group(1))  # type: ignore[union-attr]
    fields = c_struct_fields(source, "struct OpSpec {", "};", {"kMaxDtype": max_dtype})
    _same(fields, _mirror(region.OpSpec))


@pytest.mark.parametrize(
    "declaration",
    ["  int rank;\n  unsigned long long extra;\n", "  unsigned long long region;\n"],
    ids=["a field added in C", "a field dropped in C"],
)
def test_a_drifted_mirror_is_caught(declaration: str) -> None:
    source = "typedef struct mori_ep_args {\n" + declaration + "} mori_ep_args_t;"
    with pytest.raises(AssertionError):
        _same(c_struct_fields(source, "typedef struct mori_ep_args {", "} mori_ep_args_t;", {}), _mirror(layout.EpArgs))

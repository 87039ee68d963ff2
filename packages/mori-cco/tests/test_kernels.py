# SPDX-License-Identifier: MIT
"""Every collective variant mori-cco registers for ``mori-jit precompile``, and the device-API
example kernel, compile for sm_90 with whichever compiler the JIT finds: CI has no GPU but catches
a kernel or a device header that does not build."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PACKAGE_ROOT

from mori.cco.kernels import collective_spec, include_dir, jit_kernels
from mori.cco.layout import ALL_REDUCE_TWO_SHOT, WIRE_FP8, WIRE_NATIVE


@pytest.fixture(autouse=True)
def _compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mori.shmem.jit.compiler import find_compiler
    from mori.shmem.jit.errors import JitError

    try:
        find_compiler(None)
    except JitError as exc:
        pytest.skip(f"no CUDA compiler here: {exc}")
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))


@pytest.mark.slow
def test_registered_variants_compile() -> None:
    specs = jit_kernels()
    assert len(specs) >= 100
    for spec in specs:
        assert spec.compile(arch="sm_90").stat().st_size > 0, spec.name


def test_one_variant_of_every_kind_and_wire_compiles() -> None:
    """The fast subset CI runs every time (the whole list is marked slow)."""
    from mori.cco.layout import ALL_GATHER, ALL_REDUCE_ONE_SHOT, ALL_TO_ALL

    variants = [
        (ALL_REDUCE_ONE_SHOT, "bfloat16", WIRE_NATIVE),
        (ALL_REDUCE_TWO_SHOT, "float32", WIRE_FP8),
        (ALL_GATHER, "uint8", WIRE_NATIVE),
        (ALL_TO_ALL, "uint8", WIRE_NATIVE),
    ]
    for kind, dtype, wire in variants:
        collective_spec(kind, dtype, "sum", wire, 8).compile(arch="sm_90")


@pytest.mark.parametrize("world", [3, 16])
def test_odd_worlds_and_other_dtypes_compile(world: int) -> None:
    for dtype, op, wire in (
        ("float16", "max", WIRE_NATIVE),
        ("int64", "sum", WIRE_NATIVE),
        ("float16", "sum", WIRE_FP8),
    ):
        collective_spec(ALL_REDUCE_TWO_SHOT, dtype, op, wire, world).compile(arch="sm_90")


@pytest.mark.parametrize("example", ["ring_put.cu", "gda_put.cu"])
def test_device_api_example_compiles(example: str) -> None:
    from mori.shmem import jit

    source = PACKAGE_ROOT / "examples" / "python" / example
    assert jit.compile(source, include_dirs=[include_dir(), jit.include_dir()], arch="sm_90").stat().st_size > 0

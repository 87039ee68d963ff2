# SPDX-License-Identifier: MIT
"""The device bitcode against the ABI table and mori-shmem's host struct; where it comes from.

Read with llvmlite's LLVM, which is newer than the clang that built the bitcode: the same
situation as Triton linking it. Needs no GPU.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

import mori.ir
from mori.ir import bitcode, clang_toolchain
from mori.ir.errors import BitcodeNotFoundError
from mori.ir.functions import DEVICE_FUNCTIONS, LLVM_TYPES, MORI_DEVICE_FUNCTIONS
from mori.testing import run_processes

llvm = pytest.importorskip("llvmlite.binding", reason="llvmlite reads the bitcode (pip install llvmlite)")

HAVE_CLANG = clang_toolchain.find_clang()[0] is not None


@pytest.fixture(scope="module")
def bitcode_path() -> Path:
    try:
        return Path(mori.ir.find_bitcode())
    except BitcodeNotFoundError as exc:
        pytest.skip(f"no device bitcode here: {exc}")


@pytest.fixture(scope="module")
def module(bitcode_path: Path):
    return llvm.parse_bitcode(bitcode_path.read_bytes())


def _signature(function) -> tuple[str, list[str]]:
    # global_value_type prints as e.g. "i32 (i64, i64, i32)"
    text = str(function.global_value_type)
    ret, args = re.fullmatch(r"(\S+) \((.*)\)", text).groups()
    return ret, [a.strip() for a in args.split(",") if a.strip()]


def test_table_has_mori_names_and_the_additions():
    assert len(MORI_DEVICE_FUNCTIONS) == len(DEVICE_FUNCTIONS) == 100
    for name in ("my_pe", "putmem_nbi_signal_block", "uint64_wait_until_equals", "atomic_int64_fetch_thread"):
        assert MORI_DEVICE_FUNCTIONS[name]["symbol"] == f"mori_shmem_{name}"
    assert MORI_DEVICE_FUNCTIONS["ptr_p2p"] == {
        "symbol": "mori_shmem_ptr_p2p",
        "args": ["uint64", "int32", "int32"],
        "ret": "uint64",
        "pure": True,
    }


def test_every_exported_function_matches_the_table(module):
    exported = {
        f.name: f
        for f in module.functions
        if not f.is_declaration and f.linkage == llvm.Linkage.external and f.name.startswith("mori_shmem_")
    }
    assert sorted(exported) == sorted(f.symbol for f in DEVICE_FUNCTIONS.values())
    for entry in DEVICE_FUNCTIONS.values():
        ret, args = _signature(exported[entry.symbol])
        assert (ret, args) == (LLVM_TYPES[entry.ret], [LLVM_TYPES[t] for _, t in entry.args]), entry.symbol


def test_nothing_else_is_exported(module):
    # Helpers are linkonce_odr or internal: only the table's functions may collide with user symbols.
    others = [
        f.name
        for f in module.functions
        if not f.is_declaration and f.linkage == llvm.Linkage.external and not f.name.startswith("mori_shmem_")
    ]
    assert others == []


def test_state_global_matches_the_host_struct(module):
    from mori.shmem.device import DeviceState

    state = module.get_global_variable("mori_shmem_device_state")
    assert state.linkage == llvm.Linkage.external
    assert "addrspace(4)" in str(state)  # __constant__
    size = llvm.create_target_data("e-i64:64-i128:128-v16:16-v32:32-n16:32:64").get_abi_size(state.global_value_type)
    assert size == ctypes.sizeof(DeviceState)


def test_bitcode_is_target_neutral(module):
    text = str(module)
    assert '"target-cpu"' not in text and '"target-features"' not in text
    assert "nvvm-reflect-ftz" not in text.split("!llvm.module.flags", 1)[-1].split("\n", 1)[0]
    assert module.triple == "nvptx64-nvidia-cuda"


def test_neutralise_drops_only_what_it_should():
    ir = (
        "define i32 @f() #0 { ret i32 0 }\n"
        'attributes #0 = { nounwind "target-cpu"="sm_70" "target-features"="+ptx42,+sm_70" "x"="y" }\n'
        "!llvm.module.flags = !{!0, !1, !2}\n"
        '!0 = !{i32 1, !"wchar_size", i32 4}\n'
        '!1 = !{i32 4, !"nvvm-reflect-ftz", i32 0}\n'
        '!2 = !{i32 7, !"frame-pointer", i32 2}\n'
    )
    out = clang_toolchain.neutralise(ir)
    assert 'attributes #0 = { nounwind "x"="y" }' in out
    assert "!llvm.module.flags = !{!0}" in out


def _build_into(rank: int, nranks: int) -> str:
    return str(bitcode.build_bitcode())  # into MORI_JIT_CACHE_DIR, the same for every process


@pytest.mark.skipif(not HAVE_CLANG, reason="no clang 17+ with NVPTX here")
def test_concurrent_builds_share_one_valid_cache_entry(tmp_path):
    paths = run_processes(_build_into, 3, env={"MORI_JIT_CACHE_DIR": str(tmp_path)}, timeout=290)
    assert len(set(paths)) == 1
    built = Path(paths[0])
    assert built.read_bytes().startswith(clang_toolchain.BITCODE_MAGIC)
    assert sorted(p.name for p in built.parent.iterdir() if not p.name.startswith(".")) == [built.name]


@pytest.mark.skipif(not HAVE_CLANG, reason="no clang 17+ with NVPTX here")
def test_both_variants_export_the_table_and_p2p_has_no_proxy(tmp_path, monkeypatch):
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    texts = {}
    for variant in ("full", "p2p"):
        module = llvm.parse_bitcode(bitcode.build_bitcode(variant=variant).read_bytes())
        names = {f.name for f in module.functions if not f.is_declaration}
        assert {f.symbol for f in DEVICE_FUNCTIONS.values()} <= names
        texts[variant] = str(module)
    # The proxy's requests (and their spins) are compiled out of p2p.
    assert len(texts["p2p"]) < 0.9 * len(texts["full"])


def test_the_variant_follows_the_job(monkeypatch):
    import mori.shmem as shmem

    assert bitcode.job_variant() == "full"  # not initialised: kernels may meet remote PEs
    monkeypatch.setattr(shmem, "shmem_is_initialized", lambda: True)
    monkeypatch.setattr(shmem, "shmem_npes", lambda: 3)
    monkeypatch.setattr(shmem, "shmem_pe_transport", lambda pe: "self" if pe == 0 else "p2p")
    assert bitcode.job_variant() == "p2p"
    monkeypatch.setattr(shmem, "shmem_pe_transport", lambda pe: "remote" if pe == 2 else "p2p")
    assert bitcode.job_variant() == "full"
    with pytest.raises(ValueError, match="variant='x'"):
        bitcode.find_bitcode("x")


def test_mori_shmem_bc_must_be_bitcode(tmp_path, monkeypatch):
    fake = tmp_path / "not.bc"
    fake.write_text("define void @f() { ret void }")
    monkeypatch.setenv("MORI_SHMEM_BC", str(fake))
    with pytest.raises(BitcodeNotFoundError, match="MORI_SHMEM_BC="):
        bitcode._locate()


def test_mori_shmem_bc_is_used_first(bitcode_path, monkeypatch):
    monkeypatch.setenv("MORI_SHMEM_BC", str(bitcode_path))
    assert bitcode._locate() == bitcode_path


def test_without_clang_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.delenv("MORI_SHMEM_BC", raising=False)
    monkeypatch.setattr(bitcode, "shipped_bitcode", lambda variant="full": None)
    monkeypatch.setenv("MORI_IR_CLANG", "/bin/false")
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    with pytest.raises(BitcodeNotFoundError, match=r"apt install clang-19.*MORI_SHMEM_BC"):
        bitcode._locate()


def test_disable_jit_never_builds(tmp_path, monkeypatch):
    monkeypatch.delenv("MORI_SHMEM_BC", raising=False)
    monkeypatch.setattr(bitcode, "shipped_bitcode", lambda variant="full": None)
    monkeypatch.setenv("MORI_DISABLE_JIT", "1")
    monkeypatch.setenv("MORI_JIT_CACHE_DIR", str(tmp_path))
    with pytest.raises(BitcodeNotFoundError):
        bitcode._locate()
    assert not any(tmp_path.rglob("*.bc"))

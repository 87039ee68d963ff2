# SPDX-License-Identifier: MIT
"""mori-ir-bench without a GPU: its Triton kernels compile for sm_90 with the bitcode linked, and the
host side (sizes, arguments, the rows of the table and the JSON, the exit without a GPU) is right.

The compile tests skip (saying why) without triton or the bitcode; the others need neither.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import math
import re
from pathlib import Path

import pytest

import mori.shmem
from mori.ir import bench
from mori.shmem.bench import gpu as bench_gpu

MIB = 1 << 20


# ----------------------------------------------------------------------------- sizes and arguments


def test_the_default_sizes_are_powers_of_4_from_8_bytes_to_256_mib():
    sizes = bench.parse_sizes(bench.DEFAULT_SIZES)
    assert sizes == [8 * 4**k for k in range(13)] + [256 * MIB]
    assert sizes[-2] == bench_gpu.CEILING_FROM_BYTES  # two sizes get a ratio to the copy ceiling


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("4K,1M", [4096, MIB]),
        (" 1M , 4K ,4K", [4096, MIB]),
        ("1K..4K,8", [8, 1024, 4096]),
        ("1K..5K", [1024, 4096, 5120]),  # the top of a range is always measured
        ("3", [3]),
        ("16..16", [16]),
    ],
)
def test_sizes_take_lists_and_ranges(text, want):
    assert bench.parse_sizes(text) == want


@pytest.mark.parametrize("text", ["0", "abc", "4K..1K", "0..4K", "", ",", "1K..", "-8"])
def test_bad_sizes_are_refused_with_the_item_named(text):
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_sizes(text)


def test_argument_defaults():
    args = bench.parse_args([])
    assert args.pes == 2 and args.pingpongs == 10000 and args.json == Path("mori-ir-bench.json")
    assert args.sizes == bench.parse_sizes(bench.DEFAULT_SIZES)
    args = bench.parse_args(["--pes", "4", "--sizes", "1M", "--json", "x.json", "--pingpongs", "7"])
    assert (args.pes, args.sizes, args.json, args.pingpongs) == (4, [MIB], Path("x.json"), 7)


@pytest.mark.parametrize("argv", [["--pes", "1"], ["--sizes", "1M..4K"], ["--pingpongs", "0"]])
def test_bad_arguments_exit_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    assert "mori-ir-bench" in capsys.readouterr().err


def test_human_size():
    assert [bench.human_size(s) for s in (8, 1000, 4096, 3 * MIB, 256 * MIB, 1 << 30, 1536)] == [
        "8", "1000", "4K", "3M", "256M", "1G", "1536",
    ]  # fmt: skip


# ----------------------------------------------------------------------------- rows and report


SIZES = [8, 4096, 256 * MIB]
SM_COUNT = 132


def seconds_of(variant: str, size: int, rank: int) -> float:
    """Made-up seconds per put: triton 10% slower than C++, the copy twice as fast, PE 1 slower."""
    base = {"cxx": 1.0, "triton": 1.1, "copy": 0.5}[variant]
    return base * (1 + rank) * (size + 1000) * 1e-9


def fake_pe(rank: int) -> dict:
    """What pe_program returns, with made-up timings."""
    rows = []
    for size in SIZES:
        geo = bench_gpu.geometry(bench.SCOPE, size, SM_COUNT)
        for variant in bench.VARIANTS:
            reps = 1 if variant == "copy" else bench_gpu.reps(size)
            rows.append(
                bench.pe_row(variant, size, seconds_of(variant, size, rank), bench_gpu.iterations(size), reps, geo)
            )
    latency = {"cxx": 1.0e-6, "triton": 1.25e-6} if rank == 0 else {"cxx": math.nan, "triton": math.nan}
    return {"rank": rank, "gpu": "NVIDIA H200", "sm_count": SM_COUNT, "rows": rows, "latency_s": latency,
            "versions": {"torch": "2.11", "triton": "3.6.0", "cuda": "13.0"}}  # fmt: skip


def test_rows_aggregate_over_pes_and_compare_with_cxx_and_the_copy():
    per_pe = [fake_pe(1), fake_pe(0)]  # in any order: rows list PEs by rank
    rows = bench.summarize(per_pe)
    assert [r["size_bytes"] for r in rows] == SIZES
    for row in rows:
        size = row["size_bytes"]
        assert tuple(row) == bench.ROW_KEYS
        geo = bench_gpu.geometry("block", size, SM_COUNT)
        assert (row["blocks"], row["threads"], row["workers"], row["slice_bytes"]) == (
            geo.blocks, geo.threads, geo.workers, geo.slice,
        )  # fmt: skip
        assert row["reps"] == bench_gpu.reps(size) and row["iterations"] == bench_gpu.iterations(size)
        for variant in bench.VARIANTS:
            per = [size / seconds_of(variant, size, rank) / 1e9 for rank in (0, 1)]
            assert row[f"{variant}_GBps_per_pe"] == pytest.approx(per)
            assert row[f"{variant}_GBps"] == pytest.approx(sum(per))
            assert row[f"{variant}_us"] == pytest.approx(1.5 * seconds_of(variant, size, 0) * 1e6)  # median of 2
        assert row["triton_pct_of_cxx"] == pytest.approx(100 / 1.1)
        if size >= bench_gpu.CEILING_FROM_BYTES:
            assert row["triton_pct_of_copy"] == pytest.approx(100 * 0.5 / 1.1)
            assert row["cxx_pct_of_copy"] == pytest.approx(50)
        else:
            assert row["triton_pct_of_copy"] is None and row["cxx_pct_of_copy"] is None


def test_report_table_and_json_document():
    per_pe = [fake_pe(0), fake_pe(1)]
    text, document = bench.report(per_pe, rounds=500, host="gpu-box")
    document = json.loads(json.dumps(document))  # what --json writes, read back
    assert document["benchmark"] == "mori-ir-bench" and document["backend"] == "cuda" and document["scope"] == "block"
    assert (document["host"], document["gpu"], document["pes"], document["sm_count"]) == (
        "gpu-box",
        "NVIDIA H200",
        2,
        132,
    )
    assert document["versions"]["triton"] == "3.6.0"
    assert document["rows"] == json.loads(json.dumps(bench.summarize(per_pe)))
    latency = document["latency"]
    assert latency["bytes"] == 8 and latency["rounds"] == 500
    assert latency["triton_us"] == pytest.approx(1.25) and latency["cxx_us"] == pytest.approx(1.0)
    assert latency["triton_pct_of_cxx"] == pytest.approx(125)

    lines = text.splitlines()
    assert lines[0].startswith("mori-ir-bench: 2 PEs on NVIDIA H200 (gpu-box)")
    assert lines[1].split()[:4] == ["size", "blocks", "reps", "triton"]
    body = lines[2 : 2 + len(SIZES)]
    assert [line.split()[0] for line in body] == ["8", "4K", "256M"]
    assert re.search(r"\b91%\s+-\s+-\s", body[0]), body[0]  # no ratio to the copy below 128M
    assert re.search(r"\b91%\s+45%\s+50%", body[2]), body[2]
    assert "triton 1.25 us, C++ 1.00 us (triton time 125% of C++)" in lines[-1]
    assert "over 500 rounds" in lines[-1]


def test_without_a_gpu_main_says_so_and_fails(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(mori.shmem, "shmem_cuda_available", lambda: False)
    out = tmp_path / "result.json"
    with caplog.at_level(logging.ERROR, logger="mori.ir.bench"):
        assert bench.main(["--json", str(out)]) == 1
    assert "needs an NVIDIA GPU" in caplog.text and "mori-shmem-bench --backend cpu" in caplog.text
    assert not out.exists()


def test_the_console_script_is_declared():
    # The installed wheel's entry points (tomllib, to read pyproject.toml, is not in Python 3.10).
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="mori-ir-bench")
    assert script.value == "mori.ir.bench:main"


# ----------------------------------------------------------------------------- the Triton kernels


@pytest.fixture(scope="module")
def compiled(bitcode_path, tmp_path_factory):
    """Every bench kernel as the bench launches it, compiled for sm_90 in a fresh cache (so ptxas runs)."""
    triton = pytest.importorskip("triton", reason="the bench kernels need triton: pip install triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from mori.ir import bench_kernels

    out = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        for kernel, signature, num_warps in bench_kernels.COMPILE_SPECS:
            options = {"extern_libs": {"mori_shmem": bitcode_path}, "num_warps": num_warps}
            binary = triton.compile(ASTSource(kernel, signature, {}), target=GPUTarget("cuda", 90, 32), options=options)
            out.append((kernel.fn.__name__, signature, num_warps, binary))
    return out


def extern_symbols(ttir: str) -> list[str]:
    return re.findall(r'symbol = "(mori_shmem_\w+)"', ttir)


def test_the_kernels_compile_to_cubins_with_the_bitcode_linked(compiled):
    assert [name for name, *_ in compiled] == ["put_block_kernel", "put_block_kernel", "pingpong_kernel"]
    for name, signature, num_warps, binary in compiled:
        ptx = binary.asm["ptx"]
        assert ".extern" not in ptx, f"{name} {signature}: unresolved declarations"
        assert re.search(r"\.visible \.const \.align \d+ \.b8 mori_shmem_device_state\[", ptx), name
        assert binary.asm["cubin"][:4] == b"\x7fELF", name
        assert re.search(rf"\.reqntid {32 * num_warps}\b", ptx), f"{name}: not {num_warps} warps"


def test_the_put_kernel_matches_the_cxx_one(compiled):
    """putmem_nbi_block then quiet_thread, per rep, by the whole program (no thread guard); the
    block size of mori_bench_put; 64-bit offsets whatever the size's type."""
    from mori.ir import bench_kernels

    assert bench_kernels.PUT_NUM_WARPS * 32 == bench_gpu.THREADS_PER_BLOCK
    for name, signature, _, binary in compiled:
        if name != "put_block_kernel":
            continue
        ttir = binary.asm["ttir"]
        assert extern_symbols(ttir) == ["mori_shmem_putmem_nbi_block", "mori_shmem_quiet_thread"]
        assert "%tid.x" not in ttir, "the block-scope put must run on every thread"
        assert re.search(r"scf\.for .* to %reps ", ttir), "the puts are not repeated reps times"
        assert "arith.muli" in ttir and re.search(r"tt\.addptr %dest\w*, %\w+ : !tt\.ptr<i8>, i64", ttir), signature


def test_the_pingpong_kernel_runs_on_thread_0_and_reads_the_timer_twice(compiled):
    (binary,) = [b for name, *_, b in compiled if name == "pingpong_kernel"]
    ttir = binary.asm["ttir"]
    assert extern_symbols(ttir) == [
        "mori_shmem_uint64_wait_until_greater_than",
        "mori_shmem_putmem_nbi_signal_thread",
        "mori_shmem_uint64_wait_until_greater_than",
    ]
    assert 'symbol = "mori_shmem_putmem_nbi_signal_thread"' in ttir
    assert re.search(r"%c9_i32 = arith\.constant 9 : i32", ttir), "SIGNAL_SET (9) is not the signal op"
    guard = ttir.index("%tid.x")
    timers = [m.start() for m in re.finditer(r'"mov\.u64 \$0, %globaltimer;".*pure = false', ttir)]
    assert len(timers) == 2 and all(t > guard for t in timers), "two non-pure timer reads under the thread-0 guard"
    assert ttir.index("mori_shmem_") > guard

# SPDX-License-Identifier: MIT
"""What the device put-with-signal latency is made of (developer probe, GPU machine, under MPS).

Runs the ping-pong variants of latency_variants.cu between 2 PEs on the cuda backend, in
alternating rounds so that every variant sees the same spells of the machine, and prints the
median half round trip of each. `mori-shmem-bench` measures variant 0 beside NVSHMEM.

    python3 ci/gpu/shmem_latency_probe.py [--rounds 5] [--pingpongs 10000]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from pathlib import Path
from typing import Any

VARIANTS = {
    0: "library (ShmemWaitUntil + ShmemPutMemNbiSignalThread)",
    1: "bare: acquire poll, 8-byte store, release store",
    2: "relaxed polls, then fence.acq_rel.sys",
    3: "signal as fence.acq_rel.sys + relaxed store",
    4: "volatile polls, then fence.acq_rel.sys",
    5: "bare at .gpu scope",
    6: "library put-with-signal, bare wait",
    7: "bare put-with-signal, library wait",
    8: "bare, peer addresses translated per put",
    9: "bare, data by the out-of-line CopyBytes",
}
SOURCE = Path(__file__).with_name("latency_variants.cu")


def pe_program(rank: int, nranks: int, uid: bytes, rounds: int, pingpongs: int) -> dict[int, list[float]]:
    import torch

    import mori.shmem as shmem
    from mori.shmem import jit

    shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)
    torch.cuda.set_device(shmem.shmem_cuda_device())
    state = shmem.shmem_device_state()
    module = jit.load_module(SOURCE, name="latency_variants", include_dirs=[jit.include_dir()])
    buf = shmem.shmem_malloc(64)
    stream = torch.cuda.current_stream()
    elapsed = torch.zeros(1, dtype=torch.int64, device="cuda")
    seen: dict[int, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(rounds):
        for variant in VARIANTS:
            signal = shmem.shmem_malloc(8)  # a fresh word: every run counts its rounds from 1
            shmem.shmem_barrier_all()
            args: list[Any] = [state, ctypes.c_uint64(buf), ctypes.c_uint64(signal), ctypes.c_uint64(8),
                               ctypes.c_int32(1 - rank), ctypes.c_int32(pingpongs), ctypes.c_int32(int(rank == 0)),
                               elapsed]  # fmt: skip
            module.function(f"latency_variant_{variant}").launch(1, 32, args, stream=stream)
            stream.synchronize()
            seen[variant].append(float(elapsed.item()) / (2 * pingpongs) / 1e3)
            shmem.shmem_barrier_all()
            shmem.shmem_free(signal)
    shmem.shmem_check_device_error()
    shmem.shmem_finalize()
    return seen


def main() -> None:
    from mori.shmem.testing import run_pes

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pingpongs", type=int, default=10000)
    args = parser.parse_args()
    env = {"MORI_SHMEM_BACKEND": "cuda", "MORI_SHMEM_HEAP_SIZE": "64M"}
    seen = run_pes(pe_program, 2, args.rounds, args.pingpongs, env=env, timeout=600)[0]
    rows = {v: {"variant": VARIANTS[v], "median_us": round(statistics.median(xs), 3), "runs_us": xs}
            for v, xs in seen.items()}  # fmt: skip
    for v, row in rows.items():
        print(f"{v}  {row['median_us']:.3f} us  {row['variant']}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: MIT
"""Does work on one CUDA stream wait behind a kernel spinning on another (hardware queue sharing)?

On the GPU machine (cupy is there), for a few CUDA_DEVICE_MAX_CONNECTIONS values, with and
without MPS:
    CUDA_DEVICE_MAX_CONNECTIONS=8 python3 ci/gpu/queue_probe.py --streams 16
For each of `--streams` streams in turn, a kernel spins for --spin-ms on it with a second kernel
queued behind it (so the head of that stream's queue waits), and a small copy and a small kernel
go to a stream of their own; a line per kind lists which of them waited for the spinner (1) and
which ran at once (0). docs/user-guide/shmem.md ("CUDA backend notes") has what the H200 showed.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import cupy as cp

logger = logging.getLogger("queue_probe")

SPIN = r"""extern "C" __global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}"""
TOUCH = r"""extern "C" __global__ void touch(int* p) { p[0] += 1; }"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=16, help="streams that take a turn holding the spinner")
    parser.add_argument("--spin-ms", type=float, default=400.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    spin = cp.RawKernel(SPIN, "spin")
    touch = cp.RawKernel(TOUCH, "touch")
    cycles = int(cp.cuda.runtime.getDeviceProperties(0)["clockRate"] * 1000 * args.spin_ms / 1000)
    word = cp.zeros(16, dtype=cp.int32)
    ones = cp.ones(16, dtype=cp.int32)
    touch((1,), (1,), (word,))  # compile and load both kernels before timing anything
    spin((1,), (1,), (cp.int64(1),))
    cp.cuda.Device(0).synchronize()

    def waited(spinning: cp.cuda.Stream, probe: cp.cuda.Stream, kind: str) -> int:
        spin((1,), (1,), (cp.int64(cycles),), stream=spinning)
        touch((1,), (1,), (word,), stream=spinning)
        time.sleep(0.05)
        begin = time.perf_counter()
        if kind == "copy":
            cp.cuda.runtime.memcpyAsync(word.data.ptr, ones.data.ptr, 64, 3, probe.ptr)
        else:
            touch((1,), (1,), (word,), stream=probe)
        probe.synchronize()
        seconds = time.perf_counter() - begin
        spinning.synchronize()
        return int(seconds * 1000 > args.spin_ms / 3)

    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(args.streams)]
    probe = cp.cuda.Stream(non_blocking=True)
    connections = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "default")
    for kind in ("copy", "kernel"):
        held = [waited(s, probe, kind) for s in streams]
        logger.info("connections=%s %s behind each of %d spinning streams: %s", connections, kind, len(held), held)


if __name__ == "__main__":
    main()

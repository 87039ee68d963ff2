# SPDX-License-Identifier: MIT
"""How long does the host take to tell a running kernel something? (issue 32's signal path)

On the GPU machine (cupy is there), with and without MPS:
    python3 ci/gpu/doorbell_probe.py --rounds 2000
A kernel of one thread waits for a doorbell word to reach i, then stores i into pinned host
memory, for i = 1..rounds; the host rings the doorbell and spins until the answer arrives. The
round trip is timed for each way of ringing that mori-shmem uses or could use:
  stream-write: cuStreamWriteValue64 of a GPU word on a stream of its own (the device proxy's
                `done`, the served put-with-signal's signal);
  copy:         an 8-byte cuMemcpyHtoDAsync of a GPU word from pinned memory;
  pinned:       a plain CPU store into pinned host memory that the kernel polls across PCIe.
Each line gives the p50 / p90 / p99 round trip in microseconds.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import time

import cupy as cp
import numpy as np

logger = logging.getLogger("doorbell_probe")

PONG = r"""extern "C" __global__ void pong(volatile unsigned long long* bell, volatile unsigned long long* answer,
                                      long long rounds) {
  for (long long i = 1; i <= rounds; ++i) {
    while (*bell < (unsigned long long)i) {}
    __threadfence_system();
    *answer = i;
  }
}"""


def pinned_words(n: int) -> tuple[np.ndarray, cp.cuda.PinnedMemoryPointer]:
    memory = cp.cuda.alloc_pinned_memory(8 * n)
    words = np.frombuffer(memory, dtype=np.uint64, count=n)
    words[:] = 0
    return words, memory


def measure(way: str, rounds: int) -> np.ndarray:
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuStreamWriteValue64_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
    cuda.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    answer, answer_memory = pinned_words(1)
    host_bell, host_bell_memory = pinned_words(1)
    staged, staged_memory = pinned_words(rounds + 1)
    staged[:] = np.arange(rounds + 1, dtype=np.uint64)
    device_bell = cp.zeros(1, dtype=cp.uint64)
    bell_ptr = host_bell.ctypes.data if way == "pinned" else device_bell.data.ptr
    kernel_stream = cp.cuda.Stream(non_blocking=True)
    ring_stream = cp.cuda.Stream(non_blocking=True)
    pong = cp.RawKernel(PONG, "pong")
    with kernel_stream:
        pong((1,), (1,), (ctypes.c_uint64(bell_ptr), ctypes.c_uint64(answer.ctypes.data), ctypes.c_longlong(rounds)))
    times = np.empty(rounds, dtype=np.float64)
    for i in range(1, rounds + 1):
        t0 = time.perf_counter_ns()
        if way == "stream-write":
            rc = cuda.cuStreamWriteValue64_v2(ring_stream.ptr, device_bell.data.ptr, i, 0)
        elif way == "copy":
            rc = cuda.cuMemcpyHtoDAsync_v2(device_bell.data.ptr, staged.ctypes.data + 8 * i, 8, ring_stream.ptr)
        else:
            host_bell[0] = i
            rc = 0
        if rc != 0:
            raise RuntimeError(f"{way}: CUDA error {rc}")
        while answer[0] < i:
            pass
        times[i - 1] = (time.perf_counter_ns() - t0) / 1000.0
    kernel_stream.synchronize()
    del answer_memory, host_bell_memory, staged_memory
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for way in ("stream-write", "copy", "pinned"):
        times = measure(way, args.rounds)[100:]  # the first rounds warm the path up
        p50, p90, p99 = np.percentile(times, [50, 90, 99])
        logger.info("%-13s round trip p50 %6.1f us  p90 %6.1f us  p99 %6.1f us", way, p50, p90, p99)


if __name__ == "__main__":
    main()

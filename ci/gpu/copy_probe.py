# SPDX-License-Identifier: MIT
"""Do GPU threads polling a word slow down the device proxy's staging copies (issue 32)?

On the GPU machine (cupy is there):
    python3 ci/gpu/copy_probe.py
The device proxy copies each request's bytes between the GPU heap and pinned host staging
(cuMemcpyAsync + cuStreamSynchronize on a stream of its own) while the kernels that posted the
requests wait, each a thread polling the proxy's words in pinned host memory with system-scope
acquire loads. This times a 32 KiB copy each way (the bench's block-scope request) on its own
stream while nothing runs, then while N blocks poll a word in device memory or in mapped pinned
host memory, with a nap of 0, 256 or 4096 ns between looks. One line per case: the copies' median
and 90th percentile in microseconds.

Under MPS the proxy's copies share the GPU with the other PE's kernel, a second process. To time
that, start a process that only keeps blocks polling device memory, then the probe with no pollers
of its own:
    python3 ci/gpu/copy_probe.py --hold 15 & sleep 3; python3 ci/gpu/copy_probe.py --blocks ""
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import cupy as cp

logger = logging.getLogger("copy_probe")

POLL = r"""extern "C" __global__ void poll(const unsigned long long* word, long long cycles, int nap) {
  if (threadIdx.x != 0) return;
  long long t0 = clock64();
  unsigned long long seen = 0;
  while (clock64() - t0 < cycles) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
    seen += v;
    if (nap > 0) __nanosleep(nap);
  }
  if (seen == 0x5eed) ((unsigned long long*)word)[1] = seen;  // keeps the loads
}"""

_HOST_ALLOC_PORTABLE_MAPPED = 1 | 2
_H2D, _D2H = 1, 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=32 << 10)
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--blocks", default="32,128,264", help="poller block counts; empty for none")
    parser.add_argument("--hold", type=float, default=0.0, help="only keep 264 blocks polling for this many seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    poll = cp.RawKernel(POLL, "poll", options=("-arch=sm_90",))
    rt = cp.cuda.runtime
    staging = rt.hostAlloc(args.bytes, _HOST_ALLOC_PORTABLE_MAPPED)
    host_word = rt.hostAlloc(64, _HOST_ALLOC_PORTABLE_MAPPED)  # one address for host and GPU (UVA)
    device_word = cp.zeros(8, dtype=cp.uint64)
    heap = cp.ones(args.bytes, dtype=cp.uint8)
    copier = cp.cuda.Stream(non_blocking=True)
    spinner = cp.cuda.Stream(non_blocking=True)
    clock_khz = rt.getDeviceProperties(0)["clockRate"]
    poll((1,), (32,), (device_word, cp.int64(1), cp.int32(0)), stream=spinner)
    spinner.synchronize()
    if args.hold > 0:
        cycles = int(clock_khz * 1000 * args.hold)
        poll((264,), (32,), (device_word, cp.int64(cycles), cp.int32(0)), stream=spinner)
        logger.info("holding 264 polling blocks for %.0f s", args.hold)
        spinner.synchronize()
        return

    def copies(kind: int) -> list[float]:
        out = []
        for _ in range(args.copies):
            begin = time.perf_counter()
            if kind == _D2H:
                rt.memcpyAsync(staging, heap.data.ptr, args.bytes, _D2H, copier.ptr)
            else:
                rt.memcpyAsync(heap.data.ptr, staging, args.bytes, _H2D, copier.ptr)
            copier.synchronize()
            out.append((time.perf_counter() - begin) * 1e6)
        return out

    def case(label: str, word: int | None, blocks: int, nap: int) -> None:
        if word is not None:
            cycles = int(clock_khz * 1000 * 2.0)  # 2 s: longer than the copies take
            poll((blocks,), (32,), (cp.uint64(word), cp.int64(cycles), cp.int32(nap)), stream=spinner)
            time.sleep(0.02)
        out = []
        for kind, name in ((_D2H, "GPU->host"), (_H2D, "host->GPU")):
            t = sorted(copies(kind))
            out.append(f"{name} p50 {statistics.median(t):8.1f} us p90 {t[int(len(t) * 0.9)]:8.1f} us")
        busy = "running" if word is not None and not spinner.done else "done"
        logger.info("%-40s %s  (pollers %s)", label, "   ".join(out), busy)
        spinner.synchronize()

    logger.info("%d-byte copies on their own stream, %d each way", args.bytes, args.copies)
    case("nothing running", None, 0, 0)
    for blocks in (int(b) for b in args.blocks.split(",") if b):
        case(f"{blocks} pollers of device memory, nap 0", device_word.data.ptr, blocks, 0)
        for nap in (0, 256, 4096):
            case(f"{blocks} pollers of host memory, nap {nap}", host_word, blocks, nap)
    rt.freeHost(staging)
    rt.freeHost(host_word)


if __name__ == "__main__":
    main()

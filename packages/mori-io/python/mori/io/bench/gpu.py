# SPDX-License-Identifier: MIT
"""GPU modes of mori-io-bench: the engine between segments in GPU memory (VRAM) and/or host
memory (DRAM), over the P2P backend (``--backend p2p``, BackendType.XGMI) or TCP with pinned
staging, against a device-to-device copy ceiling measured in the same run (cuMemcpyDtoDAsync of
the same bytes on one stream, timed with CUDA events). torch allocates the GPU buffers."""

from __future__ import annotations

import hashlib
import statistics
from multiprocessing.connection import Connection
from typing import Any

from mori.io.bench.memory import Buffer
from mori.io.bench.runner import Point
from mori.io.bench.transports import SessionTransport, _Peer


class Segment:
    """``size`` bytes of DRAM (page-aligned host memory) or VRAM (a torch uint8 tensor on ``device``)."""

    def __init__(self, seg_type: str, size: int, device: int, fill: int) -> None:
        self.seg_type = seg_type
        self.size = size
        self.device = device
        if seg_type == "VRAM":
            import torch

            self.tensor = torch.full((size,), fill, dtype=torch.uint8, device=f"cuda:{device}")
            self.address = self.tensor.data_ptr()
        else:
            self.host = Buffer(size, fill=fill)
            self.address = self.host.address

    def register(self, engine: Any) -> Any:
        from mori.io import MemoryLocationType

        if self.seg_type == "VRAM":
            return engine.register_memory(self.address, self.size, self.device, MemoryLocationType.GPU)
        return engine.register_memory(self.address, self.size, -1, MemoryLocationType.CPU)

    def load(self, data: bytes) -> None:
        if self.seg_type == "VRAM":
            import torch

            self.tensor[: len(data)].copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            torch.cuda.synchronize(self.device)
        else:
            self.host.view[: len(data)] = data

    def digest(self, offset: int, n: int) -> str:
        if self.seg_type == "VRAM":
            return hashlib.sha256(self.tensor[offset : offset + n].cpu().numpy().tobytes()).hexdigest()
        return hashlib.sha256(self.host.view[offset : offset + n]).hexdigest()


def _make_engine(key: str, p2p: bool, num_data_conns: int) -> Any:
    from mori.io import BackendType, IOEngine, IOEngineConfig, TcpBackendConfig

    engine = IOEngine(key, IOEngineConfig())
    engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=num_data_conns))
    if p2p:
        engine.create_backend(BackendType.XGMI)
    return engine


def gpu_target(conn: Connection, size: int, num_data_conns: int, seg_type: str, device: int, p2p: bool) -> None:
    """The target process: an engine owning one segment; answers ("digest", off, n) and ("exit",)."""
    segment = Segment(seg_type, size, device, fill=0x5A)
    engine = _make_engine("bench-gpu-target", p2p, num_data_conns)
    mem = segment.register(engine)
    conn.send((engine.get_engine_desc().pack(), mem.pack()))
    while True:
        cmd = conn.recv()
        if cmd[0] == "digest":
            conn.send(segment.digest(cmd[1], cmd[2]))
        else:
            conn.send(True)
            break
    engine.shutdown()


class MoriGpuTransport(SessionTransport):
    """mori-io between two processes with GPU and/or host segments (sessions + batch calls)."""

    def __init__(self, size: int, num_data_conns: int, p2p: bool, initiator_seg: str, target_seg: str,
                 device: int, target_device: int) -> None:  # fmt: skip
        from mori.io import EngineDesc, MemoryDesc, StatusCode

        self.name = f"mori-io-{'p2p' if p2p else 'tcp'} {initiator_seg}->{target_seg}"
        self._success = StatusCode.SUCCESS
        self.peer = _Peer(gpu_target, size, num_data_conns, target_seg, target_device, p2p)
        engine_desc, mem_desc = self.peer.hello
        self.engine = _make_engine("bench-gpu-initiator", p2p, num_data_conns)
        self.engine.register_remote_engine(EngineDesc.unpack(engine_desc))
        self.segment = Segment(initiator_seg, size, device, fill=0)
        self.local = self.segment.register(self.engine)
        self.remote = MemoryDesc.unpack(mem_desc)
        self.session = self.engine.create_session(self.local, self.remote)

    def _local_bytes(self) -> int:
        return self.segment.size

    def _fill(self, pattern: bytes) -> None:
        self.segment.load(pattern)


class DeviceCopyCeiling:
    """cuMemcpyDtoDAsync of each point's bytes (block x batch, one copy) between two buffers of one
    GPU, bytes counted once: timed with CUDA events (``d2d-ceiling``: what the copy engine takes),
    or ``host_timed`` from the call until cuStreamSynchronize returns (``d2d-host``: the best any
    host-initiated transfer that waits for its completion can do, which is what the engine's
    post-then-wait loop measures)."""

    def __init__(self, size: int, device: int, host_timed: bool = False) -> None:
        import torch

        self.name = "d2d-host" if host_timed else "d2d-ceiling"
        self.host_timed = host_timed
        self.device = device
        self.src = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
        self.dst = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")

    def point(self, op: str, block: int, batch: int, iters: int, warmup: int) -> Point:
        from mori.io._native import _C

        n = block * batch
        seconds = _C.time_device_copies(
            self.device, self.dst.data_ptr(), self.src.data_ptr(), n, warmup, iters, self.host_timed
        )
        median = statistics.median(seconds)
        ordered = sorted(seconds)
        return Point(
            transport=self.name, op=op, block_size=block, batch_size=batch, threads=1, iterations=iters,
            seconds=sum(seconds), gbps=n / 1e9 / median, lat_us=statistics.fmean(seconds) * 1e6,
            lat_p50_us=median * 1e6, lat_p99_us=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6,
            lat_per_desc_us=sum(seconds) * 1e6 / (iters * batch),
        )  # fmt: skip

    def close(self) -> None:
        del self.src, self.dst

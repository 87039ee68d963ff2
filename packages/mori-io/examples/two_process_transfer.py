# SPDX-License-Identifier: MIT
"""Two mori.io engines in two processes: descriptors go over a pipe, bytes over mori.io.

The target process registers a buffer and sends its packed EngineDesc and MemoryDesc through a
multiprocessing pipe (any side channel works: a socket, ZMQ, torch.distributed). The initiator
registers the target, opens a session on the (local, remote) memory pair, writes a batch of
slices into the target and reads them back, polling each TransferStatus, then asks the target
whether the write landed (pop_inbound_transfer_status) and whether its bytes are right.

Run: python two_process_transfer.py   (exit status 0 and "OK" when every check passed)
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from multiprocessing.connection import Connection

import numpy as np

from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    StatusCode,
    TransferStatus,
)

SIZE = 1 << 20
SLICES = 16
SLICE = 4096


def plan() -> tuple[list[int], list[int], list[int]]:
    """Every other 4 KiB slice of the initiator's buffer into the target's first slices."""
    local = [2 * i * SLICE for i in range(SLICES)]
    remote = [i * SLICE for i in range(SLICES)]
    return local, remote, [SLICE] * SLICES


def poll(status: TransferStatus, what: str, timeout_s: float = 30.0) -> None:
    """Polls a status the way a serving loop would (no blocking wait), then checks it."""
    deadline = time.monotonic() + timeout_s
    while status.InProgress() and time.monotonic() < deadline:
        time.sleep(0.001)
    if not status.Succeeded():
        raise SystemExit(f"{what} failed: {status.Code().name} {status.Message()}")


def target(pipe: Connection) -> None:
    engine = IOEngine("example-target", IOEngineConfig(host="127.0.0.1", port=0))
    engine.create_backend(BackendType.TCP)
    buf = np.zeros(SIZE, np.uint8)
    mem = engine.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    pipe.send((engine.get_engine_desc().pack(), mem.pack()))
    initiator_key, uid, expected = pipe.recv()  # sent once the initiator's transfers finished
    inbound = engine.pop_inbound_transfer_status(initiator_key, uid)
    landed = inbound is not None and inbound.Succeeded()
    pipe.send((landed, bool(np.array_equal(buf[: len(expected)], np.frombuffer(expected, np.uint8)))))
    engine.shutdown()


def initiator(pipe: Connection) -> int:
    engine_bytes, mem_bytes = pipe.recv()
    remote_engine, remote_mem = EngineDesc.unpack(engine_bytes), MemoryDesc.unpack(mem_bytes)
    engine = IOEngine("example-initiator", IOEngineConfig(host="127.0.0.1", port=0))
    engine.create_backend(BackendType.TCP)
    engine.register_remote_engine(remote_engine)
    src = np.random.default_rng(0).integers(0, 256, size=SIZE, dtype=np.uint8)
    back = np.zeros(SIZE, np.uint8)
    src_mem = engine.register_memory(src.ctypes.data, src.nbytes, -1, MemoryLocationType.CPU)
    back_mem = engine.register_memory(back.ctypes.data, back.nbytes, -1, MemoryLocationType.CPU)

    local, remote, sizes = plan()
    writer = engine.create_session(src_mem, remote_mem)
    reader = engine.create_session(back_mem, remote_mem)
    assert writer is not None and reader is not None
    write_uid = writer.allocate_transfer_uid()
    poll(writer.batch_write(local, remote, sizes, write_uid), "batch write")
    poll(reader.batch_read(remote, remote, sizes, reader.allocate_transfer_uid()), "batch read")

    expected = np.concatenate([src[off : off + SLICE] for off in local])
    read_ok = np.array_equal(back[: SLICES * SLICE], expected)
    pipe.send((engine.get_engine_desc().key, write_uid, expected.tobytes()))
    landed, target_ok = pipe.recv()
    status = IOEngine.wait_all([], timeout_ms=0)  # an empty list succeeds at once
    engine.shutdown()
    print(f"read back {'matches' if read_ok else 'DIFFERS'}; target saw the write land: {landed}; "
          f"target bytes {'match' if target_ok else 'DIFFER'}")  # fmt: skip
    return 0 if read_ok and landed and target_ok and status == StatusCode.SUCCESS else 1


def main() -> int:
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=target, args=(theirs,))
    proc.start()
    try:
        code = initiator(mine)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    if code == 0 and proc.exitcode == 0:
        print("OK")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())

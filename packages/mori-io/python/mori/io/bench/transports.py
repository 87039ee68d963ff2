# SPDX-License-Identifier: MIT
"""Initiator sides of the measured transports. Each starts its target process, and for a
(block, batch, thread) gives the callable that performs one iteration: one batch of ``batch``
descriptors of ``block`` bytes, posted and waited for."""

from __future__ import annotations

import array
import contextlib
import importlib
import logging
import multiprocessing as mp
import select
import socket
import struct
from abc import ABC, abstractmethod
from multiprocessing.connection import Connection
from typing import Any

from mori.io.bench import peers
from mori.io.bench.memory import Buffer
from mori.io.bench.runner import Iteration

log = logging.getLogger(__name__)
START_TIMEOUT_S = 60


class Layout:
    """Where descriptor i of thread t lives: the same offset on both sides; ``gap`` bytes between
    descriptors keep them from merging into one contiguous run (as MORI's benchmark does)."""

    def __init__(self, block: int, batch: int, gap: int) -> None:
        self.block, self.batch, self.stride = block, batch, block + gap

    def span(self) -> int:
        return self.batch * self.stride

    def offsets(self, thread: int) -> list[int]:
        base = thread * self.span()
        return [base + i * self.stride for i in range(self.batch)]


def buffer_bytes(max_block: int, max_batch: int, threads: int, gap: int) -> int:
    return Layout(max_block, max_batch, gap).span() * threads


class _Peer:
    def __init__(self, target: Any, *args: Any) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        if not self.conn.poll(START_TIMEOUT_S):
            self.close()
            raise TimeoutError(f"{target.__name__} did not start within {START_TIMEOUT_S} s")
        self.hello = self.conn.recv()

    def ask(self, *cmd: Any) -> Any:
        self.conn.send(cmd)
        return self.conn.recv()

    def cpu(self) -> float:
        """The target process's CPU seconds so far (all its threads)."""
        return float(self.ask("cpu"))

    def close(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(OSError, EOFError):
                self.ask("exit")
            self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def rdma_target(conn: Connection, size: int, qp_per_transfer: int) -> None:
    """The target of ``--backend rdma``: a mori.io engine with only the RDMA backend, so nothing
    can fall back to TCP unnoticed; answers ("digest", off, n) and ("exit",)."""
    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, RdmaBackendConfig

    buf = Buffer(size, fill=0x5A)
    engine = IOEngine("bench-target", IOEngineConfig())
    engine.create_backend(BackendType.RDMA, RdmaBackendConfig(qp_per_transfer=qp_per_transfer))
    mem = engine.register_memory(buf.address, size, -1, MemoryLocationType.CPU)
    conn.send((engine.get_engine_desc().pack(), mem.pack()))
    peers._serve(conn, buf)
    engine.shutdown()


def session_iteration(engine: Any, session: Any, op: str, layout: Layout, thread: int) -> Iteration:
    """One mori-io iteration: post the thread's batch on ``session`` and wait for it."""
    from mori.io import StatusCode

    assert session is not None
    offsets = layout.offsets(thread)
    sizes = [layout.block] * layout.batch
    uid = engine.allocate_transfer_uid
    success = StatusCode.SUCCESS
    if layout.batch == 1:  # what an application moving one block calls
        one = session.read if op == "READ" else session.write
        offset, size = offsets[0], layout.block

        def single() -> None:
            status = one(offset, offset, size, uid())
            if status.WaitFor(60000) != success:
                raise RuntimeError(f"mori-io transfer failed: {status.Message()}")

        return single
    post = session.batch_read if op == "READ" else session.batch_write
    # As an application holding its KV block offsets in an int64 array (numpy's take the same
    # path): the binding reads the buffer in one go instead of converting thousands of ints.
    offset_array = array.array("q", offsets)
    size_array = array.array("q", sizes)

    def step() -> None:
        status = post(offset_array, offset_array, size_array, uid())
        if status.WaitFor(60000) != success:
            raise RuntimeError(f"mori-io transfer failed: {status.Message()}")

    return step


class SessionTransport(ABC):
    """What a mori-io transport of this bench does once its engine holds a session from its local
    memory to the target process's (``peer``): timed iterations, a validation and shutting down.
    A subclass says how many local bytes there are and how a pattern is written into them."""

    engine: Any
    session: Any
    local: Any
    remote: Any
    peer: _Peer
    _success: Any

    @abstractmethod
    def _local_bytes(self) -> int: ...

    @abstractmethod
    def _fill(self, pattern: bytes) -> None: ...

    def iteration(self, op: str, layout: Layout, thread: int) -> Iteration:
        return session_iteration(self.engine, self.session, op, layout, thread)

    def validate(self) -> bool:
        """Writes a known pattern and compares the target's digest with the local one."""
        import hashlib

        n = min(self._local_bytes(), 1 << 20)
        pattern = bytes((i * 7 + 3) & 0xFF for i in range(256)) * (n // 256)
        self._fill(pattern)
        status = self.engine.write(self.local, 0, self.remote, 0, len(pattern), self.engine.allocate_transfer_uid())
        ok = status.WaitFor(60000) == self._success
        return ok and bool(self.peer.ask("digest", 0, len(pattern)) == hashlib.sha256(pattern).hexdigest())

    def close(self) -> None:
        self.engine.shutdown()
        self.peer.close()


class MoriTransport(SessionTransport):
    """mori-io on its TCP backend, or with ``rdma=(qp_per_transfer, enable_notification)`` on its
    RDMA backend only (both sides)."""

    name = "mori-io"

    def __init__(self, size: int, num_data_conns: int, rdma: tuple[int, bool] | None = None,
                 min_stripe_bytes: int | None = None) -> None:  # fmt: skip
        from mori.io import (
            BackendType,
            EngineDesc,
            IOEngine,
            IOEngineConfig,
            MemoryDesc,
            MemoryLocationType,
            RdmaBackendConfig,
            StatusCode,
            TcpBackendConfig,
        )
        from mori.io._native import _C
        from mori.io.config import ucx_library_dir

        self._success = StatusCode.SUCCESS
        self.engine = IOEngine("bench-initiator", IOEngineConfig())
        if rdma is None:
            self.peer = _Peer(peers.mori_target, size, num_data_conns)
            tcp = TcpBackendConfig(num_data_conns=num_data_conns)
            if min_stripe_bytes is not None:
                tcp.min_stripe_bytes = min_stripe_bytes
            self.engine.create_backend(BackendType.TCP, tcp)
            self._describe = f"TCP backend, {num_data_conns} lanes, min_stripe_bytes {tcp.min_stripe_bytes}"
        else:
            self.name = "mori-io-rdma"
            qp_per_transfer, notification = rdma
            config = RdmaBackendConfig(qp_per_transfer=qp_per_transfer, enable_notification=notification)
            self.engine.create_backend(BackendType.RDMA, config)  # UnsupportedError names why, before spawning
            self.peer = _Peer(rdma_target, size, qp_per_transfer)
            lib_dir, source = ucx_library_dir()
            self._describe = f"UCX {_C.ucx_version(lib_dir)} from {source}"
        engine_desc, mem_desc = self.peer.hello
        self.engine.register_remote_engine(EngineDesc.unpack(engine_desc))
        self.buf = Buffer(size)
        self.local = self.engine.register_memory(self.buf.address, size, -1, MemoryLocationType.CPU)
        self.remote = MemoryDesc.unpack(mem_desc)
        self.session = self.engine.create_session(self.local, self.remote)

    def _local_bytes(self) -> int:
        return self.buf.size

    def _fill(self, pattern: bytes) -> None:
        self.buf.view[: len(pattern)] = pattern

    def describe(self) -> str:
        return self._describe

    def target_cpu(self) -> float:
        return self.peer.cpu()


class SocketCeiling:
    """One plain TCP stream per thread moving each iteration's bytes in a single send (the
    ceiling: no framing, no descriptors, no striping, kernel copies only)."""

    name = "socket-ceiling"

    def __init__(self, size: int) -> None:
        self.peer = _Peer(peers.socket_target, size)
        self.buf = Buffer(size)
        self.socks: dict[int, socket.socket] = {}

    @staticmethod
    def connect(port: int) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def iteration(self, op: str, layout: Layout, thread: int) -> Iteration:
        if thread not in self.socks:
            self.socks[thread] = self.connect(self.peer.hello)
        n = layout.block * layout.batch
        base = thread * layout.span()
        return self.step(self.socks[thread], op, self.buf.view[base : base + n])

    @staticmethod
    def step(sock: socket.socket, op: str, view: memoryview) -> Iteration:
        """One round trip on ``sock`` moving ``view``'s bytes to (WRITE) or from (READ) the target."""
        n = len(view)
        ack = bytearray(1)
        if op == "READ":
            header = struct.pack("<Q", n | peers.READ_FLAG)

            def read_step() -> None:
                sock.sendall(header)
                got = 0
                while got < n:
                    chunk = sock.recv_into(view[got:])
                    if chunk == 0:
                        raise ConnectionError("the ceiling's target closed the connection")
                    got += chunk

            return read_step
        header = struct.pack("<Q", n)

        def write_step() -> None:
            sock.sendall(header)
            sock.sendall(view)
            if sock.recv_into(ack, 1) != 1:
                raise ConnectionError("the ceiling's target closed the connection")

        return write_step

    def target_cpu(self) -> float:
        return self.peer.cpu()

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()
        self.peer.close()


class SocketStreams:
    """The bandwidth ceiling for striping: ``streams`` plain TCP connections per initiator thread,
    an iteration's bytes cut into ``streams`` contiguous parts that move at once (one request and
    acknowledgement per part, as SocketCeiling's). One thread drives all the connections through
    poll(2), as an application thread would, and the target serves each on its own thread."""

    def __init__(self, size: int, streams: int) -> None:
        self.name = f"socket-{streams}-streams"
        self.streams = streams
        self.peer = _Peer(peers.socket_target, size)
        self.buf = Buffer(size)
        self.socks: dict[int, list[socket.socket]] = {}

    def iteration(self, op: str, layout: Layout, thread: int) -> Iteration:
        if thread not in self.socks:
            self.socks[thread] = [SocketCeiling.connect(self.peer.hello) for _ in range(self.streams)]
        socks = self.socks[thread]
        n = layout.block * layout.batch
        base = thread * layout.span()
        part = -(-n // self.streams)
        views = [self.buf.view[base + o : base + min(n, o + part)] for o in range(0, n, part)]
        return _Streams(socks[: len(views)], views, op == "READ").run

    def target_cpu(self) -> float:
        return self.peer.cpu()

    def close(self) -> None:
        for socks in self.socks.values():
            for sock in socks:
                sock.close()
        self.peer.close()


class _Streams:
    """One iteration over several connections: every part's request, then its bytes (write) or
    the target's (read), each connection served as soon as poll says it is ready."""

    def __init__(self, socks: list[socket.socket], views: list[memoryview], is_read: bool) -> None:
        self.socks, self.views, self.is_read = socks, views, is_read
        self.headers = [struct.pack("<Q", len(v) | (peers.READ_FLAG if is_read else 0)) for v in views]
        self.poller = select.poll()
        self.by_fd = {s.fileno(): i for i, s in enumerate(socks)}
        self.ack = bytearray(1)

    def run(self) -> None:
        for sock, header in zip(self.socks, self.headers, strict=True):
            sock.sendall(header)
        done = [0] * len(self.socks)
        want = select.POLLIN if self.is_read else select.POLLOUT
        for sock in self.socks:
            sock.setblocking(False)
            self.poller.register(sock, want)
        try:
            left = len(self.socks)
            while left:
                for fd, _ in self.poller.poll(60000):
                    i = self.by_fd[fd]
                    view = self.views[i]
                    moved = (self.socks[i].recv_into(view[done[i] :]) if self.is_read
                             else self.socks[i].send(view[done[i] :]))  # fmt: skip
                    if moved == 0 and self.is_read:
                        raise ConnectionError("the ceiling's target closed the connection")
                    done[i] += moved
                    if done[i] == len(view):
                        self.poller.unregister(fd)
                        left -= 1
        finally:
            for sock in self.socks:
                with contextlib.suppress(KeyError, ValueError):
                    self.poller.unregister(sock)
                sock.settimeout(60)
        if not self.is_read:
            for sock in self.socks:
                if sock.recv_into(self.ack, 1) != 1:
                    raise ConnectionError("the ceiling's target closed the connection")


class MooncakeTransport:
    """Mooncake Transfer Engine on its TCP transport, batch_transfer_sync_{read,write}."""

    name = "mooncake-tcp"

    def __init__(self, size: int) -> None:
        # Optional and untyped: looked up at run time so the package needs no stubs for it.
        TransferEngine = importlib.import_module("mooncake.engine").TransferEngine

        self.peer = _Peer(peers.mooncake_target, size)
        if self.peer.hello is None:
            self.peer.close()
            raise RuntimeError("Mooncake's target engine failed to initialize")
        self.session, self.remote_base = self.peer.hello
        self.engine = TransferEngine()
        if self.engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
            raise RuntimeError("Mooncake's TransferEngine.initialize failed")
        self.buf = Buffer(size)
        if self.engine.register_memory(self.buf.address, size) != 0:
            raise RuntimeError("Mooncake's register_memory failed")

    def iteration(self, op: str, layout: Layout, thread: int) -> Iteration:
        offsets = layout.offsets(thread)
        local = [self.buf.address + o for o in offsets]
        remote = [self.remote_base + o for o in offsets]
        sizes = [layout.block] * layout.batch
        call = self.engine.batch_transfer_sync_read if op == "READ" else self.engine.batch_transfer_sync_write
        session = self.session

        def step() -> None:
            if call(session, local, remote, sizes) != 0:
                raise RuntimeError("Mooncake batch transfer failed")

        return step

    def target_cpu(self) -> float:
        return self.peer.cpu()

    def close(self) -> None:
        self.peer.close()

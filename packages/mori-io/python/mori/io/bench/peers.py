# SPDX-License-Identifier: MIT
"""Target-side programs, each run in its own spawned process so the two sides of every
transport are separate processes, as in a deployment."""

from __future__ import annotations

import hashlib
import socket
import struct
import time
from multiprocessing.connection import Connection

from mori.io.bench.memory import Buffer

READ_FLAG = 1 << 63


def mori_target(conn: Connection, size: int, num_data_conns: int) -> None:
    """A mori.io engine owning ``size`` bytes; answers ("digest", off, n) and ("exit",)."""
    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, TcpBackendConfig

    buf = Buffer(size, fill=0x5A)
    engine = IOEngine("bench-target", IOEngineConfig())
    engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=num_data_conns))
    mem = engine.register_memory(buf.address, size, -1, MemoryLocationType.CPU)
    conn.send((engine.get_engine_desc().pack(), mem.pack()))
    _serve(conn, buf)
    engine.shutdown()


def socket_target(conn: Connection, size: int) -> None:
    """The ceiling's receiver: a plain TCP socket moving bytes between the wire and a buffer.

    Per request the initiator sends an 8-byte length; without READ_FLAG the bytes follow and are
    received into the buffer, with it this side sends that many bytes; either way one byte of
    acknowledgement ends the round trip, as a transfer's completion would."""
    buf = Buffer(size, fill=0x5A)
    listener = socket.create_server(("127.0.0.1", 0))
    conn.send(listener.getsockname()[1])
    listener.settimeout(60)

    def serve(sock: socket.socket) -> None:
        header = bytearray(8)
        while sock.recv_into(header, 8, socket.MSG_WAITALL) == 8:
            (word,) = struct.unpack("<Q", header)
            n = word & ~READ_FLAG
            if word & READ_FLAG:
                sock.sendall(buf.view[:n])
                continue
            got = 0
            while got < n:
                chunk = sock.recv_into(buf.view[got:n])
                if chunk == 0:
                    return
                got += chunk
            sock.sendall(b"\1")

    import threading

    def accept_loop() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=serve, args=(sock,), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    _serve(conn, buf)
    listener.close()


def mooncake_target(conn: Connection, size: int) -> None:
    """A Mooncake TransferEngine on its TCP transport (P2P handshake, no metadata server)."""
    import importlib

    TransferEngine = importlib.import_module("mooncake.engine").TransferEngine

    buf = Buffer(size, fill=0x5A)
    engine = TransferEngine()
    if engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        conn.send(None)
        return
    if engine.register_memory(buf.address, size) != 0:
        conn.send(None)
        return
    conn.send((f"127.0.0.1:{engine.get_rpc_port()}", buf.address))
    _serve(conn, buf)


def _serve(conn: Connection, buf: Buffer) -> None:
    """Answers the initiator's ("digest", off, n), ("cpu",) (this process's CPU seconds, every
    thread) and ("exit",)."""
    while True:
        cmd = conn.recv()
        if cmd[0] == "digest":
            conn.send(hashlib.sha256(buf.view[cmd[1] : cmd[1] + cmd[2]]).hexdigest())
        elif cmd[0] == "cpu":
            conn.send(time.process_time())
        else:
            conn.send(True)
            return

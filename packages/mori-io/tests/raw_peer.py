# SPDX-License-Identifier: MIT
"""A hand-written client of mori.io's wire protocol (NOTE in src/net/protocol.hpp), built on
Python's hmac and struct only, so the tests check the native handshake against an independent
implementation and can send frames no real initiator would."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct

HEADER = struct.Struct("<IBBHQIIIIQ")  # magic, type, flags, reserved, uid, seq, total, mem_id, nseg, payload
FRAME_MAGIC = int.from_bytes(b"MIOF", "little")
WRITE, READ, RESPONSE, MEM_QUERY, PING = 1, 2, 3, 4, 5


def _mac(secret: bytes, label: bytes, first: bytes, second: bytes, key: bytes, extra: bytes = b"") -> bytes:
    msg = label + first + second + struct.pack("<H", len(key)) + key + extra
    return hmac.new(secret, msg, hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def connect(
    port: int, secret: bytes, key: str = "raw", target_key: str = "target", channel: int = 1, check_server: bool = True
) -> socket.socket:
    """Connects and authenticates; raises PermissionError when the engine rejects the proof."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    cn = os.urandom(32)
    k, tk = key.encode(), target_key.encode()
    sock.sendall(b"MIOH" + struct.pack("<HBBHH", 1, channel, 0, len(k), len(tk)) + cn + k + tk)
    challenge = recv_exact(sock, 4 + 32 + 32 + 8 + 4)
    assert challenge[:4] == b"MIOC"
    sn, server_proof = challenge[4:36], challenge[36:68]
    if check_server:
        assert hmac.compare_digest(server_proof, _mac(secret, b"mori.io server", cn, sn, k))
    sock.sendall(_mac(secret, b"mori.io client", sn, cn, k, tk))
    if recv_exact(sock, 4) != b"MIOK":
        raise PermissionError("rejected")
    return sock


def frame(kind: int, uid: int, mem_id: int, segments: list[tuple[int, int]], seq: int = 0, total: int = 1) -> bytes:
    payload = sum(size for _, size in segments)
    head = HEADER.pack(FRAME_MAGIC, kind, 0, 0, uid, seq, total, mem_id, len(segments), payload)
    return head + b"".join(struct.pack("<QQ", off, size) for off, size in segments)


def response(sock: socket.socket) -> tuple[int, str, bytes]:
    """(status code, message, payload) of the next response."""
    magic, kind, _, _, _, _, _, code, msg_len, payload = HEADER.unpack(recv_exact(sock, HEADER.size))
    assert magic == FRAME_MAGIC and kind == RESPONSE
    message = recv_exact(sock, msg_len).decode()
    return code, message, recv_exact(sock, payload)


def closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the engine closed the connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False

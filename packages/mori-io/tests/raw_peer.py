# SPDX-License-Identifier: MIT
"""A hand-written client of mori.io's wire protocol (NOTE in src/net/protocol.hpp), built on
Python's hmac and struct only, so the tests check the native handshake against an independent
implementation and can send frames no real initiator would."""

from __future__ import annotations

import contextlib
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


def serve_handshake(sock: socket.socket, secret: bytes, max_frame_bytes: int, max_segments: int) -> tuple[int, str]:
    """The target's side of the handshake, announcing the given limits; returns (channel, peer key)."""
    fixed = recv_exact(sock, 12 + 32)
    magic, _version, channel, _lane, key_len, target_len = struct.unpack("<4sHBBHH", fixed[:12])
    assert magic == b"MIOH"
    client_nonce = fixed[12:]
    keys = recv_exact(sock, key_len + target_len)
    key, target_key = keys[:key_len], keys[key_len:]
    server_nonce = os.urandom(32)
    proof = _mac(secret, b"mori.io server", client_nonce, server_nonce, key)
    sock.sendall(b"MIOC" + server_nonce + proof + struct.pack("<QI", max_frame_bytes, max_segments))
    expected = _mac(secret, b"mori.io client", server_nonce, client_nonce, key, target_key)
    ok = hmac.compare_digest(recv_exact(sock, 32), expected)
    sock.sendall(b"MIOK" if ok else b"MION")
    if not ok:
        raise PermissionError("the initiator did not prove the secret")
    return channel, key.decode()


class FakeTarget:
    """A target engine written by hand: it authenticates initiators with `secret`, announces the
    given frame limits, keeps what WRITE frames carry (header and bytes, in arrival order) and
    answers every request with SUCCESS. Loopback only; stop() closes everything."""

    def __init__(self, secret: bytes, region_size: int, max_frame_bytes: int, max_segments: int) -> None:
        import threading

        self.secret, self.region_size = secret, region_size
        self.limits = (max_frame_bytes, max_segments)
        self.region = bytearray(region_size)
        self.frames: list[tuple[int, int]] = []  # (payload bytes, segments) of each WRITE frame
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            serve_handshake(sock, self.secret, *self.limits)
            while True:
                _, kind, _, _, uid, seq, total, _, nseg, payload = HEADER.unpack(recv_exact(sock, HEADER.size))
                table = recv_exact(sock, 16 * nseg)
                segments = [struct.unpack_from("<QQ", table, 16 * i) for i in range(nseg)]
                body = b""
                if kind == WRITE:
                    body = recv_exact(sock, payload)
                    with self.lock:
                        self.frames.append((payload, nseg))
                        pos = 0
                        for off, size in segments:
                            self.region[off : off + size] = body[pos : pos + size]
                            pos += size
                data = struct.pack("<Q", self.region_size) if kind == MEM_QUERY else b""
                if kind == READ:
                    data = b"".join(bytes(self.region[off : off + size]) for off, size in segments)
                sock.sendall(HEADER.pack(FRAME_MAGIC, RESPONSE, 0, 0, uid, seq, total, 0, 0, len(data)) + data)
        except (OSError, ConnectionError, PermissionError, struct.error):
            pass
        finally:
            sock.close()

    def stop(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):  # already closed by its peer
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

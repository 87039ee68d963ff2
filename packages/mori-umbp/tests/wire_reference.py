# SPDX-License-Identifier: MIT
"""NOTE [wire]'s protocol written out in Python, from its description in mori.umbp.wire and
src/wire/protocol.hpp: the independent reference that test_wire.py checks the native wire
against, byte for byte, and plays hostile or broken callers with."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct

MAGIC = b"UMBPW1"
NONCE = 16
TAG = 32
OK, REFUSED = b"\x01", b"\x00"
# request: body length, sequence, method name length; answer: body length, sequence, status
REQ = struct.Struct("<IQB")
ANS = struct.Struct("<IQB")
NODE_LEN = struct.Struct("<H")


def mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            break
        out += got
    return out


class Connection:
    """A caller's connection past the handshake, made in Python: its socket, its next sequence
    number and its caller-to-server frame key, for frames a test builds itself."""

    def __init__(self, sock: socket.socket, c2s: bytes, s2c: bytes) -> None:
        self.sock, self.c2s, self.s2c, self.seq = sock, c2s, s2c, 0

    def frame(self, name: bytes, body: bytes, seq: int | None = None, tag: bytes | None = None) -> bytes:
        """A request frame, signed with this connection's key unless ``tag`` is given."""
        header = REQ.pack(len(body), self.seq if seq is None else seq, len(name))
        return header + name + body + (tag if tag is not None else mac(self.c2s, header, name, body))

    def answer(self) -> tuple[int, int, bytes]:
        """(sequence, status, body) of the next answer, its MAC checked."""
        head = read_exactly(self.sock, ANS.size)
        size, seq, status = ANS.unpack(head)
        rest = read_exactly(self.sock, size + TAG)
        body, tag = rest[:size], rest[size:]
        assert hmac.compare_digest(tag, mac(self.s2c, head, body)), "the answer's MAC"
        return seq, status, body

    def close(self) -> None:
        self.sock.close()


def connect(host: str, port: int, node_id: str, secret: bytes, timeout: float = 5.0) -> Connection:
    sock = socket.create_connection((host, port), timeout=timeout)
    hello = read_exactly(sock, len(MAGIC) + NONCE)
    assert hello[: len(MAGIC)] == MAGIC
    s_nonce, c_nonce, node = hello[len(MAGIC) :], secrets.token_bytes(NONCE), node_id.encode()
    sock.sendall(MAGIC + c_nonce + NODE_LEN.pack(len(node)) + node + mac(secret, b"client", s_nonce, c_nonce, node))
    assert read_exactly(sock, 1) == OK
    proof = read_exactly(sock, TAG)
    assert hmac.compare_digest(proof, mac(secret, b"server", s_nonce, c_nonce, node))
    keys = [mac(secret, label, s_nonce, c_nonce, node) for label in (b"c2s", b"s2c")]
    return Connection(sock, *keys)

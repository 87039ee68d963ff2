# SPDX-License-Identifier: MIT
"""Reading and re-keying the 128-byte unique id (layout: src/bootstrap/unique_id.cpp).

``describe_unique_id`` tells where a job's rendezvous is, for logs and debugging.
``unique_id_with_secret`` makes an id for the same rendezvous with another secret: a peer that
joins with it must be refused, which is how the authentication is tested.
"""

from __future__ import annotations

import hashlib
import ipaddress
import struct
from typing import Any

from mori.shmem.errors import InvalidArgumentError

_MAGIC = b"MORIUID1"
_SECRET = slice(20, 52)
_CHECKSUMMED = slice(0, 120)
_UID_BYTES = 128


def _check(uid: bytes) -> None:
    if len(uid) != _UID_BYTES or uid[:8] != _MAGIC:
        raise InvalidArgumentError(f"unique_id is not a mori-shmem unique id ({len(uid)} bytes, magic {uid[:8]!r})")


def describe_unique_id(uid: bytes) -> dict[str, Any]:
    """The protocol version, host and port a unique id points at (the secret is not shown)."""
    _check(uid)
    (protocol,) = struct.unpack_from("<I", uid, 8)
    host = str(ipaddress.IPv4Address(uid[12:16]))
    (port,) = struct.unpack_from(">H", uid, 16)
    return {"protocol_version": protocol, "host": host, "port": port}


def unique_id_with_secret(uid: bytes, secret: bytes) -> bytes:
    """The same rendezvous as ``uid`` with a different 32-byte job secret."""
    _check(uid)
    if len(secret) != _SECRET.stop - _SECRET.start:
        raise InvalidArgumentError(f"secret must be {_SECRET.stop - _SECRET.start} bytes, got {len(secret)}")
    forged = bytearray(uid)
    forged[_SECRET] = secret
    forged[_CHECKSUMMED.stop :] = hashlib.sha256(bytes(forged[_CHECKSUMMED])).digest()[: _UID_BYTES - 120]
    return bytes(forged)

# SPDX-License-Identifier: MIT
"""The on-disk record of one SSD block: a fixed header, the key, the value.

Header (little endian, 28 bytes): magic ``b"UMBP"`` (MORI's record magic), version, flags
(bit 0: committed), key length, value length, chain depth, CRC-32 of key then value. A record is
valid only if every field agrees with the file: a torn write (a crash, a lost page cache) fails
the length or the CRC check and the record is discarded rather than served.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"UMBP"
VERSION = 1
COMMITTED = 1
HEADER = struct.Struct("<4sHHIQiI")
_CHUNK = 4 << 20


class BadRecord(Exception):
    """A file that is not a whole, committed, intact record."""


@dataclass(frozen=True)
class Record:
    path: Path
    key: str
    size: int
    depth: int
    crc: int
    key_crc: int
    offset: int


def write_record(path: Path, key: str, data: bytes | bytearray, depth: int) -> Record:
    raw_key = key.encode("utf-8", "surrogatepass")
    key_crc = zlib.crc32(raw_key)
    crc = zlib.crc32(data, key_crc)
    with open(path, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, COMMITTED, len(raw_key), len(data), depth, crc))
        f.write(raw_key)
        f.write(data)
    return Record(path, key, len(data), depth, crc, key_crc, HEADER.size + len(raw_key))


def read_record(path: Path) -> Record:
    """The record in ``path``, every byte checked; BadRecord naming what is wrong otherwise."""
    length = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
        if len(head) != HEADER.size:
            raise BadRecord(f"{length} bytes is shorter than a header")
        magic, version, flags, key_len, size, depth, crc = HEADER.unpack(head)
        if magic != MAGIC or version != VERSION:
            raise BadRecord(f"magic {magic!r} version {version} is not a UMBP v{VERSION} record")
        if not flags & COMMITTED:
            raise BadRecord("the record was never committed")
        if HEADER.size + key_len + size != length:
            raise BadRecord(f"the header promises {HEADER.size + key_len + size} bytes, the file has {length}")
        raw_key = f.read(key_len)
        key_crc = zlib.crc32(raw_key)
        got = key_crc
        while chunk := f.read(_CHUNK):
            got = zlib.crc32(chunk, got)
        if got != crc:
            raise BadRecord(f"CRC-32 {got:#010x} does not match the header's {crc:#010x}")
    try:
        key = raw_key.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise BadRecord(f"the key is not UTF-8: {exc}") from None
    return Record(path, key, size, depth, crc, key_crc, HEADER.size + key_len)

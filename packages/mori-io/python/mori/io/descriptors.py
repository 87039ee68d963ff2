# SPDX-License-Identifier: MIT
"""EngineDesc and MemoryDesc: what one engine tells another out of band, and their wire form.

``pack()`` gives versioned bytes (magic, format version, then length-prefixed fields, all
little-endian); ``unpack()`` checks every length, range and the exact total size, and raises
DescriptorError for anything else, so bytes from an untrusted channel cannot make a descriptor
that points outside what the peer registered.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from mori.io._native import _C
from mori.io.errors import DescriptorError, InvalidArgumentError, check_int

FORMAT_VERSION = 2  # 2: MemoryDesc carries ipc_offset
_ENGINE_MAGIC = b"MIOE"
_MEMORY_MAGIC = b"MIOM"
MAX_TEXT_BYTES = 1024
MAX_SECRET_BYTES = 256
IPC_HANDLE_BYTES = 64


def _check_text(owner: str, name: str, value: object, limit: int = MAX_TEXT_BYTES) -> None:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{owner}.{name}={value!r} must be a str")
    if len(value.encode()) > limit:
        raise InvalidArgumentError(f"{owner}.{name} has {len(value.encode())} bytes (limit {limit})")


def _check_blob(owner: str, name: str, value: object, limit: int) -> None:
    if not isinstance(value, bytes):
        raise InvalidArgumentError(f"{owner}.{name}={value!r} must be bytes")
    if len(value) > limit:
        raise InvalidArgumentError(f"{owner}.{name} has {len(value)} bytes (limit {limit})")


class _Writer:
    def __init__(self, magic: bytes) -> None:
        self.parts = [magic, struct.pack("<H", FORMAT_VERSION)]

    def text(self, value: str) -> None:
        self.blob(value.encode())

    def blob(self, value: bytes) -> None:
        self.parts += [struct.pack("<I", len(value)), value]

    def fmt(self, spec: str, *values: int) -> None:
        self.parts.append(struct.pack("<" + spec, *values))

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: object, magic: bytes, what: str) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DescriptorError(f"{what}.unpack needs bytes, got {type(data).__name__}")
        self.data = bytes(data)
        self.pos = 0
        self.what = what
        if self.take(4) != magic:
            raise DescriptorError(f"not a packed {what} (bad magic)")
        (version,) = self.fmt("H")
        if version != FORMAT_VERSION:
            raise DescriptorError(f"{what} format version {version}; this mori.io reads version {FORMAT_VERSION}")

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise DescriptorError(f"packed {self.what} is truncated ({len(self.data)} bytes)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def fmt(self, spec: str) -> tuple[int, ...]:
        return struct.unpack("<" + spec, self.take(struct.calcsize("<" + spec)))

    def blob(self, name: str, limit: int) -> bytes:
        (n,) = self.fmt("I")
        if n > limit:
            raise DescriptorError(f"{self.what}.{name} has {n} bytes (limit {limit})")
        return self.take(n)

    def text(self, name: str, limit: int = MAX_TEXT_BYTES) -> str:
        try:
            return self.blob(name, limit).decode()
        except UnicodeDecodeError:
            raise DescriptorError(f"{self.what}.{name} is not UTF-8") from None

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise DescriptorError(f"packed {self.what} has {len(self.data) - self.pos} trailing bytes")


@dataclass(frozen=True)
class EngineDesc:
    """Identity and address of an engine, plus the secret a peer must prove to connect to it."""

    key: str
    node_id: str
    hostname: str
    host: str
    port: int
    pid: int
    secret: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        # Every field as pack() writes it, so a bad one is named here, not by struct.error later.
        for name in ("key", "node_id", "hostname", "host"):
            _check_text("EngineDesc", name, getattr(self, name))
        check_int("EngineDesc.port", self.port, 0, 65535)
        check_int("EngineDesc.pid", self.pid, 0, 2**64 - 1)
        _check_blob("EngineDesc", "secret", self.secret, MAX_SECRET_BYTES)

    def pack(self) -> bytes:
        w = _Writer(_ENGINE_MAGIC)
        for value in (self.key, self.node_id, self.hostname, self.host):
            w.text(value)
        w.fmt("HQ", self.port, self.pid)
        w.blob(self.secret)
        return w.done()

    @classmethod
    def unpack(cls, data: bytes) -> EngineDesc:
        r = _Reader(data, _ENGINE_MAGIC, "EngineDesc")
        key = r.text("key")
        node_id, hostname, host = r.text("node_id"), r.text("hostname"), r.text("host")
        port, pid = r.fmt("HQ")
        secret = r.blob("secret", MAX_SECRET_BYTES)
        r.finish()
        if not key:
            raise DescriptorError("EngineDesc.key is empty")
        if port == 0:
            raise DescriptorError("EngineDesc.port is 0 (an engine always reports its bound port)")
        return cls(key, node_id, hostname, host, port, pid, secret)


@dataclass(frozen=True)
class MemoryDesc:
    """A registered memory region as its owner describes it to peers.

    For GPU memory ``device_bus_id`` is the device's PCI bus id, ``ipc_handle`` the CUDA IPC handle
    of the allocation holding the region (empty when it cannot be exported, e.g. VMM memory) and
    ``ipc_offset`` the region's offset in that allocation, as in MORI.
    """

    engine_key: str
    id: int
    device_id: int
    device_bus_id: str
    numa_node: int
    data: int
    size: int
    loc: _C.MemoryLocationType
    ipc_handle: bytes = b""
    ipc_offset: int = 0

    def __post_init__(self) -> None:
        _check_text("MemoryDesc", "engine_key", self.engine_key)
        check_int("MemoryDesc.id", self.id, 0, 2**32 - 1)
        check_int("MemoryDesc.device_id", self.device_id, -(2**31), 2**31 - 1)
        check_int("MemoryDesc.numa_node", self.numa_node, -(2**31), 2**31 - 1)
        check_int("MemoryDesc.data", self.data, 0, 2**64 - 1)
        check_int("MemoryDesc.size", self.size, 0, 2**64 - 1)
        if not isinstance(self.loc, _C.MemoryLocationType):
            raise InvalidArgumentError(f"MemoryDesc.loc={self.loc!r} must be a MemoryLocationType")
        _check_text("MemoryDesc", "device_bus_id", self.device_bus_id, 64)
        _check_blob("MemoryDesc", "ipc_handle", self.ipc_handle, IPC_HANDLE_BYTES)
        check_int("MemoryDesc.ipc_offset", self.ipc_offset, 0, 2**64 - 1)

    def pack(self) -> bytes:
        w = _Writer(_MEMORY_MAGIC)
        w.text(self.engine_key)
        w.fmt("IiiQQB", self.id, self.device_id, self.numa_node, self.data, self.size, int(self.loc))
        w.text(self.device_bus_id)
        w.blob(self.ipc_handle)
        w.fmt("Q", self.ipc_offset)
        return w.done()

    @classmethod
    def unpack(cls, data: bytes) -> MemoryDesc:
        r = _Reader(data, _MEMORY_MAGIC, "MemoryDesc")
        engine_key = r.text("engine_key")
        mem_id, device_id, numa_node, address, size, loc = r.fmt("IiiQQB")
        bus_id = r.text("device_bus_id", 64)
        ipc = r.blob("ipc_handle", IPC_HANDLE_BYTES)
        (ipc_offset,) = r.fmt("Q")
        r.finish()
        if not engine_key:
            raise DescriptorError("MemoryDesc.engine_key is empty")
        try:
            location = _C.MemoryLocationType(loc)
        except ValueError:
            raise DescriptorError(f"MemoryDesc.loc={loc} is not a MemoryLocationType") from None
        return cls(engine_key, mem_id, device_id, bus_id, numa_node, address, size, location, ipc, ipc_offset)

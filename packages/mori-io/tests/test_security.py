# SPDX-License-Identifier: MIT
"""The target's defences: authentication, bounded frames, range checks on every segment.

raw_peer.py speaks the protocol by hand, so these tests can send what no real initiator would.
After every abuse the engine must still serve a legitimate transfer, and memory around the
registered region (guard bytes) must be untouched.
"""

from __future__ import annotations

import os
import socket
import struct

import numpy as np
import pytest
import raw_peer
from conftest import new_engine, random_bytes, register
from hypothesis import given
from hypothesis import strategies as st

from mori.io import EngineDesc, IOEngine, IOEngineConfig, StatusCode

GUARD = 4096
REGION = 64 * 1024

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def guarded():
    """A target whose registered region sits between two guard areas, and a legitimate initiator."""
    target = new_engine("target")
    backing = random_bytes(GUARD + REGION + GUARD, 30)
    region = backing[GUARD : GUARD + REGION]
    mem = register(target, region)
    friend = new_engine("friend")
    friend.register_remote_engine(target.get_engine_desc())
    friend_buf = random_bytes(REGION, 31)
    friend_mem = register(friend, friend_buf)
    yield target, backing, mem, friend, friend_mem
    friend.shutdown()
    target.shutdown()


def guards_intact(backing: np.ndarray) -> bool:
    pristine = random_bytes(GUARD + REGION + GUARD, 30)
    return np.array_equal(backing[:GUARD], pristine[:GUARD]) and np.array_equal(backing[-GUARD:], pristine[-GUARD:])


def still_serves(friend, friend_mem, mem) -> bool:
    status = friend.read(friend_mem, 0, mem, 0, 1024, friend.allocate_transfer_uid())
    return status.WaitFor(10000) == StatusCode.SUCCESS


def secret_of(engine: IOEngine) -> bytes:
    return engine.get_engine_desc().secret


def test_handshake_matches_an_independent_hmac_implementation(guarded):
    target, _, mem, _, _ = guarded
    sock = raw_peer.connect(target.get_engine_desc().port, secret_of(target))
    sock.sendall(raw_peer.frame(raw_peer.PING, 0, 0, []))
    assert raw_peer.response(sock)[0] == StatusCode.SUCCESS
    sock.sendall(raw_peer.frame(raw_peer.MEM_QUERY, 0, mem.id, []))
    code, _, payload = raw_peer.response(sock)
    assert code == StatusCode.SUCCESS and struct.unpack("<Q", payload)[0] == REGION
    sock.close()


def test_peer_without_the_secret_is_refused(guarded):
    target, backing, mem, friend, friend_mem = guarded
    with pytest.raises(PermissionError):
        raw_peer.connect(target.get_engine_desc().port, os.urandom(32), check_server=False)
    with pytest.raises(PermissionError):
        raw_peer.connect(target.get_engine_desc().port, secret_of(target), target_key="someone-else")
    # A real engine holding a forged descriptor (right address, wrong secret) gets a failed status.
    intruder = new_engine("intruder")
    try:
        real = target.get_engine_desc()
        forged = EngineDesc(real.key, real.node_id, real.hostname, real.host, real.port, real.pid, os.urandom(32))
        intruder.register_remote_engine(forged)
        buf = np.full(REGION, 0xAB, np.uint8)
        status = intruder.write(register(intruder, buf), 0, mem, 0, REGION, 1)
        assert status.WaitFor(10000) == StatusCode.ERR_BAD_STATE
        assert "secret" in status.Message()
    finally:
        intruder.shutdown()
    assert guards_intact(backing) and still_serves(friend, friend_mem, mem)
    assert np.array_equal(backing, random_bytes(GUARD + REGION + GUARD, 30))


@given(garbage=st.binary(min_size=1, max_size=300))
def test_garbage_before_the_handshake_is_refused(guarded, garbage):
    target, _, mem, friend, friend_mem = guarded
    sock = socket.create_connection(("127.0.0.1", target.get_engine_desc().port), timeout=5)
    try:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)  # a half-sent HELLO would otherwise wait for the handshake deadline
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        assert b"MIOK" not in data
    except OSError:  # reset, or not connected any more: the engine closed it
        pass
    finally:
        sock.close()
    assert still_serves(friend, friend_mem, mem)


def test_silent_connections_are_dropped_after_the_handshake_deadline(guarded, monkeypatch):
    monkeypatch.setenv("MORI_IO_HANDSHAKE_TIMEOUT_MS", "300")
    quick = IOEngine("quick", IOEngineConfig())
    try:
        sock = socket.create_connection(("127.0.0.1", quick.get_engine_desc().port), timeout=5)
        assert raw_peer.closed(sock, timeout=5)
    finally:
        quick.shutdown()


def test_out_of_range_segments_get_an_error_and_touch_nothing(guarded):
    target, backing, mem, _, _ = guarded
    sock = raw_peer.connect(target.get_engine_desc().port, secret_of(target))
    cases = [
        [(REGION - 10, 11)],  # one byte past the end
        [(0, 10), (2**64 - 5, 10)],  # offset + size overflows 64 bits
        [(REGION, 1)],
    ]
    for uid, segments in enumerate(cases):
        payload = b"\xee" * sum(s for _, s in segments)
        sock.sendall(raw_peer.frame(raw_peer.WRITE, uid, mem.id, segments) + payload)
        code, message, _ = raw_peer.response(sock)
        assert code == StatusCode.ERR_INVALID_ARGS and "outside memory id" in message
        sock.sendall(raw_peer.frame(raw_peer.READ, uid, mem.id, segments))
        code, message, data = raw_peer.response(sock)
        assert code == StatusCode.ERR_INVALID_ARGS and data == b""
    sock.sendall(raw_peer.frame(raw_peer.WRITE, 9, 12345, [(0, 4)]) + b"abcd")
    assert raw_peer.response(sock)[0] == StatusCode.ERR_NOT_FOUND
    # The connection stayed in step: a valid read still works on it.
    sock.sendall(raw_peer.frame(raw_peer.READ, 10, mem.id, [(0, 16)]))
    code, _, data = raw_peer.response(sock)
    assert code == StatusCode.SUCCESS and data == backing[GUARD : GUARD + 16].tobytes()
    sock.close()
    assert guards_intact(backing)
    assert np.array_equal(backing, random_bytes(GUARD + REGION + GUARD, 30))  # no test writes validly


def unbounded_headers(mem_id: int) -> list[bytes]:
    h = raw_peer.HEADER
    m = raw_peer.FRAME_MAGIC
    return [
        h.pack(m, raw_peer.WRITE, 0, 0, 1, 0, 1, mem_id, 10**6, 0),  # too many segments
        h.pack(m, raw_peer.WRITE, 0, 0, 1, 0, 1, mem_id, 1, 2**40),  # payload over the frame limit
        h.pack(m, raw_peer.WRITE, 0, 0, 1, 5, 3, mem_id, 0, 0),  # seq >= total
        h.pack(m, raw_peer.WRITE, 0, 0, 1, 0, 0, mem_id, 0, 0),  # total 0
        h.pack(m, raw_peer.READ, 0, 0, 1, 0, 1, mem_id, 1, 999) + struct.pack("<QQ", 0, 5),  # sizes != payload
        h.pack(m, raw_peer.RESPONSE, 0, 0, 1, 0, 1, 0, 0, 0),  # responses are not requests
        h.pack(0xDEADBEEF, raw_peer.WRITE, 0, 0, 1, 0, 1, mem_id, 0, 0),  # bad magic
        h.pack(m, 77, 0, 0, 1, 0, 1, mem_id, 0, 0),  # unknown type
    ]


def test_headers_breaking_a_bound_close_the_connection(guarded):
    target, backing, mem, friend, friend_mem = guarded
    for header in unbounded_headers(mem.id):
        sock = raw_peer.connect(target.get_engine_desc().port, secret_of(target))
        sock.sendall(header)
        assert raw_peer.closed(sock), header.hex()
        sock.close()
    assert guards_intact(backing) and still_serves(friend, friend_mem, mem)


@given(fields=st.tuples(st.integers(0, 6), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
                        st.integers(0, 2**32 - 1), st.integers(0, 4), st.integers(0, 40),
                        st.integers(0, 2**64 - 1)),
       tail=st.binary(max_size=200), channel=st.sampled_from([0, 1]))  # fmt: skip
def test_fuzzed_frames_never_escape_the_region(guarded, fields, tail, channel):
    """Random headers and bodies on the control (0) and data (1) connections."""
    target, backing, mem, friend, friend_mem = guarded
    kind, uid, seq, total, mem_pick, nseg, payload = fields
    mem_id = (mem.id, mem.id + 1, 0, 2**32 - 1, 7)[mem_pick]
    head = raw_peer.HEADER.pack(raw_peer.FRAME_MAGIC, kind, 0, 0, uid, seq, total, mem_id, nseg, payload)
    sock = raw_peer.connect(target.get_engine_desc().port, secret_of(target), channel=channel)
    try:
        sock.sendall(head + tail)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(10)
        while sock.recv(65536):
            pass
    except OSError:  # reset, broken pipe, not connected: the engine closed it
        pass
    finally:
        sock.close()
    assert guards_intact(backing)
    assert still_serves(friend, friend_mem, mem)

# SPDX-License-Identifier: MIT
"""NOTE [wire] in mori.umbp.wire: the put and get paths' calls to peers and master (heartbeats
included) over one authenticated plain-TCP connection each, gRPC being the fallback. Checked against real masters and
peers on loopback, and raw sockets where a test plays a hostile or broken caller:

- the calls really go over the wire (the channels' counters, the gRPC fallbacks untouched) and
  every byte comes back; UMBP_WIRE=0 serves no wire and the same puts go over streams;
- membership before work: a caller that does not prove the pool secret, stalls, floods the
  handshake, or forges, replays or oversizes a frame is closed before any handler runs, and a
  server that does not prove the secret is refused by the caller;
- statuses travel as gRPC's do (UNIMPLEMENTED, INVALID_ARGUMENT, a handler's abort);
- a full server sends its callers to the fallback for a while without touching the socket;
- a frozen, dead or restarted master or peer gives an error within the deadline, never a hang.

test_streams.py is the counterpart with the wire off; the frozen master and peer run here over both.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import threading
import time

import grpc
import numpy as np
import pytest
import wire_reference as ref
from conftest import (
    PAGE,
    MasterProcess,
    count_peer_rpcs,
    free_port,
    master_config,
    owner_and_writer,
    running_cluster,
    wait_for,
)

from mori.umbp import _C, MasterServer, MasterUnavailableError, PeerUnavailableError, UMBPMasterClient, auth, rpc, wire
from mori.umbp.peer import service as peer_service
from mori.umbp.rpc import pb

WRONG = b"w" * 32
HOST = "127.0.0.1"
HELLO = len(ref.MAGIC) + ref.NONCE


@pytest.fixture(autouse=True)
def _wire_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UMBP_WIRE", "1")  # whatever the caller's environment says; children inherit it


def _secret(master) -> bytes:
    secret = auth.member_secret(None, master.address)
    assert secret is not None
    return secret


def _raw(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=timeout)


_read_exactly = ref.read_exactly


def _closed_within(sock: socket.socket, bound: float) -> float:
    """Seconds until the peer closes ``sock`` (EOF or reset); fails if it sends anything first or
    does not close within ``bound``."""
    start = time.monotonic()
    sock.settimeout(bound)
    try:
        got = sock.recv(1)
    except ConnectionResetError:
        got = b""
    assert got == b"", f"the server answered {got!r} instead of closing"
    return time.monotonic() - start


def _prove(sock: socket.socket, secret: bytes, node: bytes) -> bytes:
    """Plays the caller's side of the handshake with ``secret``; returns the server's first byte."""
    hello = _read_exactly(sock, HELLO)
    assert hello[: len(ref.MAGIC)] == ref.MAGIC
    s_nonce, c_nonce = hello[len(ref.MAGIC) :], secrets.token_bytes(ref.NONCE)
    tag = ref.mac(secret, b"client", s_nonce, c_nonce, node)
    sock.sendall(ref.MAGIC + c_nonce + ref.NODE_LEN.pack(len(node)) + node + tag)
    return sock.recv(1)


def _counting(server: wire.WireServer, name: str) -> list:
    """Records every request the server's handler ``name`` is given, from now on."""
    parse, handler = server._handlers[name]
    seen: list = []

    def counted(req, ctx):
        seen.append(req)
        return handler(req, ctx)

    server._handlers[name] = (parse, counted)
    return seen


def _freeze(pid: int) -> None:
    """SIGSTOP, returning once the process is stopped (a call sent sooner could still be answered)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")

    assert wait_for(stopped, timeout=5, every=0.01)


def _ptrs(rows: np.ndarray) -> list[int]:
    return [int(r.ctypes.data) for r in rows]


def _put_and_read_back(writer, data: np.ndarray, prefix: str) -> list[str]:
    """One batch put of ``data``'s rows and one batch get, every byte compared; returns the keys."""
    keys = [f"{prefix}{i}" for i in range(len(data))]
    sizes = [data.shape[1]] * len(data)
    assert all(writer.batch_put_from_ptr(keys, _ptrs(data), sizes))
    out = np.zeros_like(data)
    assert all(writer.batch_get_into_ptr(keys, _ptrs(out), sizes))
    assert np.array_equal(out, data)
    return keys


# -- the data path goes over the wire -------------------------------------------------------------
def test_batch_put_and_get_go_over_the_wire_and_store_every_byte():
    with owner_and_writer("owner", 32 * PAGE, "writer") as (master, owner, writer):
        keys = _put_and_read_back(writer, np.random.default_rng(1).integers(0, 256, (8, PAGE), dtype=np.uint8), "w")
        assert all(master.master.lookup(keys))
        calls = writer._peers[owner.peer_address][2]
        channel = calls["BatchResolveKeys"]._channel
        assert all(call._channel is channel for call in calls.values())  # one connection set per peer
        assert channel._made >= 1 and channel._refused_until == 0.0
        for name, call in calls.items():
            assert call._fallback._made == 0 and call._fallback._refused_until == 0.0, name
        # The owner acknowledged its commits by heartbeats, over the wire and never the stream.
        hb = owner._master
        assert wait_for(lambda: hb._wire._made >= 1)
        assert hb._wire._refused_until == 0.0 and hb._wire._port == master._wire.port
        assert hb._hb_stream._made == 0 and hb._hb_stream._refused_until == 0.0


def test_a_block_above_the_inline_limit_goes_by_slots_over_the_wire(monkeypatch):
    size = 2 * PAGE
    assert size > peer_service.INLINE_MAX_BYTES  # else this would test the inline path again
    served = count_peer_rpcs(monkeypatch, ["BatchPutInline", "BatchAllocateSlots", "BatchCommitSlots"])
    with owner_and_writer("owner", 32 * PAGE, "writer") as (master, owner, writer):
        data = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8)
        assert writer.put_from_ptr("big", data.ctypes.data, size)
        back = np.zeros_like(data)
        assert writer.get_into_ptr("big", back.ctypes.data, size)
        assert np.array_equal(back, data)
        assert master.master.lookup(["big"]) == [True]
        assert served["BatchAllocateSlots"] >= 1 and served["BatchCommitSlots"] >= 1
        assert served["BatchPutInline"] == 0
        calls = writer._peers[owner.peer_address][2]
        assert calls["BatchAllocateSlots"]._channel._made >= 1
        for name, call in calls.items():
            assert call._fallback._made == 0 and call._fallback._refused_until == 0.0, name


def test_with_the_wire_off_nothing_listens_and_puts_go_over_streams(monkeypatch):
    monkeypatch.setenv("UMBP_WIRE", "0")
    with owner_and_writer("owner", 32 * PAGE, "writer") as (master, owner, writer):
        assert master._wire is None and master._servicer.wire_port == 0
        assert owner._peer_wire is None
        assert owner._master._wire_port == 0  # the RegisterClient answer named no port
        _put_and_read_back(writer, np.random.default_rng(3).integers(0, 256, (4, PAGE), dtype=np.uint8), "off")
        calls = writer._peers[owner.peer_address][2]
        assert calls["BatchResolveKeys"]._channel._made == 0
        assert calls["BatchResolveKeys"]._fallback._made >= 1
        assert calls["BatchPutInline"]._fallback._made >= 1
        assert owner._master._wire._made == 0
        assert wait_for(lambda: owner._master._hb_stream._made == 1)


# -- the handshake --------------------------------------------------------------------------------
def test_a_caller_proving_a_wrong_secret_is_refused_and_closed():
    with MasterServer(master_config()) as master:
        seen = _counting(master._wire, "Heartbeat")
        with _raw(master._wire.port) as sock:
            assert _prove(sock, WRONG, b"n1") == ref.REFUSED
            _closed_within(sock, 2)
        with _raw(master._wire.port) as sock:  # the right secret, but a node id that is not UTF-8
            assert _prove(sock, _secret(master), b"\xff\xfe") == ref.REFUSED
            _closed_within(sock, 2)
        assert seen == [] and not master.master.alive_nodes()


def test_wire_connect_with_a_wrong_secret_raises_unauthenticated():
    with MasterServer(master_config()) as master:
        with pytest.raises(wire.WireError) as err:
            wire._connect(HOST, master._wire.port, "n1", WRONG, 5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        conn = wire._connect(HOST, master._wire.port, "n1", _secret(master), 5)  # the member's works
        conn.close()


def test_a_caller_that_stalls_in_the_handshake_is_closed_after_the_timeout(monkeypatch):
    monkeypatch.setattr(wire, "HANDSHAKE_TIMEOUT_S", 0.5)  # read when the connection is served
    with MasterServer(master_config()) as master, _raw(master._wire.port) as sock:
        assert _read_exactly(sock, HELLO)[: len(ref.MAGIC)] == ref.MAGIC
        took = _closed_within(sock, 3)
        assert 0.3 <= took < 1.5


def test_a_caller_that_drips_its_handshake_is_closed_after_the_timeout(monkeypatch):
    monkeypatch.setattr(wire, "HANDSHAKE_TIMEOUT_S", 0.5)
    with MasterServer(master_config()) as master, _raw(master._wire.port) as sock:
        assert _read_exactly(sock, HELLO)[: len(ref.MAGIC)] == ref.MAGIC
        start, closed_after = time.monotonic(), None
        # One byte every 0.2 s, for 2.4 s: 12 bytes, still short of the handshake's fixed head.
        sock.settimeout(0.2)
        for byte in ref.MAGIC + b"\0" * 6:
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1) == b"":
                    closed_after = time.monotonic() - start
                    break
            except TimeoutError:
                continue  # still open: the server waits for more
            except OSError:
                closed_after = time.monotonic() - start
                break
        assert closed_after is not None and closed_after < 1.5, "the handshake outlived HANDSHAKE_TIMEOUT_S"


def test_past_max_handshakes_a_connection_is_closed_at_once_until_the_idle_ones_time_out(monkeypatch):
    monkeypatch.setattr(wire, "HANDSHAKE_TIMEOUT_S", 1.0)
    secret = secrets.token_bytes(32)
    server = wire.WireServer(secret, {}, HOST, "test", max_connections=wire.MAX_HANDSHAKES + 8).start()
    idle: list[socket.socket] = []
    try:
        for _ in range(wire.MAX_HANDSHAKES):
            sock = _raw(server.port)
            assert _read_exactly(sock, HELLO)[: len(ref.MAGIC)] == ref.MAGIC  # its handshake started
            idle.append(sock)
        with _raw(server.port) as extra:
            assert _closed_within(extra, 1) < 0.5  # no hello at all
        with pytest.raises(wire.WireRefused):
            wire._connect(HOST, server.port, "member", secret, 2)  # even a member, while they hold
        for sock in idle:
            _closed_within(sock, 3)
        conn = wire._connect(HOST, server.port, "member", secret, 2)
        conn.close()
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_an_announced_node_id_is_bounded_and_garbage_is_refused():
    with MasterServer(master_config()) as master:
        with _raw(master._wire.port) as sock:
            assert _read_exactly(sock, HELLO)[: len(ref.MAGIC)] == ref.MAGIC
            # The longest id allowed, then garbage for the id and the MAC: read, then refused.
            n = wire.MAX_NODE_ID_BYTES
            garbage = os.urandom(n + ref.TAG)
            sock.sendall(ref.MAGIC + secrets.token_bytes(ref.NONCE) + ref.NODE_LEN.pack(n) + garbage)
            assert sock.recv(1) == ref.REFUSED
            _closed_within(sock, 2)
        with _raw(master._wire.port) as sock:
            assert _read_exactly(sock, HELLO)[: len(ref.MAGIC)] == ref.MAGIC
            # A longer one is closed on its length alone: the server waits for none of its bytes.
            too_long = ref.NODE_LEN.pack(wire.MAX_NODE_ID_BYTES + 1)
            sock.sendall(ref.MAGIC + secrets.token_bytes(ref.NONCE) + too_long)
            assert _closed_within(sock, 2) < 1
        assert not master.master.alive_nodes()


def test_the_server_reads_the_node_id_a_caller_proves_and_a_caller_refuses_a_longer_one():
    secret = secrets.token_bytes(32)
    seen: list[str] = []

    def who(req, ctx):
        seen.append(auth.caller_node.get())
        return pb.HeartbeatResponse()

    server = wire.WireServer(secret, {"Who": (pb.HeartbeatRequest.FromString, who)}, HOST, "test").start()
    longest = "x" * wire.MAX_NODE_ID_BYTES
    channel = wire.WireChannel(f"{HOST}:1", lambda _timeout: server.port, auth.ClientAuth(longest, lambda: secret), 1)
    try:
        channel.call("Who", pb.HeartbeatRequest(), pb.HeartbeatResponse.FromString, 2)
        assert seen == [longest]
        with pytest.raises(wire.WireRefused):  # never sent: the server would refuse it
            wire._connect(HOST, server.port, longest + "x", secret, 2)
    finally:
        channel.close()
        server.stop()


def test_a_caller_detects_a_server_that_does_not_prove_the_secret():
    with MasterServer(master_config(pool_secret=secrets.token_bytes(32))) as master:
        with pytest.raises(wire.WireError) as err:
            wire._connect(HOST, master._wire.port, "n1", WRONG, 5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # An impostor that accepts any caller: the caller refuses it on the server's proof.
    listener = socket.create_server((HOST, 0))
    try:
        listener.settimeout(5)
        port = listener.getsockname()[1]

        def impostor():
            conn, _ = listener.accept()
            with conn:
                conn.sendall(ref.MAGIC + secrets.token_bytes(ref.NONCE))
                head = _read_exactly(conn, len(ref.MAGIC) + ref.NONCE + 1)
                _read_exactly(conn, head[-1] + ref.TAG)
                conn.sendall(ref.OK + os.urandom(ref.TAG))
                conn.recv(1)

        t = threading.Thread(target=impostor, daemon=True)
        t.start()
        with pytest.raises(wire.WireError, match="does not prove") as err:
            wire._connect(HOST, port, "n1", WRONG, 5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        t.join(5)
    finally:
        listener.close()


# -- frames ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["wrong mac", "replayed", "wrong sequence", "another connection's"])
def test_a_frame_that_does_not_verify_closes_the_connection_unanswered(case):
    with MasterServer(master_config()) as master:
        secret = _secret(master)
        seen = _counting(master._wire, "Heartbeat")
        conn = ref.connect(HOST, master._wire.port, "n1", secret)
        other = ref.connect(HOST, master._wire.port, "n1", secret)
        try:
            body = pb.HeartbeatRequest(node_id="n1", is_full_sync=True).SerializeToString()
            good = conn.frame(b"Heartbeat", body)
            if case == "replayed":
                conn.sock.sendall(good)
                seq, status, _ = conn.answer()
                assert (seq, status) == (0, 0)
                assert len(seen) == 1
                bad = good
            else:
                bad = {
                    "wrong mac": conn.frame(b"Heartbeat", body, tag=os.urandom(ref.TAG)),
                    "wrong sequence": conn.frame(b"Heartbeat", body, seq=1),
                    "another connection's": other.frame(b"Heartbeat", body),
                }[case]
            before = len(seen)
            conn.sock.sendall(bad)
            _closed_within(conn.sock, 2)
            assert len(seen) == before
            assert not master.master.alive_nodes()
        finally:
            conn.close()
            other.close()


class _Blob:
    """A message that is its bytes (what a handler's parse and SerializeToString see)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # protobuf's name
        return self.data


@pytest.mark.parametrize("size", [0, 1, 65535, 65536, 65537, 1 << 20, wire.MAX_FRAME_BYTES])
def test_bodies_of_every_size_cross_both_ways_byte_for_byte(size):
    """Frames shorter and longer than the native reader's 64 KiB buffer, up to the frame cap, on
    one connection after another call (so a frame's bytes never leak into the next)."""
    secret = secrets.token_bytes(32)
    server = wire.WireServer(secret, {"Flip": (_Blob, lambda req, ctx: _Blob(req.data[::-1]))}, HOST, "test")
    channel = wire.WireChannel(f"{HOST}:{server.port}", lambda _t: server.port, auth.ClientAuth("n", lambda: secret), 1)
    try:
        payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
        for _ in range(2):
            assert channel.call("Flip", _Blob(payload), _Blob, 10).data == payload[::-1]
        assert channel._made == 1
    finally:
        channel.close()
        server.stop()


@pytest.mark.parametrize("answer", [(300, b"x"), None], ids=["status-300", "none"])
def test_a_dispatch_answer_that_is_no_status_and_bytes_is_answered_unknown_and_logged(answer, caplog):
    """A dispatch whose answer the native server cannot send: the caller gets UNKNOWN with the
    reason, the error is logged on mori.umbp.wire, and the connection serves the next call."""
    secret = secrets.token_bytes(32)
    calls = []

    def dispatch(node: str, name: bytes, body: bytes):
        calls.append((node, name, body))
        return answer if len(calls) == 1 else (0, body[::-1])

    server = _C.WireServer(secret, HOST, 4, 5.0, 30.0, dispatch)
    conn = _C.WireConnection(HOST, server.port, "member-1", secret, 5.0)
    try:
        conn.send(b"Any", b"first", 5.0)
        status, body = conn.receive(5.0)
        assert status == grpc.StatusCode.UNKNOWN.value[0]
        assert body.startswith(b"wire dispatch failed: ")
        conn.send(b"Any", b"second", 5.0)
        assert conn.receive(5.0) == (0, b"dnoces")
    finally:
        conn.close()
        server.stop()
    assert calls == [("member-1", b"Any", b"first"), ("member-1", b"Any", b"second")]
    logged = [r.getMessage() for r in caplog.records if r.name == "mori.umbp.wire" and r.levelname == "ERROR"]
    assert len(logged) == 1 and "wire dispatch failed" in logged[0] and "member-1" in logged[0], logged


def test_a_stopped_server_refuses_connections_at_once():
    secret = secrets.token_bytes(32)
    server = wire.WireServer(secret, {}, HOST, "test").start()
    port = server.port
    server.stop()
    start = time.monotonic()
    with pytest.raises(wire.WireRefused):
        wire._connect(HOST, port, "member", secret, 5)
    assert time.monotonic() - start < 1


def test_a_frame_announcing_more_than_max_frame_bytes_closes_before_the_body():
    with MasterServer(master_config()) as master:
        seen = _counting(master._wire, "Heartbeat")
        conn = ref.connect(HOST, master._wire.port, "n1", _secret(master))
        try:
            # The header alone: a server that waited for the body would not close.
            conn.sock.sendall(ref.REQ.pack(wire.MAX_FRAME_BYTES + 1, 0, len(b"Heartbeat")))
            assert _closed_within(conn.sock, 2) < 1
            assert seen == []
        finally:
            conn.close()


class _Undecodable:
    def SerializeToString(self) -> bytes:  # protobuf's name
        return b"\xff\xff\xff\xff"


def test_statuses_reach_the_caller_as_grpc_codes():
    with MasterServer(master_config()) as master:
        channel = wire.WireChannel(
            master.address, lambda _timeout: master._wire.port, auth.ClientAuth("n1", lambda: _secret(master)), 1
        )
        parse = pb.HeartbeatResponse.FromString
        try:
            with pytest.raises(wire.WireError) as err:
                channel.call("HeartbeatStream", pb.HeartbeatRequest(node_id="n1"), parse, 2)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
            with pytest.raises(wire.WireError) as err:
                channel.call("Heartbeat", _Undecodable(), parse, 2)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            # The master's _own: a node heartbeats only as itself, the id it proved.
            with pytest.raises(wire.WireError) as err:
                channel.call("Heartbeat", pb.HeartbeatRequest(node_id="n2"), parse, 2)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "not the caller's own" in err.value.details()
            # An error status leaves the connection in step: the same one answers the next call.
            answer = channel.call("Heartbeat", pb.HeartbeatRequest(node_id="n1"), parse, 2)
            assert answer.status == pb.HeartbeatResponse.EXPIRED  # n1 never registered
            assert channel._made == 1 and len(channel._idle) == 1 and channel._idle[0].seq == 4
            # Mapped as the gRPC call's failure would be.
            mapped = rpc.mapped("Heartbeat", err.value, MasterUnavailableError, 2)
            assert isinstance(mapped, MasterUnavailableError) and "PERMISSION_DENIED" in str(mapped)
        finally:
            channel.close()


# -- a full server, and the fallback ---------------------------------------------------------------
def _echo_server(secret: bytes, max_connections: int) -> wire.WireServer:
    def echo(req, ctx):
        if req.node_id == "boom":
            raise RuntimeError("a handler bug")
        return pb.HeartbeatResponse(acked_seq=req.delta_seq_baseline)

    return wire.WireServer(
        secret, {"Echo": (pb.HeartbeatRequest.FromString, echo)}, HOST, "test", max_connections=max_connections
    ).start()


class _Fallback:
    """A gRPC call stand-in that records what it was asked."""

    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, request, timeout=None):
        self.calls.append((request, timeout))
        return pb.HeartbeatResponse(acked_seq=0)

    def close(self) -> None:
        pass


def test_a_full_server_closes_at_once_and_its_callers_fall_back_for_a_while(monkeypatch):
    monkeypatch.setattr(wire, "REFUSED_FOR_S", 0.5)
    secret = secrets.token_bytes(32)
    server = _echo_server(secret, max_connections=2)
    held = [wire._connect(HOST, server.port, f"h{i}", secret, 2) for i in range(2)]
    channel = wire.WireChannel(f"{HOST}:1", lambda _timeout: server.port, auth.ClientAuth("c", lambda: secret), 4)
    fallback = _Fallback()
    call = wire.WireCall(channel, "Echo", pb.HeartbeatResponse.FromString, fallback)
    connects = []
    real_connect = wire._connect
    monkeypatch.setattr(wire, "_connect", lambda *a: connects.append(a) or real_connect(*a))
    try:
        with _raw(server.port) as third:
            assert _closed_within(third, 1) < 0.5
        assert call(pb.HeartbeatRequest(delta_seq_baseline=7), timeout=2).acked_seq != 7
        assert len(fallback.calls) == 1 and 1.5 < fallback.calls[0][1] <= 2  # what the wire left of 2 s
        assert channel._refused_until > time.monotonic() and channel._made == 0 and len(connects) == 1
        # While refused, calls go to the fallback without a connection attempt.
        call(pb.HeartbeatRequest(delta_seq_baseline=8), timeout=2)
        assert len(fallback.calls) == 2 and len(connects) == 1
        # Room again and the refusal over: back on the wire.
        for conn in held:
            conn.close()
        time.sleep(0.6)
        assert call(pb.HeartbeatRequest(delta_seq_baseline=9), timeout=2).acked_seq == 9
        assert len(fallback.calls) == 2 and channel._made == 1 and len(connects) == 2
        # A handler's exception is the caller's UNKNOWN, and the connection lives on.
        with pytest.raises(wire.WireError) as err:
            call(pb.HeartbeatRequest(node_id="boom"), timeout=2)
        assert err.value.code() == grpc.StatusCode.UNKNOWN and "a handler bug" in err.value.details()
        assert call(pb.HeartbeatRequest(delta_seq_baseline=10), timeout=2).acked_seq == 10
        assert len(connects) == 2
    finally:
        for conn in held:
            conn.close()
        channel.close()
        server.stop()


def test_overlapped_calls_are_written_at_once_and_answered_in_the_callers_thread(monkeypatch):
    """NOTE [overlapped calls] in mori.umbp.rpc: two servers that answer only once both requests
    arrived are served with no thread handed a call; an error status is the caller's typed error;
    a call whose answer is never read gives up its connection."""
    secret = secrets.token_bytes(32)
    both_in = threading.Barrier(2, timeout=5)

    def meet(req, ctx):
        both_in.wait()  # neither answers before the other's request is in
        return pb.HeartbeatResponse(acked_seq=req.delta_seq_baseline)

    servers = [
        wire.WireServer(secret, {"Meet": (pb.HeartbeatRequest.FromString, meet)}, HOST, "test", 2).start()
        for _ in range(2)
    ]
    echo = _echo_server(secret, max_connections=2)
    ports = [s.port for s in servers]
    channels = [
        wire.WireChannel(f"{HOST}:1", lambda _timeout, port=port: port, auth.ClientAuth("c", lambda: secret), 1)
        for port in [*ports, echo.port]
    ]
    parse = pb.HeartbeatResponse.FromString
    meets = [wire.WireCall(ch, "Meet", parse, _Fallback()) for ch in channels[:2]]
    echo_call = wire.WireCall(channels[2], "Echo", parse, _Fallback())
    monkeypatch.setattr(rpc, "_pool", lambda: pytest.fail("a call that can be split went to a thread"))
    try:
        pending = [
            rpc.start(f"Meet {i}", call, pb.HeartbeatRequest(delta_seq_baseline=5 + i), MasterUnavailableError, 5)
            for i, call in enumerate(meets)
        ]
        assert [p.result().acked_seq for p in pending] == [5, 6]
        boom = rpc.start("Echo", echo_call, pb.HeartbeatRequest(node_id="boom"), MasterUnavailableError, 5)
        with pytest.raises(MasterUnavailableError, match=r"UNKNOWN.*a handler bug"):
            boom.result()
        assert channels[2]._made == 1 and len(channels[2]._idle) == 1  # an error status keeps it in step
        unread = echo_call.send(pb.HeartbeatRequest(delta_seq_baseline=7), 5)
        assert unread is not None and channels[2]._made == 1 and not channels[2]._idle
        conn = unread._conn
        del unread
        assert channels[2]._made == 0 and conn.closed  # closed: its answer may still come
        assert echo_call(pb.HeartbeatRequest(delta_seq_baseline=8), timeout=5).acked_seq == 8
    finally:
        for ch in channels:
            ch.close()
        for server in [*servers, echo]:
            server.stop()


def test_a_forked_child_opens_its_own_connection():
    secret = secrets.token_bytes(32)
    server = _echo_server(secret, max_connections=4)
    channel = wire.WireChannel(f"{HOST}:1", lambda _timeout: server.port, auth.ClientAuth("c", lambda: secret), 2)
    parse = pb.HeartbeatResponse.FromString
    try:
        assert channel.call("Echo", pb.HeartbeatRequest(delta_seq_baseline=1), parse, 2).acked_seq == 1
        parents = channel._idle[0]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once, whatever happens
            code = 1
            try:
                got = channel.call("Echo", pb.HeartbeatRequest(delta_seq_baseline=2), parse, 2).acked_seq
                code = 0 if got == 2 and channel._idle and channel._idle[0] is not parents else 2
            finally:
                os.write(w, bytes([code]))
                os._exit(0)
        os.close(w)
        assert os.read(r, 1) == b"\x00"
        os.close(r)
        os.waitpid(pid, 0)
        # The parent's connection is still in step: the child never wrote on it.
        assert channel.call("Echo", pb.HeartbeatRequest(delta_seq_baseline=3), parse, 2).acked_seq == 3
        assert channel._idle == [parents] and parents.seq == 2
    finally:
        channel.close()
        server.stop()


# -- time: an error within the deadline, never a hang -------------------------------------------------
@pytest.mark.parametrize("transport", ["wire", "streams"])
def test_a_master_that_stops_answering_gives_an_error_after_the_timeout_then_recovers(monkeypatch, transport):
    monkeypatch.setenv("UMBP_WIRE", "1" if transport == "wire" else "0")
    on_wire = transport == "wire"
    master = MasterProcess(free_port())
    client = UMBPMasterClient(master.address, "n1")
    try:
        client.register_self({}, "127.0.0.1:1", b"")
        assert (client._wire_port > 0) == on_wire
        assert client.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE  # the connection is open
        assert (client._wire._made, client._hb_stream._made) == ((1, 0) if on_wire else (0, 1))
        _freeze(master.proc.pid)
        try:
            start = time.monotonic()
            with pytest.raises(MasterUnavailableError, match="no answer within"):
                client.heartbeat([], {})
            took = time.monotonic() - start
            assert rpc.timeout_s() <= took < rpc.timeout_s() + 1.5
            assert client._wire._made == 0  # that connection is gone: its late answer is never read
        finally:
            os.kill(master.proc.pid, signal.SIGCONT)
        # Answered again, over a new connection (or stream).
        assert client.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
        assert (client._wire._made, client._hb_stream._made) == ((1, 0) if on_wire else (0, 1))
        assert client._wire._refused_until == 0.0
    finally:
        client.close()
        master.kill()


def test_a_master_frozen_before_the_first_connection_gives_an_error_within_the_deadline():
    """The handshake's wait comes off the call's deadline: the gRPC fallback gets only what is left."""
    master = MasterProcess(free_port())
    client = UMBPMasterClient(master.address, "n1")
    try:
        client.register_self({}, "127.0.0.1:1", b"")
        _freeze(master.proc.pid)
        try:
            start = time.monotonic()
            with pytest.raises(MasterUnavailableError):
                client.heartbeat([], {})
            took = time.monotonic() - start
            assert took < rpc.timeout_s() + 1.5, f"took {took:.1f}s, deadline {rpc.timeout_s():.1f}s"
        finally:
            os.kill(master.proc.pid, signal.SIGCONT)
    finally:
        client.close()
        master.kill()


def test_a_master_that_dies_gives_an_error_and_a_restarted_one_is_reached_over_the_wire():
    port = free_port()
    master = MasterProcess(port)
    client = UMBPMasterClient(master.address, "n1")
    try:
        client.register_self({}, "127.0.0.1:1", b"")
        assert client.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
        first_port = client._wire._port
        assert first_port == client._wire_port > 0
        master.kill()
        start = time.monotonic()
        with pytest.raises(MasterUnavailableError):
            client.heartbeat([], {})
        assert time.monotonic() - start < rpc.timeout_s() + 1.5
        with pytest.raises(MasterUnavailableError):  # still down: its old port refuses the next connection
            client.heartbeat([], {})
        assert client._wire._refused_until > 0.0
        master = MasterProcess(port)  # the same address, the same secret file; a new wire port

        def registered() -> bool:  # gRPC's channel may still be backing off from the dead master
            try:
                client.register_self({}, "127.0.0.1:1", b"")
            except MasterUnavailableError:
                return False
            return True

        assert wait_for(registered, timeout=15, every=0.2)
        # The registration's answer names the new port: the refusal period of the dead one ends at once.
        assert client._wire_port not in (0, first_port) and client._wire._refused_until == 0.0
        assert client.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
        assert client.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
        assert client._wire._made == 1 and client._wire._port == client._wire_port
        assert len(client._wire._idle) == 1 and client._wire._idle[0].seq >= 1
    finally:
        client.close()
        master.kill()


@pytest.mark.parametrize("transport", ["wire", "streams"])
def test_a_peer_that_stops_answering_fails_the_get_within_the_deadlines(monkeypatch, transport):
    """The writer's connection (or, with the wire off, its streams) to the peer is open (a put and
    a get went over it); the peer then stops (SIGSTOP): a get of its block ends, False or
    PeerUnavailableError, within the deadlines of the call and its retry through the master, never
    hangs; nothing is reported read."""
    monkeypatch.setenv("UMBP_WIRE", "1" if transport == "wire" else "0")
    with running_cluster("reader", {"node_id": "frozen", "capacity": 16 * PAGE}) as (_master, (peer,), client):
        data = np.arange(PAGE, dtype=np.uint8)
        assert client.put_from_ptr("cold", data.ctypes.data, PAGE)
        back = np.zeros_like(data)
        assert client.get_into_ptr("cold", back.ctypes.data, PAGE)
        assert np.array_equal(back, data)
        calls = client._peers[peer.address][2]
        if transport == "wire":
            assert calls["BatchResolveKeys"]._channel._made >= 1
            assert all(call._fallback._made == 0 for call in calls.values())
        else:
            assert calls["BatchResolveKeys"]._fallback._made >= 1
        _freeze(peer.pid)
        try:
            back[:] = 0
            start = time.monotonic()
            try:
                got = client.get_into_ptr("cold", back.ctypes.data, PAGE)
            except PeerUnavailableError:
                got = False
            took = time.monotonic() - start
            assert not got
            assert not back.any()
            assert rpc.timeout_s() <= took < 2 * rpc.timeout_s() + 2
        finally:
            os.kill(peer.pid, signal.SIGCONT)

# SPDX-License-Identifier: MIT
"""The data path's calls over one plain TCP connection each, beside gRPC.

NOTE [wire]: a put of a short batch is four exchanges in four processes (the client's inline call
to each owner, and each owner's heartbeat to the master that acknowledges the commit), and on
grpcio each exchange costs more than the work it carries: a message on an open stream wakes three
threads on each side (the request iterator, the channel's spin thread, the server's response
pump) and grpc's core polls on threads of its own. Measured on the 2-core bench machine, a 16-key
batch put cost 4.8 ms of CPU over the four processes, two thirds of it gRPC (``py-spy --gil``
and ``/proc``), and the batch's wall time was that CPU spread over two cores. Here one blocking
socket carries one request and its answer at a time: the caller writes a frame and reads the
answer in its own thread, and the server reads, serves and writes in the connection's thread.

The handshake, the frames and their MACs are native code (mori.umbp._C, src/wire/), which runs
without the GIL and takes it only for the call itself: a round trip to a trivial handler on the
bench machine took 72-78 us with them in Python (0.3.16), 35-47 us native, against 18-23 us for
a bare Python socket ping-pong between the same two processes. tests/wire_reference.py writes
the protocol out in Python, and test_wire.py checks the native side against it byte for byte.

Which calls: the peer's STREAMED_PEER_CALLS and the master's ``Heartbeat``, the calls of the put
and get paths; every other call stays gRPC. Bodies are the gRPC calls' protobuf messages, served
by the same handler methods (``handler(request, context)``), so semantics cannot drift. A server
advertises its port (``GetPeerInfoResponse.wire_port``, ``RegisterClientResponse.wire_port``); a
caller whose server advertises none (an older version), or whose connection the server refused
(full), or that set UMBP_WIRE=0, makes the gRPC call instead.

Security, as NOTE [pool authentication] asks of every listener:

- *Membership before work.* The server speaks first: a 16-byte nonce. The caller answers with
  its nonce, its node id and HMAC-SHA256(secret, "client", both nonces, node); the server checks
  it in constant time before it reads a frame, then proves the secret back (the same MAC over
  "server"), so no answer reaches a non-member and no block goes to an impostor. A refused caller
  gets one byte saying so and the connection closes.
- *Bounds on the unauthenticated.* The handshake must finish within HANDSHAKE_TIMEOUT_S, reads at
  most its fixed size (a node id longer than MAX_NODE_ID_BYTES is refused), and at most MAX_HANDSHAKES
  run at once; past that, or past the server's ``max_connections``, a connection is closed as
  soon as it is accepted.
- *Frames.* Each direction has its own key, HMAC(secret, direction, both nonces, node), and each
  frame its sequence number, so a frame replayed, reordered or moved to another connection fails
  its MAC; an announced length above MAX_FRAME_BYTES (gRPC's default receive cap, which the gRPC
  path enforces) closes the connection before anything is allocated.
- *Time.* A caller waits at most its deadline (a timeout closes the connection: its answer may
  still come, and must not be read as the next call's), and a server closes a connection idle for
  IDLE_TIMEOUT_S; callers retire theirs before half of that.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp import _C, rpc, settings
from mori.umbp.auth import ClientAuth, caller_node, check_secret
from mori.umbp.stream import StreamError

log = logging.getLogger(__name__)

# The protocol's bounds, as the native wire (mori.umbp._C, src/wire/protocol.hpp) enforces them.
MAX_NODE_ID_BYTES: int = _C.MAX_NODE_ID_BYTES  # UMBP_MAX_NODE_ID_BYTES allows at most 256
MAX_FRAME_BYTES: int = _C.MAX_FRAME_BYTES
HANDSHAKE_TIMEOUT_S = 5.0
MAX_HANDSHAKES: int = _C.MAX_HANDSHAKES
IDLE_TIMEOUT_S = 300.0
#: After a refused or failed connection, a caller makes gRPC calls for this long.
REFUSED_FOR_S = 30.0


class WireError(StreamError):
    """A failed wire call, shaped as gRPC's errors are (``code()``, ``details()``), so callers map
    it exactly as the gRPC call's failure (``mori.umbp.rpc.mapped``)."""


class WireRefused(Exception):
    """No wire connection could be made (nothing was sent): the caller makes the gRPC call."""


class _Aborted(Exception):
    def __init__(self, code: Any, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _Context:
    """A wire call's context as a gRPC handler sees it: ``abort`` ends the call with a status, and
    the deadline is the caller's (UMBP_RPC_TIMEOUT_MS), as for a stream's frame."""

    def abort(self, code: Any, details: str) -> None:
        raise _Aborted(code, details)

    def time_remaining(self) -> None:
        return None


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _host(address: str) -> str:
    """The host of ``host:port`` (brackets of an IPv6 literal dropped)."""
    return address.rsplit(":", 1)[0].strip("[]")


def _left(deadline: float) -> float:
    """Seconds to ``deadline`` (``time.monotonic()``), at least a millisecond: a socket timeout."""
    return max(0.001, deadline - time.monotonic())


def enabled() -> bool:
    return settings.get_bool("UMBP_WIRE")


# -- server ---------------------------------------------------------------------------------------
Handler = tuple[Callable[[bytes], Any], Callable[[Any, Any], Any]]


class WireServer:
    """Serves ``handlers`` ({method name: (parse, handler)}) to pool members on ``host``, port
    chosen by the kernel (``port``), a thread per connection, at most ``max_connections``. The
    handshake, frames and their bounds are native (mori.umbp._C); a frame's call runs here."""

    def __init__(
        self, secret: bytes, handlers: dict[str, Handler], host: str, what: str, max_connections: int = 64
    ) -> None:
        self._handlers = handlers
        self.what = what
        self._ctx = _Context()
        me = weakref.ref(self)  # the native server holds its dispatch: no cycle through it

        def dispatch(node: str, name: bytes, body: bytes) -> tuple[int, bytes]:
            server = me()
            if server is None:
                return grpc.StatusCode.UNAVAILABLE.value[0], b"the server is gone"
            return server._dispatch(node, name, body)

        # Cannot listen: WireSocketError, an OSError (serve() falls back to gRPC).
        self._native = _C.WireServer(
            check_secret(secret), host, max_connections, HANDSHAKE_TIMEOUT_S, IDLE_TIMEOUT_S, dispatch
        )
        self.port: int = self._native.port
        _servers.add(self)

    def start(self) -> WireServer:
        return self  # the native server accepts from its construction on

    def stop(self) -> None:
        """Closes the listener and every connection (a call in flight gets no answer)."""
        self._native.stop()

    def _dispatch(self, node: str, name: bytes, body: bytes) -> tuple[int, bytes]:
        caller_node.set(node)  # the connection's caller, for the handler (NOTE [pool authentication])
        return self._call(name.decode(errors="replace"), body, self._ctx)

    def _call(self, name: str, body: bytes, ctx: _Context) -> tuple[int, bytes]:
        entry = self._handlers.get(name)
        if entry is None:
            return grpc.StatusCode.UNIMPLEMENTED.value[0], f"{name!r} is not served over the wire".encode()
        parse, handler = entry
        try:
            request = parse(body)
        except Exception as exc:  # protobuf's DecodeError
            return grpc.StatusCode.INVALID_ARGUMENT.value[0], f"{name}: undecodable request: {exc}".encode()
        try:
            return 0, handler(request, ctx).SerializeToString()
        except _Aborted as exc:
            return exc.code.value[0], str(exc.details).encode()
        except Exception as exc:
            log.exception("wire %s: %s failed", self.what, name)
            return grpc.StatusCode.UNKNOWN.value[0], f"{name}: {type(exc).__name__}: {exc}".encode()


_servers: weakref.WeakSet[WireServer] = weakref.WeakSet()


@atexit.register
def _stop_servers() -> None:
    """Native connection threads call into Python: they end before the interpreter does."""
    for server in list(_servers):
        server.stop()


def serve(
    secret: bytes | None, handlers: dict[str, Handler], grpc_address: str, what: str, limit: int
) -> WireServer | None:
    """A started WireServer on the host of ``grpc_address`` (the server's gRPC listen address),
    or None where UMBP_WIRE=0, no secret is known (its gRPC server refuses every call too) or it
    cannot listen (then every call is gRPC, logged)."""
    if not enabled() or secret is None:
        return None
    host = _host(grpc_address)
    try:
        return WireServer(secret, handlers, host, what, limit).start()
    except OSError as exc:
        log.warning("wire %s: cannot listen on %s (%s): its callers use gRPC only", what, host, exc)
        return None


# -- caller ---------------------------------------------------------------------------------------
class _Connection:
    def __init__(self, native: _C.WireConnection) -> None:
        self.native = native
        self.used_at = time.monotonic()

    def send(self, name: bytes, body: bytes, deadline: float) -> None:
        self.native.send(name, body, _left(deadline))

    def receive(self, deadline: float) -> tuple[int, bytes]:
        """The answer to the request ``send`` wrote last."""
        status, answer = self.native.receive(_left(deadline))
        self.used_at = time.monotonic()
        return int(status), answer

    @property
    def seq(self) -> int:
        """Calls this connection has answered."""
        return int(self.native.seq)

    @property
    def closed(self) -> bool:
        return bool(self.native.closed)

    def close(self) -> None:
        self.native.close()


def _connect(host: str, port: int, node_id: str, secret: bytes, timeout: float) -> _Connection:
    """A connection past the handshake; WireRefused where none could be made (nothing sent), a
    WireError(UNAUTHENTICATED) where the server or the caller does not prove the pool secret."""
    node = node_id.encode()
    if len(node) > MAX_NODE_ID_BYTES:
        raise WireRefused(f"node id of {len(node)} bytes (the wire takes at most {MAX_NODE_ID_BYTES})")
    try:
        return _Connection(_C.WireConnection(host, port, node_id, secret, timeout))
    except _C.WireUnauthenticated as exc:
        raise WireError(grpc.StatusCode.UNAUTHENTICATED, str(exc)) from None
    except _C.WireNotAServer as exc:
        raise WireRefused(str(exc)) from None
    except (OSError, EOFError) as exc:  # closed at once: full, stopping, or not a wire server
        raise WireRefused(f"handshake: {exc}") from None


_channels: weakref.WeakSet[WireChannel] = weakref.WeakSet()


def _reset_after_fork() -> None:
    for channel in list(_channels):
        channel._after_fork()


os.register_at_fork(after_in_child=_reset_after_fork)


class WireChannel:
    """Calls to one server over up to ``size`` connections (one call in flight each); a call past
    them waits for none: it is made by gRPC (``fallback``) as are all calls while the server
    advertises no port or refused a connection within REFUSED_FOR_S."""

    def __init__(self, address: str, port: Callable[[float], int], auth: ClientAuth, size: int) -> None:
        self.address = address
        self._host = _host(address)
        # -1: to be asked (at first, and after a refusal: a restarted server listens elsewhere)
        self._port_fn, self._port = port, -1
        self._auth = auth
        self.size = size
        self._lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._made = 0
        self._refused_until = 0.0
        self._closed = False
        _channels.add(self)

    def moved(self) -> None:
        """The server may listen elsewhere now (it registered this node again): the next call asks
        for its port and tries the wire at once."""
        with self._lock:
            self._port, self._refused_until = -1, 0.0

    def _after_fork(self) -> None:
        """In a forked child: the parent's connections and lock are not this process's to use."""
        self._lock = threading.Lock()
        self._idle, self._made = [], 0

    def call(self, name: str, request: Any, parse: Callable[[bytes], Any], timeout: float) -> Any:
        """``parse``d answer; WireRefused when this call is to go over gRPC; WireError on failure."""
        return self.send(name, request, parse, timeout).answer()

    def send(self, name: str, request: Any, parse: Callable[[bytes], Any], timeout: float) -> SentCall:
        """The request written, its answer to be read by ``answer()`` (NOTE [overlapped calls] in
        mori.umbp.rpc); WireRefused when this call is to go over gRPC; WireError on failure."""
        deadline = time.monotonic() + timeout
        conn = self._take(deadline)
        sent = SentCall(self, conn, parse, deadline, timeout)
        sent.step(lambda: conn.send(name.encode(), request.SerializeToString(), deadline))
        return sent

    def _take(self, deadline: float) -> _Connection:
        now = time.monotonic()
        with self._lock:
            if self._closed or now < self._refused_until or not enabled():
                raise WireRefused("not now")
            while self._idle:
                conn = self._idle.pop()
                if now - conn.used_at < IDLE_TIMEOUT_S / 2:
                    return conn
                self._made -= 1
                conn.close()
            if self._made >= self.size:
                raise WireRefused("all connections busy")
            self._made += 1
        try:
            return self._open(deadline)
        except BaseException as exc:
            with self._lock:
                self._made -= 1
                if isinstance(exc, WireRefused):
                    self._refused_until, self._port = time.monotonic() + REFUSED_FOR_S, -1
            if isinstance(exc, WireRefused):
                log.info("no wire connection to %s (%s): gRPC calls for %.0fs", self.address, exc, REFUSED_FOR_S)
            raise

    def _open(self, deadline: float) -> _Connection:
        if self._port < 0:
            try:
                self._port = int(self._port_fn(_left(deadline)))
            except grpc.RpcError as exc:
                raise WireRefused(f"asking for its wire port: {exc}") from None
        if self._port == 0:
            raise WireRefused("it advertises no wire port")
        secret = self._auth.secret()
        if secret is None:
            raise WireRefused("no pool secret yet")
        return _connect(self._host, self._port, self._auth.node_id, secret, _left(deadline))

    def _give(self, conn: _Connection) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
            self._made -= 1
        conn.close()

    def _drop(self, conn: _Connection, lost: bool = False) -> None:
        """``lost``: it failed mid-call; the next connection asks for the port again (the server
        may have restarted elsewhere)."""
        with self._lock:
            self._made -= 1
            if lost:
                self._port = -1
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._made -= len(idle)
        for conn in idle:
            conn.close()


class SentCall:
    """A wire call whose request is written: ``answer()`` reads and parses its answer. The
    connection is the call's until then; one never read (its caller failed first) is closed
    when the call is dropped, since its answer may still come."""

    def __init__(
        self, channel: WireChannel, conn: _Connection, parse: Callable[[bytes], Any], deadline: float, timeout: float
    ) -> None:
        self._channel, self._conn, self._parse = channel, conn, parse
        self._deadline, self._timeout = deadline, timeout
        self._open = True

    def step(self, io: Callable[[], Any]) -> Any:
        """``io()`` on the call's connection; a failure gives the connection up and becomes a
        WireError (a timeout: DEADLINE_EXCEEDED)."""
        try:
            return io()
        except (OSError, EOFError) as exc:  # TimeoutError is an OSError
            self._release(lost=True)
            if isinstance(exc, TimeoutError):
                raise WireError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {self._timeout:.1f}s") from None
            raise WireError(grpc.StatusCode.UNAVAILABLE, f"the connection failed: {exc}") from None
        except BaseException:
            self._release()
            raise

    def answer(self) -> Any:
        status, answer = self.step(lambda: self._conn.receive(self._deadline))
        self._open = False
        self._channel._give(self._conn)
        if status:
            raise WireError(_CODES.get(status, grpc.StatusCode.UNKNOWN), answer.decode(errors="replace"))
        return self._parse(answer)

    def _release(self, lost: bool = False) -> None:
        if self._open:
            self._open = False
            self._channel._drop(self._conn, lost)

    def __del__(self) -> None:
        self._release()


class WireCall:
    """One method over ``channel``, called as a gRPC stub is (``call(request, timeout=...)``),
    made by ``fallback`` (the gRPC call) whenever the wire is not to be used."""

    def __init__(self, channel: WireChannel, name: str, parse: Callable[[bytes], Any], fallback: Any) -> None:
        self._channel, self._name, self._parse, self._fallback = channel, name, parse, fallback

    def __call__(self, request: Any, timeout: float | None = None) -> Any:
        budget = rpc.timeout_s() if timeout is None else timeout
        end = time.monotonic() + budget
        try:
            return self._channel.call(self._name, request, self._parse, budget)
        except WireRefused:  # what a failed connection attempt took comes off the fallback's deadline
            return self._fallback(request, timeout=_left(end))

    def send(self, request: Any, timeout: float) -> SentCall | None:
        """The request written (NOTE [overlapped calls] in mori.umbp.rpc); None where this call
        is to be made by gRPC (the caller makes it as a whole)."""
        try:
            return self._channel.send(self._name, request, self._parse, timeout)
        except WireRefused:
            return None

    def close(self) -> None:
        """Closes the channel (shared by the calls of one server: closing it twice is harmless)
        and the fallback where it holds streams."""
        if hasattr(self._fallback, "close"):
            self._fallback.close()
        self._channel.close()

# SPDX-License-Identifier: MIT
"""gRPC plumbing shared by servers and clients: the generated modules, channels and error mapping.

The generated modules build their message classes at import time, so static types cannot see
them; they are exposed here as ``Any`` on purpose, and the typed API lives in the modules above.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import grpc  # type: ignore[import-untyped]

from mori.umbp import settings
from mori.umbp.auth import ClientAuth, ServerAuth, SigningChannel
from mori.umbp.errors import AuthenticationError, InvalidArgumentError, PendingLimitError, UMBPError

pb: Any = importlib.import_module("mori.umbp._proto.umbp_pb2")
pb_grpc: Any = importlib.import_module("mori.umbp._proto.umbp_pb2_grpc")
peer_pb: Any = importlib.import_module("mori.umbp._proto.umbp_peer_pb2")
peer_grpc: Any = importlib.import_module("mori.umbp._proto.umbp_peer_pb2_grpc")

#: gRPC's default 4 MiB message cap is far above any control message; keep the default.
_CHANNEL_OPTIONS = [("grpc.enable_retries", 0)]

#: A connection, proven or not, holds at most this many calls in flight.
_SERVER_OPTIONS = [("grpc.max_concurrent_streams", 100)]

T = TypeVar("T")

#: The detail of a RESOURCE_EXHAUSTED a peer sends when a node's pending slots are at the cap.
PENDING_LIMIT_TAG = "UMBP_MAX_PENDING_SLOTS_PER_NODE"


def channel(address: str, auth: ClientAuth) -> Any:
    """A plaintext channel whose calls all carry the pool credential (NOTE [pool authentication])."""
    return SigningChannel(grpc.insecure_channel(address, options=_CHANNEL_OPTIONS), auth)


def timeout_s() -> float:
    return settings.get_int("UMBP_RPC_TIMEOUT_MS") / 1000.0


def call(what: str, fn: Callable[..., T], request: Any, error: type[UMBPError], timeout: float | None = None) -> T:
    """``fn(request)`` under a deadline; any gRPC failure becomes ``error`` naming the call and why."""
    deadline = timeout_s() if timeout is None else timeout
    try:
        return fn(request, timeout=deadline)
    except grpc.RpcError as exc:
        raise mapped(what, exc, error, deadline) from None


#: NOTE [overlapped calls]: calls to several peers overlap. A wire call (mori.umbp.wire) that
#: can be split is: ``start`` writes its request in the caller's thread and ``result()`` reads
#: the answer, so the peers serve the round's calls at once and no thread is woken for them.
#: Other calls overlap as blocking calls on these threads. grpcio's own ``future()`` starts a
#: thread per call on a channel with no call in flight (its "channel spin" thread, gone again
#: once the call ends), which cost more than the RPC itself here (~0.7 ms a batch of two
#: owners); a blocking call on a kept thread costs a queue handoff. A round's last call is not
#: handed off at all: started with ``overlap`` False, it runs in the caller's thread when its
#: ``result()`` is taken, which the caller does first.
_OVERLAP_WORKERS = 16
_overlap_pool: ThreadPoolExecutor | None = None
_overlap_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _overlap_pool
    with _overlap_lock:
        if _overlap_pool is None:
            _overlap_pool = ThreadPoolExecutor(_OVERLAP_WORKERS, thread_name_prefix="umbp-rpc")
        return _overlap_pool


def _reset_after_fork() -> None:
    global _overlap_pool, _overlap_lock
    _overlap_pool, _overlap_lock = None, threading.Lock()  # the parent's threads are not in the child


os.register_at_fork(after_in_child=_reset_after_fork)


class Pending:
    """A call in flight (``start``); ``result()`` waits for it as ``call`` would."""

    def __init__(self, what: str, fn: Any, request: Any, error: type[UMBPError], deadline: float, now: bool) -> None:
        self.what, self._error, self._deadline = what, error, deadline
        self._fn, self._request = fn, request
        self._future: Future[Any] | None = None
        self._sent: Any = None
        self._failure: UMBPError | None = None
        if now:  # NOTE [overlapped calls]
            self._sent = self._send() if hasattr(fn, "send") else None
            if self._sent is None and self._failure is None:
                self._future = _pool().submit(call, what, fn, request, error, deadline)

    def _send(self) -> Any:
        """The split call's request written (None: it is not to be split, or it failed)."""
        try:
            return self._fn.send(self._request, self._deadline)
        except grpc.RpcError as exc:
            self._failure = mapped(self.what, exc, self._error, self._deadline)
            return None

    def result(self) -> Any:
        if self._failure is not None:
            raise self._failure
        if self._sent is not None:
            try:
                return self._sent.answer()
            except grpc.RpcError as exc:
                raise mapped(self.what, exc, self._error, self._deadline) from None
        if self._future is None:  # a lone call: blocking, in the caller's thread
            return call(self.what, self._fn, self._request, self._error, self._deadline)
        return self._future.result()


def start(
    what: str, fn: Any, request: Any, error: type[UMBPError], timeout: float | None = None, overlap: bool = True
) -> Pending:
    """Sends ``fn(request)`` without waiting, so calls to several peers overlap; with ``overlap``
    False (the only or last call of its round) it is sent, blocking, by ``result()``."""
    deadline = timeout_s() if timeout is None else timeout
    return Pending(what, fn, request, error, deadline, overlap)


def mapped(what: str, exc: Any, error: type[UMBPError], deadline: float) -> UMBPError:
    """``error`` (or the typed error the status code calls for) naming the call and why."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.INVALID_ARGUMENT:  # the request was wrong, not the connection
        return InvalidArgumentError(f"{what} rejected: {detail}")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationError(
            f"{what} refused: {detail} (this process must hold the pool secret: UMBP_POOL_SECRET, "
            "the config's pool_secret, or the master's secret file on its host)"
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and PENDING_LIMIT_TAG in (detail or ""):
        return PendingLimitError(f"{what} refused: {detail}")
    out = error(f"{what} failed ({code.name if code else 'error'}, deadline {deadline:.1f}s): {detail}")
    out.unimplemented = code == grpc.StatusCode.UNIMPLEMENTED  # a server of an older version
    return out


def server(auth: ServerAuth, workers: int = 16) -> Any:
    """A server that serves only callers ``auth`` verifies (NOTE [pool authentication])."""
    return grpc.server(
        ThreadPoolExecutor(max_workers=workers), interceptors=[auth], options=[*_CHANNEL_OPTIONS, *_SERVER_OPTIONS]
    )


def bind(srv: Any, address: str) -> int:
    """Binds ``address`` (host:port, port 0 = any); returns the port or raises OSError naming it."""
    try:
        port = int(srv.add_insecure_port(address))
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}: the port is taken or the address is invalid")
    return port

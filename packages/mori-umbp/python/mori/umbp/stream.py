# SPDX-License-Identifier: MIT
"""One long-lived gRPC stream that carries request/answer pairs, one at a time, in order.

NOTE [heartbeat stream]: a node's heartbeats, one of which every put waits for (the master's
acknowledgement of its commits), go over one stream per node instead of a unary call each. In
grpcio a message on an open stream costs about half a unary call (0.15 against 0.27 ms a round
trip between two processes on the 2-core bench machine, measured with a bare echo server): no
call to set up, and the server's worker, already in the handler, gets the frame with one wakeup
where a unary call takes three. Security is the unary one: the stream's opening carries a
credential (over an empty body) that the server's interceptor checks before the handler runs, and
every frame is a ``SignedFrame`` whose body the server checks (MAC, window, nonce) and requires
to be signed by the node that opened the stream before it reads it (mori.umbp.auth). An open
stream holds one server worker, so a master serves at most MAX_HEARTBEAT_STREAMS at once and
answers the next one RESOURCE_EXHAUSTED; that node, and a node whose master predates the stream
(UNIMPLEMENTED), heartbeats by unary calls (``StreamRefused``). A frame unanswered within the
call's timeout cancels the stream and raises the caller's error, as a unary deadline would; the
next call opens a new stream. A stream lives at most LIFETIME_S, so a client that stops answering
holds the master's worker no longer than that.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp import rpc

#: A stream's deadline; it is replaced by a new one after half of it.
LIFETIME_S = 120.0
#: How often the watchdog looks for a frame past its timeout (the error comes at most this late).
WATCH_EVERY_S = 0.05
#: After a refusal (no stream served, or no room for another), unary calls for this long.
REFUSED_FOR_S = 30.0

log = logging.getLogger(__name__)

_live: weakref.WeakSet[SignedStream] = weakref.WeakSet()  # the streams the watchdog looks after
_watch_lock = threading.Lock()
_watchdog: threading.Thread | None = None


def _watch() -> None:
    """One thread per process while streams are open: cancels each whose frame is past its timeout."""
    global _watchdog
    while True:
        time.sleep(WATCH_EVERY_S)
        with _watch_lock:
            streams = list(_live)
            if not streams:
                _watchdog = None
                return
        for stream in streams:
            stream.check()


def _watched(stream: SignedStream) -> None:
    global _watchdog
    with _watch_lock:
        _live.add(stream)
        if _watchdog is None:
            _watchdog = threading.Thread(target=_watch, name="umbp-stream-watchdog", daemon=True)
            _watchdog.start()


def _reset_after_fork() -> None:
    global _watchdog, _watch_lock, _live
    _watchdog, _watch_lock, _live = None, threading.Lock(), weakref.WeakSet()  # no thread in the child


os.register_at_fork(after_in_child=_reset_after_fork)


class StreamError(grpc.RpcError):
    """A stream's own failure, shaped as the RpcError a unary call raises (``rpc.call`` maps it)."""

    def __init__(self, code: Any, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> Any:
        return self._code

    def details(self) -> str:
        return self._details


class StreamRefused(Exception):
    """The server does not serve the stream (older version) or has no room for another: the
    caller uses the unary call. Raised only before the server acted on any frame."""


def _frames(outbox: queue.SimpleQueue[Any]) -> Iterator[Any]:
    while True:
        frame = outbox.get()
        if frame is None:
            return
        yield frame


class StreamSlots:
    """The server's side of NOTE [heartbeat stream]: at most ``limit`` streams open at once (each
    holds a server worker; the next is answered RESOURCE_EXHAUSTED), each frame served in order by
    the unary handler of its body. ``stop()`` ends every stream at its next frame: a stopping
    server lets RPCs in flight run for its grace period, and a stream never finishes on its own,
    so without it a master being shut down went on recording heartbeats (which moved the restart
    grace's reference time, NOTE [restart grace], past the nodes whose streams had closed)."""

    def __init__(self, limit: int, refusal: str) -> None:
        self.limit, self._refusal = limit, refusal
        self._open = threading.BoundedSemaphore(limit)
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def serve(
        self,
        bodies: Iterator[bytes],
        ctx: Any,
        parse: Callable[[bytes], Any],
        handler: Callable[[Any, Any], Any],
        frame_ctx: Any = None,
    ) -> Iterator[Any]:
        """``handler(parse(body), frame_ctx or ctx)`` for each frame; ``bodies`` were each checked
        by the pool credential before they reach here."""
        if not self._open.acquire(blocking=False):
            ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.limit} streams are open (the limit); {self._refusal}")
        try:
            for body in bodies:
                if self._stopping.is_set():
                    ctx.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
                yield handler(parse(body), ctx if frame_ctx is None else frame_ctx)
        finally:
            self._open.release()


class SignedStream:
    """``call(request)``: one SignedFrame out, one answer back, over a stream opened by ``open_``
    (a stub's stream-stream method on a ``SigningChannel``). A failure raises grpc.RpcError, as a
    unary call does (``rpc.call`` names the call and maps it to the caller's error)."""

    def __init__(self, open_: Any, frame_type: Any, what: str) -> None:
        self._open_fn, self._frame_type, self.what = open_, frame_type, what
        self._lock = threading.Lock()  # one frame in flight: answers come in order
        self._call: Any = None
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._opened_at = 0.0
        self._answered = False  # the current stream answered a frame (so the server serves it)
        self._armed_until: float | None = None  # a frame in flight must be answered by then
        self._fired = False  # the watchdog cancelled the stream
        self._arm_lock = threading.Lock()  # arming, disarming and firing, so a late fire is seen

    def call(self, request: Any, timeout: float) -> Any:
        body = request.SerializeToString()
        with self._lock:
            if self._call is not None and (self._fired or time.monotonic() - self._opened_at > LIFETIME_S / 2):
                self._end()  # cancelled by a late fire, or old
            if self._call is None:
                self._begin()
            frame = self._frame_type(credential=self._open_fn.frame_token(body) or "", body=body)
            with self._arm_lock:
                self._fired = False
                self._armed_until = time.monotonic() + timeout
            self._outbox.put(frame)
            try:
                answer = next(self._call)
            except grpc.RpcError as exc:
                first, fired = not self._answered, self._fired
                self._end()
                code = exc.code() if hasattr(exc, "code") else None
                refused = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.RESOURCE_EXHAUSTED)
                if first and code in refused and rpc.PENDING_LIMIT_TAG not in (exc.details() or ""):
                    raise StreamRefused(f"{self.what}: {exc.details()}") from None
                if fired:
                    raise StreamError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout:.1f}s") from None
                raise
            except StopIteration:
                self._end()
                raise StreamError(grpc.StatusCode.UNAVAILABLE, "the server ended the stream") from None
            finally:
                with self._arm_lock:
                    self._armed_until = None
            self._answered = True
            return answer

    def _begin(self) -> None:
        self._outbox = queue.SimpleQueue()
        self._call = self._open_fn(_frames(self._outbox), timeout=LIFETIME_S)
        self._opened_at = time.monotonic()
        self._answered = False
        _watched(self)

    def _end(self) -> None:
        call, self._call = self._call, None
        self._outbox.put(None)
        if call is not None:
            call.cancel()

    def check(self) -> None:
        """Cancels the stream if its frame in flight is past its timeout (the watchdog calls it)."""
        with self._arm_lock:
            until, call = self._armed_until, self._call
            if until is None or call is None or time.monotonic() <= until:
                return
            self._fired = True
        call.cancel()  # the caller's next() raises CANCELLED: reported as no answer in time

    def close(self) -> None:
        with self._lock:
            self._end()
        with _watch_lock:
            _live.discard(self)


class StreamPool:
    """Calls of one method to one server over up to ``size`` streams (one frame in flight each),
    a unary call when all are busy or the server refused a stream. Called as the unary stub is:
    ``pool(request, timeout=...)``; a failure raises grpc.RpcError as the stub does."""

    def __init__(self, open_: Any, unary: Callable[..., Any], frame_type: Any, what: str, size: int) -> None:
        self._open_fn, self._unary, self._frame_type = open_, unary, frame_type
        self.what, self.size = what, size
        self._lock = threading.Lock()
        self._idle: list[SignedStream] = []
        self._made = 0
        self._refused_until = 0.0
        self._closed = False

    def __call__(self, request: Any, timeout: float | None = None) -> Any:
        deadline = rpc.timeout_s() if timeout is None else timeout
        stream = self._take()
        if stream is None:
            return self._unary(request, timeout=deadline)
        try:
            answer = stream.call(request, deadline)
        except StreamRefused as exc:
            log.info("%s; unary calls for %.0fs", exc, REFUSED_FOR_S)
            self._drop(stream, refused=True)
            return self._unary(request, timeout=deadline)
        except BaseException:
            self._give(stream)  # closed by its failure; the next call opens it again
            raise
        self._give(stream)
        return answer

    def _take(self) -> SignedStream | None:
        with self._lock:
            if self._closed or time.monotonic() < self._refused_until:
                return None
            if self._idle:
                return self._idle.pop()
            if self._made >= self.size:
                return None
            self._made += 1
        return SignedStream(self._open_fn, self._frame_type, self.what)

    def _give(self, stream: SignedStream) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(stream)
                return
        stream.close()

    def _drop(self, stream: SignedStream, refused: bool) -> None:
        stream.close()
        with self._lock:
            self._made -= 1
            if refused:
                self._refused_until = time.monotonic() + REFUSED_FOR_S
                idle, self._idle = self._idle, []
                self._made -= len(idle)
            else:
                idle = []
        for other in idle:
            other.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for stream in idle:
            stream.close()

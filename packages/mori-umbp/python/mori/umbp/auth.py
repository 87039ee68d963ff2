# SPDX-License-Identifier: MIT
"""Pool membership: the pool secret, and the HMAC every master and peer RPC carries.

NOTE [pool authentication]: a pool has one secret (UMBP_POOL_SECRET, or a config field; absent,
the master generates 32 random bytes and writes them to ``pool-<port>.secret`` in a 0700
directory of its user, where members on its host read them, the way a mori-io job secret
travels to its peers out of band). Every RPC to the master or a peer carries, in the gRPC
metadata ``x-umbp-auth``, ``v1.<ms>.<nonce>.<node>.<mac>``: the caller's clock in ms, 16 random
bytes, its node id (hex of UTF-8) and HMAC-SHA256(secret, method, ms, nonce, node, request
bytes). A server interceptor checks it before the request is even parsed: the clock within
UMBP_AUTH_WINDOW_MS, the MAC in constant time, the nonce not seen within the window (a replay
inside it is refused too). A caller without the secret gets UNAUTHENTICATED and nothing else, so
no reply (routes, peer info, slots) carries an engine secret or a page address to a non-member.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import itertools
import logging
import os
import secrets
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp import settings
from mori.umbp.errors import ConfigError

log = logging.getLogger(__name__)

METADATA_KEY = "x-umbp-auth"
SECRET_BYTES = 32
MIN_SECRET, MAX_SECRET = 16, 256
_VERSION = "v1"
#: Most nonces remembered per server; a member signing faster than this per window is refused
#: (UNAUTHENTICATED, retryable) rather than growing the cache without bound.
MAX_NONCES = 1 << 20

#: The authenticated caller's node id while its RPC runs (set by the server interceptor).
caller_node: contextvars.ContextVar[str] = contextvars.ContextVar("umbp_caller_node", default="")


# -- the secret -----------------------------------------------------------------------------------
def check_secret(secret: object, name: str = "pool_secret") -> bytes:
    if not isinstance(secret, bytes) or not MIN_SECRET <= len(secret) <= MAX_SECRET:
        shown = f"{len(secret)} bytes" if isinstance(secret, bytes) else type(secret).__name__
        raise ConfigError(f"{name} must be {MIN_SECRET} to {MAX_SECRET} bytes, got {shown}")
    return secret


def secret_dir() -> Path:
    configured = settings.get_str("UMBP_POOL_SECRET_DIR")
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "mori-umbp" if runtime else Path(f"/tmp/mori-umbp-{os.getuid()}")


def secret_file(master_address: str) -> Path:
    """Where the master listening on ``master_address``'s port writes a generated secret."""
    port = master_address.rsplit(":", 1)[-1]
    return secret_dir() / f"pool-{port}.secret"


def _private_dir(path: Path) -> Path:
    """``path`` made (0700) or checked: ours, a directory, no access for others."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ConfigError(
            f"UMBP_POOL_SECRET_DIR={str(path)!r} must be a directory of uid {os.getuid()} with mode 0700 "
            f"(is uid {st.st_uid}, mode {oct(st.st_mode & 0o777)})"
        )
    return path


def _read_file(path: Path) -> bytes | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return check_secret(bytes.fromhex(text), str(path))
    except ValueError:
        raise ConfigError(f"pool secret file {str(path)!r} does not hold 16 to 256 bytes of hex") from None


def member_secret(explicit: bytes | None, master_address: str) -> bytes | None:
    """A member's secret: ``explicit``, else UMBP_POOL_SECRET, else the master's file on this host;
    None when none is known yet (the master may not have written it)."""
    if explicit is not None:
        return check_secret(explicit)
    configured = settings.get_str("UMBP_POOL_SECRET")
    if configured:
        return bytes.fromhex(configured)
    _private_dir(secret_dir())
    return _read_file(secret_file(master_address))


def master_secret(explicit: bytes | None, listen_address: str) -> bytes:
    """The master's secret: as a member's, else a fresh one written (0600) for the members. A
    master restarted on the same port reuses the file, so running members keep working."""
    known = member_secret(explicit, listen_address)
    if known is not None:
        return known
    path = secret_file(listen_address)
    secret = secrets.token_bytes(SECRET_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex())
    try:
        os.link(tmp, path)  # never replaces one another master wrote meanwhile
    except FileExistsError:
        os.unlink(tmp)
        found = _read_file(path)
        assert found is not None
        return found
    os.unlink(tmp)
    log.info("generated the pool secret in %s (members on this host read it there)", path)
    return secret


# -- signing ------------------------------------------------------------------------------------
# NOTE [credential cost]: a credential is made and checked on every RPC, on the path of every
# put and get, and in a gRPC process every Python step there is also a chance to lose the GIL
# to gRPC's own threads; so the per-call work is kept to a few C calls: the HMAC keyed once
# and copied in C, one header per call, a nonce from a counter, the request serialized once.
def keyed(secret: bytes) -> Any:
    """HMAC-SHA256 keyed once; each request copies it (keying per call costs more than the MAC).
    The OpenSSL object inside ``hmac.HMAC`` is used where there is one: its ``copy`` is one C
    call, the wrapper's a Python method building a new wrapper (same digest either way)."""
    key = hmac.new(secret, digestmod=hashlib.sha256)
    inner = getattr(key, "_hmac", None)  # CPython with OpenSSL: _hashlib.HMAC
    return inner if inner is not None and hasattr(inner, "copy") else key


def _mac(key: Any, method: str, ms: str, nonce: str, node: str, body: bytes) -> str:
    h = key.copy()
    # No header field holds a newline (a method path, digits, hex), so the header is unambiguous.
    h.update(f"{_VERSION}\n{method}\n{ms}\n{nonce}\n{node}\n".encode())
    h.update(body)
    return str(h.hexdigest())


# A nonce need only never repeat within the window (the MAC, not the nonce, proves the secret):
# 8 random bytes per process, drawn again in a forked child, then a counter.
_nonce_prefix = secrets.token_hex(8)
_nonce_counter = itertools.count()


def _new_nonce_prefix() -> None:
    global _nonce_prefix
    _nonce_prefix = secrets.token_hex(8)


os.register_at_fork(after_in_child=_new_nonce_prefix)


def new_nonce() -> str:
    """32 hex digits, unique per call in this process (``next`` on a count is atomic under the GIL)."""
    return f"{_nonce_prefix}{next(_nonce_counter) & 0xFFFFFFFFFFFFFFFF:016x}"


def sign(key: Any, method: str, node_id: str, body: bytes, now_ms: int | None = None) -> str:
    """The ``x-umbp-auth`` value of one request; ``key`` is ``keyed(secret)``."""
    ms = str(time.time_ns() // 1_000_000 if now_ms is None else now_ms)
    nonce = new_nonce()
    node = node_id.encode().hex()
    return f"{_VERSION}.{ms}.{nonce}.{node}.{_mac(key, method, ms, nonce, node, body)}"


class Verifier:
    """Checks credentials: window, MAC (constant time), nonce seen once."""

    def __init__(self, secret: bytes, window_ms: int | None = None) -> None:
        self._key = keyed(check_secret(secret))
        self.window_ms = settings.get_int("UMBP_AUTH_WINDOW_MS") if window_ms is None else window_ms
        self._lock = threading.Lock()
        self._nonces: OrderedDict[str, float] = OrderedDict()  # nonce -> when it may be forgotten
        self._first_expiry = float("inf")  # the oldest entry's time: nothing to forget before it

    def verify(self, method: str, token: str | None, body: bytes) -> str:
        """The caller's node id, or raises PermissionError saying why not (never what was expected)."""
        if not token:
            raise PermissionError("no pool credential (x-umbp-auth); set UMBP_POOL_SECRET")
        parts = token.split(".")
        if len(parts) != 5 or parts[0] != _VERSION:
            raise PermissionError("malformed pool credential")
        _, ms, nonce, node, mac = parts
        now = time.time() * 1000
        try:
            skew = abs(now - int(ms))
            node_id = bytes.fromhex(node).decode()
        except ValueError:
            raise PermissionError("malformed pool credential") from None
        if skew > self.window_ms:
            raise PermissionError(
                f"credential timestamp is {skew / 1000:.1f}s off this clock (UMBP_AUTH_WINDOW_MS={self.window_ms})"
            )
        if not hmac.compare_digest(mac, _mac(self._key, method, ms, nonce, node, body)):
            raise PermissionError("the pool credential does not prove the pool secret")
        nonces = self._nonces
        with self._lock:
            if self._first_expiry < now:
                while nonces and next(iter(nonces.values())) < now:
                    nonces.popitem(last=False)
                self._first_expiry = next(iter(nonces.values())) if nonces else float("inf")
            if nonce in nonces:
                raise PermissionError("replayed request (nonce already used)")
            if len(nonces) >= MAX_NONCES:
                raise PermissionError(f"more than {MAX_NONCES} requests within UMBP_AUTH_WINDOW_MS; retry")
            forget_at = now + 2 * self.window_ms  # past it, the window refuses the stamp anyway
            nonces[nonce] = forget_at
            if forget_at < self._first_expiry:
                self._first_expiry = forget_at
        return node_id


# -- gRPC -------------------------------------------------------------------------------------------
class ServerAuth(grpc.ServerInterceptor):
    """Refuses every RPC (unary, or a stream of signed frames) whose credential does not verify,
    before its request is parsed.
    Built before the port is bound; until ``set_secret`` it refuses everything."""

    #: Refusals are logged at WARNING at most this often (a flood must not flood the log).
    LOG_EVERY_S = 10.0

    def __init__(self, secret: bytes | None = None) -> None:
        self.verifier: Verifier | None = None if secret is None else Verifier(secret)
        self._handlers: dict[str, Any] = {}  # method -> its checked handler (built once)
        self._refused = 0
        self._logged_at = 0.0

    def set_secret(self, secret: bytes) -> None:
        self.verifier = Verifier(secret)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        checked = self._handlers.get(details.method)
        if checked is None:
            handler = continuation(details)
            if handler is None:
                return None
            checked = self._handlers.setdefault(details.method, self._wrap(details.method, handler))
        return checked

    def _wrap(self, method: str, handler: Any) -> Any:
        if handler.stream_stream is not None:
            return self._wrap_stream(method, handler)
        if handler.unary_unary is None:  # unary calls and signed-frame streams only; refuse the rest
            return grpc.unary_unary_rpc_method_handler(
                lambda _req, ctx: ctx.abort(grpc.StatusCode.UNIMPLEMENTED, "only unary RPCs are served")
            )
        behavior, parse = handler.unary_unary, handler.request_deserializer

        def checked(body: bytes, ctx: Any) -> Any:
            node = self._check(method, _token(ctx), body, ctx)
            # No reset: gRPC runs each RPC in a context of its own, and every handler that can
            # read caller_node runs behind this check, which sets it first.
            caller_node.set(node)
            return behavior(parse(body) if parse else body, ctx)

        return grpc.unary_unary_rpc_method_handler(
            checked, request_deserializer=None, response_serializer=handler.response_serializer
        )

    def _wrap_stream(self, method: str, handler: Any) -> Any:
        """NOTE [heartbeat stream]: the opening's credential (over an empty body) is checked before
        the handler runs, so an unproven connection holds no worker past this check; then every
        frame (a SignedFrame) is checked as a unary request is, and must be signed by the node that
        opened the stream, before the handler sees its body (bytes)."""
        behavior, parse = handler.stream_stream, handler.request_deserializer

        def checked(frames: Any, ctx: Any) -> Any:
            node = self._check(method, _token(ctx), b"", ctx)
            caller_node.set(node)

            def bodies() -> Any:
                for raw in frames:
                    frame = parse(raw) if parse else raw
                    signer = self._check(method, frame.credential, frame.body, ctx)
                    if signer != node:
                        self._log_refusal(method, ctx, PermissionError(f"frame signed by {signer!r}"))
                        ctx.abort(grpc.StatusCode.UNAUTHENTICATED, "a frame is signed by another node than the stream")
                    yield frame.body

            return behavior(bodies(), ctx)

        return grpc.stream_stream_rpc_method_handler(
            checked, request_deserializer=None, response_serializer=handler.response_serializer
        )

    def _check(self, method: str, token: str | None, body: bytes, ctx: Any) -> str:
        """The verified caller's node id; else the call is aborted UNAUTHENTICATED."""
        verifier = self.verifier
        try:
            if verifier is None:
                raise PermissionError("this server has no pool secret yet")
            return verifier.verify(method, token, body)
        except PermissionError as exc:
            self._log_refusal(method, ctx, exc)
            ctx.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            raise  # abort raises; this keeps the type checker sure no str is missing

    def _log_refusal(self, method: str, ctx: Any, exc: Exception) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._logged_at >= self.LOG_EVERY_S:
            self._logged_at = now
            log.warning("refused %s from %s: %s (%d refusals so far)", method, ctx.peer(), exc, self._refused)


def _token(ctx: Any) -> str | None:
    for k, v in ctx.invocation_metadata():
        if k == METADATA_KEY:
            return str(v)
    return None


class ClientAuth:
    """Signs requests as ``node_id`` with the secret ``secret()`` gives (None: sent unsigned, and
    refused); ``SigningChannel`` applies it to every unary call made on a channel."""

    def __init__(self, node_id: str, secret: Callable[[], bytes | None]) -> None:
        self.node_id = node_id
        self._node = node_id.encode().hex()
        self._secret = secret
        self._key: tuple[bytes, Any] | None = None  # (secret, keyed(secret))

    def secret(self) -> bytes | None:
        return self._secret()

    def metadata(self, method: str, request: Any, metadata: Any) -> Any:
        """``metadata`` plus this request's credential."""
        return self.signed(method, request.SerializeToString(), metadata)

    def signed(self, method: str, body: bytes, metadata: Any) -> Any:
        """``metadata`` plus the credential of a request serialized as ``body``."""
        token = self.token(method, body)
        if token is None:
            return metadata
        if not metadata:
            return ((METADATA_KEY, token),)
        return (*metadata, (METADATA_KEY, token))

    def token(self, method: str, body: bytes) -> str | None:
        """The credential of ``body`` sent to ``method`` (None without a secret: refused)."""
        secret = self._secret()
        if secret is None:
            return None
        key = self._key
        if key is None or key[0] is not secret:
            key = self._key = (secret, keyed(secret))
        # sign(), written out: this runs on every call (NOTE [credential cost]).
        ms = str(time.time_ns() // 1_000_000)
        nonce = new_nonce()
        node = self._node
        h = key[1].copy()
        h.update(f"{_VERSION}\n{method}\n{ms}\n{nonce}\n{node}\n".encode())
        h.update(body)
        return f"{_VERSION}.{ms}.{nonce}.{node}.{h.hexdigest()}"


class _SignedCall:
    """A unary multi-callable whose calls (plain, ``with_call``, ``future``) carry a credential.
    ``inner`` sends bytes as they are; the request is serialized here once, for the MAC and the
    wire both."""

    def __init__(self, inner: Any, method: str, auth: ClientAuth, serialize: Callable[[Any], bytes] | None) -> None:
        self._inner, self._method, self._auth = inner, method, auth
        self._serialize = serialize if serialize is not None else _as_bytes

    def __call__(self, request: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        body = self._serialize(request)
        return self._inner(body, timeout, self._auth.signed(self._method, body, metadata), **kw)

    def with_call(self, request: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        body = self._serialize(request)
        return self._inner.with_call(body, timeout, self._auth.signed(self._method, body, metadata), **kw)

    def future(self, request: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        body = self._serialize(request)
        return self._inner.future(body, timeout, self._auth.signed(self._method, body, metadata), **kw)


class _SignedStreamOpen:
    """A stream-stream multi-callable whose opening carries a credential over an empty body; the
    frames sign themselves (``mori.umbp.stream``: NOTE [heartbeat stream])."""

    def __init__(self, make: Callable[[], Any], method: str, auth: ClientAuth) -> None:
        self._make, self._method, self._auth = make, method, auth
        self._inner: Any = None

    def __call__(self, requests: Any, timeout: float | None = None, metadata: Any = None, **kw: Any) -> Any:
        if self._inner is None:
            self._inner = self._make()
        return self._inner(requests, timeout, self._auth.signed(self._method, b"", metadata), **kw)

    def frame_token(self, body: bytes) -> str | None:
        """The credential of one frame whose body is ``body``."""
        return self._auth.token(self._method, body)


def _as_bytes(request: Any) -> bytes:
    """A multi-callable made without a serializer sends bytes; so does a signed one."""
    return request if isinstance(request, bytes) else bytes(request)


class SigningChannel:
    """The client interceptor of NOTE [pool authentication], at the channel: every unary method a
    stub takes from it signs its calls. (grpc.intercept_channel would do the same through its
    generic machinery, which cost ~20 us per call here; this adds only the signature.)"""

    def __init__(self, channel: Any, auth: ClientAuth) -> None:
        self._channel, self._auth = channel, auth

    def unary_unary(
        self, method: str, request_serializer: Callable[[Any], bytes] | None = None, *args: Any, **kw: Any
    ) -> _SignedCall:
        inner = self._channel.unary_unary(method, None, *args, **kw)  # bytes in: serialized by _SignedCall
        return _SignedCall(inner, method, self._auth, request_serializer)

    def stream_stream(self, method: str, *args: Any, **kw: Any) -> _SignedStreamOpen:
        # The channel's own multi-callable is made at the first opening: a stub takes every method
        # when it is built, and most of its users never open the stream.
        return _SignedStreamOpen(lambda: self._channel.stream_stream(method, *args, **kw), method, self._auth)

    def unary_stream(self, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError("UMBP serves unary calls and signed-frame streams only")

    stream_unary = unary_stream

    def subscribe(self, *args: Any, **kw: Any) -> None:
        self._channel.subscribe(*args, **kw)

    def unsubscribe(self, *args: Any, **kw: Any) -> None:
        self._channel.unsubscribe(*args, **kw)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SigningChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SecretSource:
    """A member's secret, looked up until found (the master may write its file after we start)."""

    def __init__(self, explicit: bytes | None, master_address: str) -> None:
        self._explicit = None if explicit is None else check_secret(explicit)
        self._address = master_address
        self._found: bytes | None = self._explicit

    def __call__(self) -> bytes | None:
        if self._found is None:
            self._found = member_secret(None, self._address)
        return self._found

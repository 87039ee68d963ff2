# SPDX-License-Identifier: MIT
"""The credential itself (NOTE [credential cost]): its MAC is HMAC-SHA256 as the standard library
computes it from the secret alone, the signed channel's requests carry exactly the bytes the stub
would have sent, and nonces never repeat, in this process or in a forked child."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest

from mori.umbp import auth, rpc
from mori.umbp.rpc import pb

SECRET = bytes(range(32))
METHOD = "/umbp.UMBPMaster/RoutePut"


def _reference_mac(secret: bytes, token: str, method: str, body: bytes) -> str:
    """HMAC-SHA256 over the header and body, keyed per call by hmac.new (no key reuse, no copy)."""
    version, ms, nonce, node, _ = token.split(".")
    header = f"{version}\n{method}\n{ms}\n{nonce}\n{node}\n".encode()
    return hmac.new(secret, header + body, hashlib.sha256).hexdigest()


def test_signed_mac_is_the_standard_hmac():
    body = pb.RoutePutRequest(node_id="n1", key="k", block_size=16384).SerializeToString()
    for node in ("n1", "a\tb", "ünïcode"):
        token = auth.sign(auth.keyed(SECRET), METHOD, node, body)
        assert token.split(".")[-1] == _reference_mac(SECRET, token, METHOD, body)
        assert bytes.fromhex(token.split(".")[3]).decode() == node
        assert auth.Verifier(SECRET).verify(METHOD, token, body) == node


class _Recorder:
    """A channel stand-in recording what the signed multi-callable hands to gRPC."""

    def __init__(self) -> None:
        self.sent: list[tuple[object, object]] = []
        self.serializer: object = "unset"

    def unary_unary(self, method: str, request_serializer=None, *args, **kw):
        self.serializer = request_serializer
        return lambda request, timeout=None, metadata=None, **kw: self.sent.append((request, metadata))


def test_signing_channel_sends_the_serialized_request_once_with_a_valid_credential():
    recorder = _Recorder()
    channel = auth.SigningChannel(recorder, auth.ClientAuth("writer", lambda: SECRET))
    stub = rpc.pb_grpc.UMBPMasterStub(channel)
    request = pb.RoutePutRequest(node_id="writer", key="k", block_size=16384)
    stub.RoutePut(request, timeout=1, metadata=[("x-other", "1")])
    assert recorder.serializer is None  # gRPC gets bytes, serialized by the signer
    ((body, metadata),) = recorder.sent
    assert body == request.SerializeToString()
    assert dict(metadata)["x-other"] == "1"
    token = dict(metadata)[auth.METADATA_KEY]
    assert token.split(".")[-1] == _reference_mac(SECRET, token, METHOD, body)
    assert auth.Verifier(SECRET).verify(METHOD, token, body) == "writer"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_nonces_do_not_repeat_in_process_or_in_a_forked_child():
    mine = [auth.new_nonce() for _ in range(10_000)]
    assert len(set(mine)) == len(mine) and all(len(n) == 32 and int(n, 16) >= 0 for n in mine)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only its nonces, then out, without running anything of pytest's
        try:
            os.write(write_fd, "".join(auth.new_nonce() for _ in range(100)).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        data = pipe.read().decode()
    os.waitpid(pid, 0)
    theirs = [data[i : i + 32] for i in range(0, len(data), 32)]
    assert len(theirs) == 100
    assert not set(theirs) & set(mine + [auth.new_nonce() for _ in range(100)])
    assert {n[:16] for n in theirs} != {mine[0][:16]}  # the child drew its own prefix

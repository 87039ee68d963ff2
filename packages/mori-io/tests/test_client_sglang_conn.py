# SPDX-License-Identifier: MIT
"""The call sequence of SGLang's MORI disaggregation connector, in two real processes.

Followed: sgl-project/sglang, python/sglang/srt/disaggregation/mori/conn.py at revision
0094505da74125a31ceb354f37ae7a1b6a97d3f5 (MoriKVManager._init_engine, _register_local_buffers,
_add_remote_peer, send_kvcache with GroupedIndexPlan/_submit_batch_transfer_plan, send_aux_rdma,
MoriKVSender._wait_chunk / _collect_failure_reason, notify_decode_status, and
MoriKVReceiver._register_kv_args). The mori.io calls are the same calls with the same arguments
and order; what differs, because this machine has neither GPUs nor ZMQ in the test venv:

- KV buffers are host memory (numpy, bf16 as uint16) registered as MemoryLocationType.CPU with
  device -1, where SGLang registers its GPU KV cache with the GPU's id and MemoryLocationType.GPU.
- The side channel (SGLang's ZMQ bootstrap and status messages, msgspec-packed descriptor lists)
  is a multiprocessing pipe carrying the same packed descriptors, indices and status codes.
- The RDMA backend runs over UCX's tcp transport on loopback (UCX_TLS=tcp), as the RDMA tests do.

This revision of the connector uses the engine-level batch_write only (no sessions, no reads) and
creates the RDMA backend with enable_notification=False; the decode side learns completion from
the prefill's status message (its "notification"), as in SGLang.
"""

from __future__ import annotations

import os
import uuid
from multiprocessing.connection import Connection

import numpy as np
import pytest
from rdma_programs import ucx_unavailable

from mori.cpp import TransferStatus  # as conn.py imports it
from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    PollCqMode,
    RdmaBackendConfig,
    StatusCode,
)
from mori.testing import PeerProcess

pytestmark = pytest.mark.timeout(120)

# SGLang's defaults (sglang/srt/environ.py): SGLANG_MORI_QP_PER_TRANSFER=4,
# SGLANG_MORI_POST_BATCH_SIZE=-1, SGLANG_MORI_NUM_WORKERS=4, SGLANG_MORI_WAIT_POLL_MS=1000; the
# aux buffers go over RDMA as with SGLANG_MORI_SEND_AUX_RDMA=1.
QP_PER_TRANSFER, POST_BATCH_SIZE, NUM_WORKERS, WAIT_POLL_MS = 4, -1, 4, 1000
KV_POLL_FAILED, KV_POLL_SUCCESS = 0, 4  # sglang.srt.disaggregation.base.conn.KVPoll

# A small MHA model: per layer one K and one V buffer of [pages, page_size, heads, head_dim] bf16.
LAYERS, PAGES, PAGE_SIZE, HEADS, HEAD_DIM = 2, 32, 16, 2, 64
KV_ITEM_LEN = PAGE_SIZE * HEADS * HEAD_DIM * 2  # bytes of one page (kv_args.kv_item_lens[0])
AUX_SHAPES = [(64, 8), (64, 4)]  # int32 per-request aux buffers (output ids, logprob slots ...)


def _skip_without_ucx() -> None:
    why = ucx_unavailable()
    if why:
        pytest.skip(f"UCX cannot be loaded here: {why}")


def init_engine(mode: str) -> IOEngine:
    """MoriKVManager._init_engine with ib_device unset, on loopback."""
    local_ip = "127.0.0.1"
    config = IOEngineConfig(host=local_ip, port=0)
    engine_key = f"io-{mode}-dp0-tp0-pid{os.getpid()}-{local_ip}-{uuid.uuid4().hex[:8]}"
    engine = IOEngine(engine_key, config)
    poll_mode = PollCqMode.POLLING
    rdma_cfg = RdmaBackendConfig(QP_PER_TRANSFER, POST_BATCH_SIZE, NUM_WORKERS, poll_mode, False)
    engine.create_backend(BackendType.RDMA, rdma_cfg)
    actual_port = engine.get_engine_desc().port
    assert actual_port > 0, f"Failed to bind port for engine {engine_key}"
    return engine


def kv_buffers(seed: int | None) -> list[np.ndarray]:
    """K buffers of every layer, then V buffers (the order of kv_args.kv_data_ptrs)."""
    shape = (PAGES, PAGE_SIZE, HEADS, HEAD_DIM)
    if seed is None:
        return [np.zeros(shape, np.uint16) for _ in range(2 * LAYERS)]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 2**16, size=shape, dtype=np.uint16) for _ in range(2 * LAYERS)]


def aux_buffers(seed: int | None) -> list[np.ndarray]:
    if seed is None:
        return [np.zeros(s, np.int32) for s in AUX_SHAPES]
    rng = np.random.default_rng(seed)
    return [rng.integers(-(2**31), 2**31 - 1, size=s, dtype=np.int32) for s in AUX_SHAPES]


def register_local_buffers(engine: IOEngine, kv: list[np.ndarray], aux: list[np.ndarray]):
    """_register_local_buffers (KV registered as CPU here: no GPU on this machine)."""
    kv_descs = [engine.register_memory(a.ctypes.data, a.nbytes, -1, MemoryLocationType.CPU) for a in kv]
    aux_descs = [engine.register_memory(a.ctypes.data, a.nbytes, -1, MemoryLocationType.CPU) for a in aux]
    return kv_descs, aux_descs


def group_contiguous(src: np.ndarray, dst: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """Runs where both page lists go up by one, as (src starts, dst starts, counts)."""
    breaks = np.flatnonzero((np.diff(src) != 1) | (np.diff(dst) != 1)) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(src)]))
    return (
        [int(src[s]) for s in starts],
        [int(dst[s]) for s in starts],
        [int(e - s) for s, e in zip(starts, ends, strict=True)],
    )


def decode_side(pipe: Connection) -> None:
    """The decode rank: registers its (zeroed) KV and aux buffers, sends them like
    _register_kv_args, sends the transfer info of each room, waits for the prefill's status
    message and returns its buffers for the check."""
    os.environ["UCX_TLS"] = "tcp"
    engine = init_engine("decode")
    kv, aux = kv_buffers(None), aux_buffers(None)
    kv_descs, aux_descs = register_local_buffers(engine, kv, aux)
    pipe.send(("register", engine.get_engine_desc().pack(), [m.pack() for m in kv_descs],
               [m.pack() for m in aux_descs], KV_ITEM_LEN))  # fmt: skip
    rooms = pipe.recv()  # [(room, dst_kv_indices bytes, dst_aux_index)]
    for room, dst_indices, dst_aux in rooms:
        pipe.send(("transfer", room, dst_indices, dst_aux))
    statuses = {}
    while len(statuses) < len(rooms):
        _, room, code, reason = pipe.recv()  # notify_decode_status
        statuses[room] = (code, reason)
    pipe.send(("buffers", statuses, [a.tobytes() for a in kv], [a.tobytes() for a in aux]))
    pipe.recv()  # the prefill has finished with this engine's memory
    engine.shutdown()


def submit_batch_transfer_plan(engine: IOEngine, src: MemoryDesc, dst: MemoryDesc, plan) -> list[TransferStatus]:
    local_offsets, remote_offsets, sizes = plan
    if not sizes:
        return []
    transfer_uid = engine.allocate_transfer_uid()
    return engine.batch_write([src], [local_offsets], [dst], [remote_offsets], [sizes], [transfer_uid])


def wait_chunk(engine: IOEngine, statuses: list[TransferStatus]) -> StatusCode:
    if not statuses:
        return StatusCode.SUCCESS
    while True:
        rc = engine.wait_all(statuses, timeout_ms=WAIT_POLL_MS)
        if rc != StatusCode.IN_PROGRESS:
            return rc


def collect_failure_reason(statuses: list[TransferStatus]) -> str:
    for status in statuses:
        if status.Failed():
            return f"KV transfer failed: {status.Message()}"
    return "KV transfer failed due to unknown reason"


def test_sglang_mori_connector_sequence(monkeypatch):
    _skip_without_ucx()
    monkeypatch.setenv("UCX_TLS", "tcp")  # the prefill (this process) and the decode (inherits it)
    decode = PeerProcess(decode_side, name="decode")
    engine = None
    try:
        engine = init_engine("prefill")
        kv, aux = kv_buffers(11), aux_buffers(12)
        kv_descs, aux_descs = register_local_buffers(engine, kv, aux)
        _, engine_blob, dst_kv_blobs, dst_aux_blobs, dst_item_len = decode.recv(60, what="its buffers")
        engine.register_remote_engine(EngineDesc.unpack(engine_blob))  # _add_remote_peer
        dst_kv = [MemoryDesc.unpack(b) for b in dst_kv_blobs]
        dst_aux = [MemoryDesc.unpack(b) for b in dst_aux_blobs]
        assert dst_item_len == KV_ITEM_LEN

        src_pages = np.array([3, 4, 5, 9, 10, 20, 21, 22, 23, 0], np.int32)
        dst_pages = np.array([7, 8, 9, 1, 2, 30, 31, 12, 13, 25], np.int32)
        bad_dst = np.array([5, 6, PAGES], np.int32)  # one page past the decode's buffer
        rooms = [(101, dst_pages.tobytes(), 17), (102, bad_dst.tobytes(), -1)]
        decode.send(rooms)
        infos = {}
        for _ in rooms:
            _, room, dst_blob, dst_aux_index = decode.recv(60, what="a room's transfer info")
            infos[room] = (np.frombuffer(dst_blob, np.int32), dst_aux_index)

        results = {}
        for room, src in ((101, src_pages), (102, np.array([0, 1, 2], np.int32))):
            dst, dst_aux_index = infos[room]
            starts = group_contiguous(src, dst)
            plan = ([s * KV_ITEM_LEN for s in starts[0]], [s * KV_ITEM_LEN for s in starts[1]],
                    [c * KV_ITEM_LEN for c in starts[2]])  # fmt: skip
            statuses: list[TransferStatus] = []
            src_k, src_v = kv_descs[:LAYERS], kv_descs[LAYERS:]
            dst_k, dst_v = dst_kv[:LAYERS], dst_kv[LAYERS:]
            for layer in range(LAYERS):
                statuses.extend(submit_batch_transfer_plan(engine, src_k[layer], dst_k[layer], plan))
                statuses.extend(submit_batch_transfer_plan(engine, src_v[layer], dst_v[layer], plan))
            if dst_aux_index >= 0:  # send_aux_rdma: one batch over every aux buffer, a uid each
                prefill_aux_index = 5
                item_lens = [a[0].nbytes for a in aux]
                statuses.extend(engine.batch_write(
                    aux_descs, [[prefill_aux_index * n] for n in item_lens], dst_aux,
                    [[dst_aux_index * n] for n in item_lens], [[n] for n in item_lens],
                    [engine.allocate_transfer_uid() for _ in aux_descs]))  # fmt: skip
            assert all(isinstance(s, TransferStatus) for s in statuses)
            rc = wait_chunk(engine, statuses)
            ok = rc == StatusCode.SUCCESS
            reason = "" if ok else collect_failure_reason(statuses)
            results[room] = (rc, reason)
            decode.send(("status", room, KV_POLL_SUCCESS if ok else KV_POLL_FAILED, reason))

        assert results[101] == (StatusCode.SUCCESS, "")
        assert results[102][0] == StatusCode.ERR_INVALID_ARGS and "out of range" in results[102][1]
        _, statuses_seen, kv_bytes, aux_bytes = decode.recv(60, what="the statuses it saw and its buffers")
        assert statuses_seen[101] == (KV_POLL_SUCCESS, "")
        assert statuses_seen[102][0] == KV_POLL_FAILED and "KV transfer failed" in statuses_seen[102][1]

        # The numpy reference: the decode's pages dst_pages hold the prefill's src_pages, layer by
        # layer, K and V; its other pages stay zero; room 102 wrote nothing (its status failed at
        # submission, as MORI reports length out of range).
        for i, got in enumerate(kv_bytes):
            expected = np.zeros_like(kv[i])
            expected[dst_pages] = kv[i][src_pages]
            assert np.array_equal(np.frombuffer(got, np.uint16).reshape(kv[i].shape), expected), f"kv buffer {i}"
        for i, got in enumerate(aux_bytes):
            expected = np.zeros_like(aux[i])
            expected[17] = aux[i][5]
            assert np.array_equal(np.frombuffer(got, np.int32).reshape(aux[i].shape), expected), f"aux buffer {i}"
        decode.send("done")
    finally:
        if engine is not None:
            engine.shutdown()
        decode.proc.join(timeout=30)
        decode.kill()
    assert decode.proc.exitcode == 0

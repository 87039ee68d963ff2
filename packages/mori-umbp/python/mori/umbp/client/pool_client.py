# SPDX-License-Identifier: MIT
"""``DistributedClient`` (MORI's PoolClient): a node of the pool.

Each client is also a peer: it owns a DRAM tier (``dram.capacity_bytes``; 0 owns none) and
optionally an HBM tier (``hbm.capacity_bytes`` of one CUDA tensor), serves UMBPPeer for them and
heartbeats to the master. Puts are placed by the client over the master's pool view with the
master's policy (or, without a usable view, routed by the master, which dedups and picks the node
and the tier, HBM first), allocate pages on the chosen peer, write them with mori-io and commit
(an ADD-if-absent when the client placed them: NOTE [direct put]); gets
route, resolve the pages on the owning peer and read them with mori-io. Bytes go peer to peer,
never via the master; GPU <-> GPU on one host through mori-io's P2P backend.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from mori.io import BackendType, IOEngine, TcpBackendConfig, UnsupportedError, XgmiBackendConfig
from mori.umbp import auth, columns, devmem, rpc, settings, wire
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.config import UMBPConfig, UMBPDeploymentMode
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch
from mori.umbp.client.heartbeat import HeartbeatLoop
from mori.umbp.client.io_engine import engine_config
from mori.umbp.client.master_client import UMBPMasterClient
from mori.umbp.client.owners import Owner, OwnerCache
from mori.umbp.client.pool_view import PoolView
from mori.umbp.client.transfer import Mover, Moving, RemotePages
from mori.umbp.errors import (
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    MasterUnavailableError,
    NoRoomError,
    PeerUnavailableError,
    PendingLimitError,
)
from mori.umbp.peer.pools import DevicePagePool, HostPagePool, PagePool, host_memory
from mori.umbp.peer.service import (
    INLINE_MAX_BYTES,
    MAX_BATCH,
    MAX_PEER_STREAMS,
    MAX_PEER_WIRE_CONNECTIONS,
    PeerServicer,
)
from mori.umbp.peer.ssd import SsdTier
from mori.umbp.peer.ssd_staging import SsdStaging
from mori.umbp.peer.store import NoRoom, PeerStore
from mori.umbp.stream import StreamPool
from mori.umbp.types import UMBPTierType, check_node_id
from mori.umbp.wire import WireCall, WireChannel

log = logging.getLogger(__name__)

#: Route attempts per key: the first choice plus retries after a full or dead peer.
MAX_ATTEMPTS = 4

#: Keys of one batch RPC to one peer: half the default UMBP_MAX_PENDING_SLOTS_PER_NODE, so two
#: threads of one node putting batches to one peer stay under the cap.
PEER_CHUNK = 32

#: NOTE [inline or slots]: a peer's share of a put goes inline only while it is at most this many
#: bytes. Inline bytes are copied by Python and gRPC several times and MAC'd by both ends (the
#: pool credential covers the request body), about 3-4 ns a byte here, against one more round
#: trip and a mori-io write for the slot path: measured on the 2-core bench machine, a batch of
#: 16 blocks over two peers (8 each) took 2.9 ms inline against 3.7 ms by slots at 32 KiB blocks
#: (256 KiB a peer), and 5.9 ms against 4.0 ms at 64 KiB (512 KiB a peer); the trace's long
#: batches of 64 KiB blocks served 34 requests/s by slots against 28 inline. Measured again over
#: NOTE [wire] (mori.umbp.wire), which copies less than gRPC: every 64 KiB share inline (32-key
#: chunks) against this limit, 16-block batches 3.4-4.3 ms against 2.5-2.8 ms and the prepared
#: trace 43-44 requests/s against 66-67, so the limit stays.
INLINE_GROUP_MAX_BYTES = 256 << 10

#: NOTE [heartbeat stream] in mori.umbp.stream: the peer calls of the data path go over streams,
#: at most this many per method and peer (one per concurrent call; more calls at once go unary).
PEER_STREAMS = 4
STREAMED_PEER_CALLS = ("BatchResolveKeys", "BatchPutInline", "BatchAllocateSlots", "BatchCommitSlots")

_G = TypeVar("_G")


def chunk_rounds(groups: dict[_G, list[int]], calls: int = 0) -> list[dict[_G, list[int]]]:
    """Each owner's keys cut into PEER_CHUNK-key chunks, as rounds of at most one chunk per owner.

    A round's calls run at once (owners in parallel) and the next round starts when they are
    answered, so one call of this node holds at most PEER_CHUNK pending slots on a peer whatever
    the batch's length. The chunks go last to first: a batch is a prompt's chain, head first, and
    each peer takes a request's keys last to first (NOTE [chain order] in mori.umbp.peer.store),
    so the head's chunk, served last, leaves the head the most recently used of the chain.

    ``calls``: callers that send every chunk at once (gets) cut an owner's keys into at most that
    many chunks, larger than PEER_CHUNK where needed (at most MAX_BATCH keys each), so they fit the
    wire connections of its channel (NOTE [wire chunks])."""

    def cut(idx: list[int]) -> list[list[int]]:
        n = min(MAX_BATCH, max(PEER_CHUNK, -(-len(idx) // calls))) if calls else PEER_CHUNK
        return [idx[k : k + n] for k in range(0, len(idx), n)][::-1]

    chunks = {owner: cut(idx) for owner, idx in groups.items()}
    return [
        {owner: c[r] for owner, c in chunks.items() if r < len(c)}
        for r in range(max(map(len, chunks.values()), default=0))
    ]


def _weakly(method: Callable[..., Any], dropped: Callable[[], Any]) -> Callable[..., Any]:
    """``method`` of a client called through a weak reference, so the threads that hold it (the
    heartbeat, the peer service) keep the client collectable; ``dropped()`` answers once it is gone.
    NOTE [dropped client]: MORI's client leaves the pool when its last reference goes, and SGLang's
    UMBPStore.close() drops its client without close(); ``DistributedClient.__del__`` does the same."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return dropped() if bound is None else bound(*args)

    return call


def _wire_port(stub: Any, reads_columns: dict[str, bool], address: str, timeout: float) -> int:
    """The port the peer at ``address`` serves NOTE [wire] on (0: none, an older version); what it
    says of NOTE [columns] goes into ``reads_columns`` (not the client: its channels must not keep
    it alive, NOTE [dropped client])."""
    info = stub.GetPeerInfo(rpc.peer_pb.GetPeerInfoRequest(), timeout=timeout)
    reads_columns[address] = bool(info.columns)
    return int(info.wire_port)


def _say_routing_again(keys: Sequence[str], blocks: list[tuple[int, PeerUnavailableError | None]]) -> None:
    """One warning for the ``blocks`` (index in ``keys``, why) of a batch that failed on a peer
    (no warning for those refused as full: a full peer is routine, said at info level)."""
    failed = [(i, why) for i, why in blocks if why is not None]
    if failed:
        log.warning("put %r and %d more: %s; routing again", keys[failed[0][0]], len(failed) - 1, failed[0][1])


def _nothing() -> None:
    return None


def _refused() -> bool:
    return False


def _gone() -> int:
    raise ClosedError("the client was dropped")


@contextlib.contextmanager
def _settled(started: Callable[[], list[Moving]]) -> Iterator[None]:
    """On an exception, waits for the transfers ``started()`` names before it propagates, so no
    late byte lands in memory the caller reuses (their own failures are the lesser news)."""
    try:
        yield
    except BaseException:
        for transfer in started():
            with contextlib.suppress(Exception):
                transfer.wait()
        raise


class _Deferred:
    """NOTE [deferred acknowledgement]: per owner, the run of the peer (its ``instance``) and the
    batch indexes whose commits it took without the master's acknowledgement yet. A long put is
    rounds of PEER_CHUNK keys per owner; each round's commit used to wait for one heartbeat of the
    owner to the master. Now only an owner's last round waits, and its heartbeat acknowledges the
    earlier rounds' commits too (a node's events reach the master in order, so the heartbeat that
    acknowledges the last ADDs applied every earlier one); the earlier rounds' keys are reported
    stored only then, so a put still returns True only for keys every reader can see. An owner
    that fails or restarts before that acknowledgement has its deferred keys put again elsewhere.

    A peer takes at most MAX_BATCH acknowledge_keys in one call (a bound on what it accepts), so
    a round whose commits would take an owner's deferred keys past MAX_BATCH
    (``must_acknowledge``) does not defer: it waits for the master, as the last round does, and
    acknowledges those before it; the owner's later rounds defer again. An owner never has more
    than MAX_BATCH deferred keys, and no call names more (a batch of n keys waits for about
    n / MAX_BATCH + 1 heartbeats)."""

    def __init__(self) -> None:
        self._by_node: dict[str, tuple[int, list[int]]] = {}

    def add(self, node: str, instance: int, idx: list[int]) -> list[tuple[int, PeerUnavailableError]]:
        """Records ``idx`` as deferred on ``node``; returns the earlier ones to put again when the
        peer's run changed in between (it restarted: they are gone with it)."""
        old_instance, old = self._by_node.get(node, (instance, []))
        lost: list[tuple[int, PeerUnavailableError]] = []
        if old_instance != instance:
            failure = PeerUnavailableError(f"peer {node!r} restarted before acknowledging deferred commits")
            lost, old = [(i, failure) for i in old], []
        if old or idx:
            self._by_node[node] = (instance, old + idx)
        return lost

    def waiting(self, node: str) -> list[int]:
        return self._by_node.get(node, (0, []))[1]

    def must_acknowledge(self, node: str, more: int) -> bool:
        """Whether ``more`` commits deferred too would take ``node``'s past what one call may
        acknowledge (MAX_BATCH): then the commit that brings them acknowledges the earlier ones."""
        return len(self.waiting(node)) + more > MAX_BATCH

    def take(self, node: str) -> tuple[int, list[int]]:
        return self._by_node.pop(node, (0, []))

    def drop(self, node: str) -> list[int]:
        return self.take(node)[1]

    def nodes(self) -> list[str]:
        return list(self._by_node)


@dataclass
class _PutBatch:
    """One batch put as its local, inline and slot paths share it (NOTE [batched data path]): the
    blocks (one entry each in keys .. devs), where they were placed, and what became of them."""

    keys: Sequence[str]
    ptrs: Sequence[int]
    sizes: Sequence[int]
    depths: Sequence[int]
    devs: list[int]
    routes: Sequence[Any]
    #: Placed by this client over its pool view: the commits are ADD-if-absents (NOTE [direct put]).
    direct: bool
    #: Per block: reported stored.
    out: list[bool]
    #: (block, the peer it failed on, why; None: that peer was full): to route again past it.
    retry: list[tuple[int, str, PeerUnavailableError | None]] = field(default_factory=list)

    def subset(self, idx: list[int], routes: Sequence[Any]) -> _PutBatch:
        """Blocks ``idx`` of this batch as a batch of their own, placed by the master's ``routes``."""
        return _PutBatch(
            [self.keys[i] for i in idx],
            [self.ptrs[i] for i in idx],
            [self.sizes[i] for i in idx],
            [self.depths[i] for i in idx],
            [self.devs[i] for i in idx],
            routes,
            False,
            [False] * len(idx),
        )

    def not_taken(self, i: int, node: str, who: str, call: str, outcomes: Any, entry: Any) -> None:
        """Block ``i``'s ``entry`` in the answer of ``call`` on ``node`` (``who``) says it was neither
        stored nor there already (``outcomes``: AllocateSlotResponse or PutInlineResult, whose
        failures share their names): a key another writer holds is not stored; a full peer's or a
        failed block is routed again past ``node``."""
        if entry.outcome == outcomes.FAILED_PENDING:
            log.warning("put %r: %s; not stored", self.keys[i], entry.message)
        elif entry.outcome == outcomes.FAILED_NO_SPACE:
            log.info("peer %r was full for %r: routing again", node, self.keys[i])
            self.retry.append((i, node, None))
        else:
            self.retry.append((i, node, PeerUnavailableError(f"{call} on {who} failed: {entry.message}")))


class _NoSpace(Exception):
    """The routed peer had no room (or not the tier) after all: the master's view lagged, or what
    it holds is busy. ``error`` says what held it; ``retry_after_s`` when to ask it again (NOTE
    [waiting for room] in mori.umbp.peer.store; None: room will not come by itself, 0: at once)."""

    def __init__(self, error: NoRoomError, retry_after_s: float | None) -> None:
        super().__init__(str(error))
        self.error, self.retry_after_s = error, retry_after_s

    @classmethod
    def of_batch(cls, node: str) -> _NoSpace:
        """A batch call's refusal, which carries no report: ask the peer again at once for one."""
        return cls(NoRoomError(f"peer {node!r} had no room for it in a batch put", node), 0.0)

    @classmethod
    def of_store(cls, node: str, room: NoRoom | None) -> _NoSpace:
        """A refusal of this node's own store (``room`` None: it has no such tier)."""
        if room is None:
            return cls(NoRoomError(f"node {node!r} (this one) has no such tier", node), None)
        error = NoRoomError(f"node {node!r} (this one): {room}", node, room.needed, room.evictable)
        return cls(error, room.retry_after_s)

    @classmethod
    def of_answer(cls, who: str, node: str, res: Any) -> _NoSpace:
        """An AllocateSlot's FAILED_NO_SPACE answer from ``who`` (an older peer's has no report)."""
        error = NoRoomError(f"{who}: {res.message}", node, int(res.bytes_needed), int(res.bytes_evictable))
        return cls(error, res.retry_after_ms / 1000 if res.room_expected else None)


def _check_config(config: UMBPConfig) -> None:
    dist, dram, hbm = config.distributed, config.dram, config.hbm
    assert dist is not None
    mc = dist.master_config
    if not mc.master_address or not mc.node_id:
        raise ConfigError(f"master_config.master_address={mc.master_address!r} and node_id={mc.node_id!r} are required")
    check_node_id(mc.node_id, "master_config.node_id")
    if dram.capacity_bytes < 0 or dram.page_size < 4096:
        raise ConfigError(
            f"dram.capacity_bytes={dram.capacity_bytes} must be >= 0 and dram.page_size={dram.page_size} >= 4096"
        )
    if hbm.capacity_bytes < 0 or isinstance(hbm.device_id, bool) or not isinstance(hbm.device_id, int):
        raise ConfigError(f"hbm.capacity_bytes={hbm.capacity_bytes} must be >= 0, hbm.device_id={hbm.device_id!r}")
    if dist.staging_buffer_size <= 0:
        raise ConfigError(f"staging_buffer_size={dist.staging_buffer_size} must be positive")
    if dist.dram_page_size and dist.dram_page_size < 4096:
        raise ConfigError(f"distributed.dram_page_size={dist.dram_page_size} must be 0 (dram.page_size) or >= 4096")


class DistributedClient(UMBPClient):
    """MORI's ``UMBPClient`` API over the distributed pool."""

    def __init__(self, config: UMBPConfig | None = None) -> None:
        super().__init__(config)
        config = self._accepted_config(config, distributed=True, check=_check_config)
        dist = config.distributed
        assert dist is not None
        mc = dist.master_config
        self.config = config
        self.node_id = mc.node_id
        # None (no UMBP_POOL_SECRET, no master's file on this host): the registration below then
        # fails with AuthenticationError naming the remedy, or MasterUnavailableError if no master.
        secret = auth.member_secret(mc.pool_secret, mc.master_address)
        self._auth = auth.ClientAuth(self.node_id, lambda: secret)
        # Built first: it checks the SSD config before anything needs tearing down.
        ssd = self._make_ssd_tier(config) if config.ssd.enabled else None
        host = mc.node_address or settings.get_str("UMBP_NODE_ADDRESS")
        self._timeout_ms = settings.get_int("UMBP_TRANSFER_TIMEOUT_MS")
        self._engine = IOEngine(f"umbp-{self.node_id}", engine_config(dist.io_engine, host))
        self._engine.create_backend(BackendType.TCP, TcpBackendConfig(op_timeout_ms=self._timeout_ms, num_data_conns=2))
        self._p2p_lock = threading.Lock()
        self._p2p = False
        self._desc = self._engine.get_engine_desc().pack()
        pools: list[PagePool] = []
        try:
            page_size = dist.dram_page_size or config.dram.page_size
            pools.append(HostPagePool(self._engine, config.dram.capacity_bytes, page_size, host_memory(config.dram)))
            if config.hbm.capacity_bytes:
                hbm = config.hbm
                pools.append(DevicePagePool(self._engine, hbm.capacity_bytes, hbm.page_size, hbm.device_id))
                self._ensure_p2p()
        except Exception:
            for pool in pools:
                pool.close(self._engine)
            self._engine.shutdown()
            raise
        self.store = PeerStore(
            pools,
            settings.get_int("UMBP_PENDING_SLOT_TTL_MS") / 1000,
            settings.get_int("UMBP_DRAM_READ_LEASE_MS") / 1000,
            settings.get_int("UMBP_MAX_PENDING_SLOTS_PER_NODE"),
            config.eviction.policy,
            config.eviction.candidate_window,
            settings.get_float("UMBP_DRAM_HIGH_WM"),
        )
        if ssd is not None:
            staging = SsdStaging(
                self._engine,
                dist.ssd_staging_buffer_size,
                dist.ssd_staging_buffer_slots,
                settings.get_int("UMBP_SSD_READ_LEASE_MS") / 1000,
            )
            self.store.enable_ssd(ssd, staging, _weakly(self._kick_heartbeat, _nothing))
        self._mover = Mover(self._engine, dist.staging_buffer_size, self._timeout_ms)
        self._sync_flush = settings.get_bool("UMBP_COMMIT_SYNC_FLUSH")
        workers = 8  # for unary calls; each open stream holds one more (NOTE [heartbeat stream])
        self._peer_server: Any = rpc.server(auth.ServerAuth(secret), workers=workers + MAX_PEER_STREAMS)
        servicer = PeerServicer(
            self.store,
            self._desc,
            _weakly(self._after_commit, _refused),
            _weakly(self._kick_heartbeat, _nothing),
            workers // 2,
            _weakly(self._after_deferred_commit, _nothing),
        )
        self.store.flush_unpublished = _weakly(self._flush_unpublished, _refused)
        rpc.peer_grpc.add_UMBPPeerServicer_to_server(servicer, self._peer_server)
        port = rpc.bind(self._peer_server, f"{host}:{dist.peer_service_port}")
        self.peer_address = f"{host}:{port}"
        # NOTE [wire] in mori.umbp.wire: the streamed calls, also over plain TCP.
        calls = STREAMED_PEER_CALLS
        handlers = {n: (getattr(rpc.peer_pb, f"{n}Request").FromString, getattr(servicer, n)) for n in calls}
        self._peer_wire = wire.serve(secret, handlers, self.peer_address, "peer", MAX_PEER_WIRE_CONNECTIONS)
        servicer.wire_port = self._peer_wire.port if self._peer_wire is not None else 0
        self._peer_server.start()
        self._master = UMBPMasterClient(mc.master_address, self.node_id, host, secret)
        self._tags = list(mc.tags)
        self._peers: dict[str, Any] = {}
        self._peers_lock = threading.Lock()
        self._owners = OwnerCache()  # NOTE [owner cache]
        self._view = PoolView(self.node_id, rpc.pb.ROUTED)  # NOTE [direct put]
        self._no_inline: set[str] = set()  # peer addresses that answered BatchPutInline UNIMPLEMENTED
        self._reads_columns: dict[str, bool] = {}  # NOTE [columns]: per peer address, from GetPeerInfo
        try:
            interval_ms = self._register_node()
        except Exception:
            self._teardown()
            raise
        self._hb = HeartbeatLoop(
            self._master, self.store, _weakly(self._register_node, _gone), interval_ms / 1000, self._view.update
        )
        self._hb.start()
        if ssd is not None and ssd.recovered:  # re-announce the previous run's blocks before returning
            self._hb.request_full_sync()
            if not self._hb.flush(rpc.timeout_s()):
                log.warning("the %d recovered SSD blocks are announced at the next heartbeat", ssd.recovered)
        log.info("UMBP node %r up: peer %s, tiers %s", self.node_id, self.peer_address, self.store.capacities())

    def __repr__(self) -> str:
        return (
            f"UMBPClient(node_id={self.node_id!r}, peer={self.peer_address!r}, master={self._master.master_address!r})"
        )

    @staticmethod
    def _make_ssd_tier(config: UMBPConfig) -> SsdTier:
        ssd = config.ssd
        # One subdirectory per node, so nodes may share a storage_dir without clobbering files,
        # and a restarted node (same id) finds its own.
        subdir = re.sub(r"[^A-Za-z0-9._-]", "_", config.distributed.master_config.node_id if config.distributed else "")
        return SsdTier(
            Path(ssd.storage_dir) / subdir,
            ssd.capacity_bytes,
            ssd.high_watermark,
            ssd.low_watermark,
            config.eviction.policy,
            config.eviction.candidate_window,
            ssd.recover,
        )

    def _ensure_p2p(self) -> None:
        """mori-io's P2P backend, made once this node has GPU memory (it opens the CUDA driver)."""
        with self._p2p_lock:
            if self._p2p or not settings.get_bool("UMBP_IO_P2P"):
                return
            try:
                self._engine.create_backend(BackendType.XGMI, XgmiBackendConfig(op_timeout_ms=self._timeout_ms))
                self._p2p = True
            except UnsupportedError as exc:
                log.warning("no P2P backend, GPU memory moves over TCP: %s", exc)

    def __del__(self) -> None:
        # See NOTE [dropped client]. close() runs on a thread of its own: the last reference may go
        # on a heartbeat or peer-service thread, which close() stops and waits for.
        if getattr(self, "_closed", True) or not hasattr(self, "_hb"):
            return  # closed, or __init__ failed (it tore down what it had built)
        with contextlib.suppress(RuntimeError):  # at interpreter shutdown the node goes with the process
            threading.Thread(target=self.close, name="umbp-close-dropped", daemon=True).start()

    def _kick_heartbeat(self) -> None:
        hb = getattr(self, "_hb", None)  # None while __init__ has not started it yet
        if hb is not None:
            hb.kick()

    def _register_node(self) -> int:
        caps = {UMBPTierType(t): c for t, c in self.store.capacities().items()}
        interval_ms = self._master.register_self(caps, self.peer_address, self._desc, self._tags)
        if self._master.registered_view is not None:
            self._view.update(self._master.registered_view)
        return interval_ms

    def _after_commit(self, keys: list[str], conditional: bool = False) -> bool:
        """True once the commits of ``keys`` are visible to every client (the master acknowledged
        their ADDs, in one heartbeat). Without UMBP_COMMIT_SYNC_FLUSH they are published at once,
        as MORI's looser contract, unless ``conditional``: ADD-if-absents wait for the master's
        decision (NOTE [direct put] in mori.umbp.master.core)."""
        if self._sync_flush or conditional:
            return self._hb.flush(rpc.timeout_s(), keys)
        self.store.publish(keys)
        self._hb.kick()
        return True

    def _after_deferred_commit(self, keys: list[str], conditional: bool) -> None:
        """NOTE [deferred acknowledgement]: commits a writer acknowledges later. Without
        UMBP_COMMIT_SYNC_FLUSH (and not ADD-if-absents) they are published at once, as
        ``_after_commit`` does; else they wait for the heartbeat of the writer's last commit."""
        if not (self._sync_flush or conditional):
            self.store.publish(keys)
            self._hb.kick()

    def _flush_unpublished(self) -> bool:
        """One heartbeat now for every commit the master has not acknowledged yet (NOTE
        [deferred acknowledgement]: a long batch's deferred commits are not evictable until
        then); True once acknowledged."""
        hb = getattr(self, "_hb", None)
        keys = self.store.unpublished()
        return hb is not None and bool(keys) and hb.flush(rpc.timeout_s(), keys)

    def _peer(self, address: str) -> Any:
        with self._peers_lock:
            if address not in self._peers:
                ch = rpc.channel(address, self._auth)
                stub = rpc.peer_grpc.UMBPPeerStub(ch)
                # NOTE [wire] in mori.umbp.wire: over plain TCP where the peer serves it, else streams.
                port = partial(_wire_port, stub, self._reads_columns, address)
                channel = WireChannel(address, port, self._auth, PEER_STREAMS)
                pools = {
                    name: WireCall(
                        channel,
                        name,
                        getattr(rpc.peer_pb, f"{name}Response").FromString,
                        StreamPool(
                            getattr(stub, f"{name}Stream"),
                            getattr(stub, name),
                            rpc.pb.SignedFrame,
                            f"{name} on peer at {address}",
                            PEER_STREAMS,
                        ),
                    )
                    for name in STREAMED_PEER_CALLS
                }
                self._peers[address] = (ch, stub, pools)
            return self._peers[address][1]

    def _columns(self, address: str) -> bool:
        """Whether the peer at ``address`` reads batch messages in columns (NOTE [columns] in
        mori.umbp.columns), as its GetPeerInfo said when the wire connected (``_wire_port``):
        until then, and with UMBP_WIRE=0, the form every version reads."""
        return self._reads_columns.get(address, False)

    def _peer_call(self, address: str, name: str) -> Any:
        """The peer's ``name`` call (one of STREAMED_PEER_CALLS), over a stream where it can."""
        self._peer(address)
        return self._peers[address][2][name]

    # -- hooks ----------------------------------------------------------------------------------
    def get_deployment_mode(self) -> UMBPDeploymentMode:
        return UMBPDeploymentMode.Distributed

    def _register(self, ptr: int, size: int, device: int) -> None:
        if device != devmem.HOST:
            self._ensure_p2p()
        self._mover.register(ptr, size, device)

    def _deregister(self, ptr: int) -> None:
        self._mover.deregister(ptr)

    def _check_fits(self, ptr: int, size: int, name: str) -> None:
        self._mover.check_fits(ptr, size, name)

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        self._live()
        return self._master.batch_lookup(keys)

    # -- put ------------------------------------------------------------------------------------
    # NOTE [batched data path]: a batch is placed by the client (NOTE [direct put] in
    # mori.umbp.client.pool_view; else one BatchRoutePut to the master), then per owning
    # peer (peers in parallel, each in chunks of at most PEER_CHUNK keys so a node stays under
    # its pending-slot cap) one BatchAllocateSlots, one mori-io batch transfer and one
    # BatchCommitSlots, whose ADDs reach the master in one acknowledged heartbeat before it
    # answers. A single put is a batch of one. Blocks of at most INLINE_MAX_BYTES in host memory
    # skip the allocate/write/commit sequence: one BatchPutInline per owning peer carries their
    # bytes (NOTE [inline put] in mori.umbp.peer.service). Keys a peer could not take (full,
    # dead, refused) are routed again (NOTE [batched re-route]).
    def _put_batch(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int], devs: list[int]
    ) -> list[bool]:
        routes, direct = self._place(keys, sizes)
        batch = _PutBatch(keys, ptrs, sizes, depths, devs, routes, direct, [False] * len(keys))
        first: dict[str, int] = {}
        dups: list[tuple[int, int]] = []
        for i, key in enumerate(keys):
            if key in first:  # a key twice in one batch: the later copy shares the first one's fate
                dups.append((i, first[key]))
            else:
                first[key] = i
        unrouted = self._put_routed(batch, list(first.values()))
        if unrouted:  # said, as every other reason a block is not stored is
            log.warning(
                "put %r and %d more of a batch of %d: no node can hold them (the master placed the "
                "batch by the capacity of the live nodes, and these are past it); not stored",
                keys[unrouted[0]],
                len(unrouted) - 1,
                len(keys),
            )
        moved = self._moved_owners(batch) if direct else set()
        # NOTE [waiting for room] in mori.umbp.peer.store: one deadline for the whole batch's waits.
        self._put_rerouted(batch, moved, time.monotonic() + rpc.timeout_s())
        for i, j in dups:
            batch.out[i] = batch.out[j]
        return batch.out

    def _put_routed(self, batch: _PutBatch, which: list[int]) -> list[int]:
        """Puts the blocks ``which`` of ``batch`` where their routes say: this node's own store,
        inline or by slots (NOTE [batched data path]). Fills ``batch.out`` and ``batch.retry``;
        returns the blocks that got no route (not stored)."""
        pb = rpc.pb
        local: list[int] = []
        remote: dict[str, list[int]] = {}
        unrouted: list[int] = []
        for i in which:
            route = batch.routes[i]
            if route.outcome == pb.ALREADY_EXISTS:
                batch.out[i] = True
            elif route.outcome != pb.ROUTED:
                unrouted.append(i)
            elif route.node_id == self.node_id:
                local.append(i)
            else:
                remote.setdefault(route.node_id, []).append(i)
        if local:
            self._put_local(batch, local)
        inline = self._take_inline(remote, batch.routes, batch.sizes, batch.devs)
        if inline:
            older = self._put_inline(batch, inline)
            for node, idx in older.items():
                remote.setdefault(node, []).extend(idx)  # peers without BatchPutInline: the slot path
        if remote:
            self._put_remote(batch, remote)
        return unrouted

    # NOTE [batched re-route]: the blocks of a batch that a peer could not take are routed again
    # by the master past that peer in one BatchRoutePut per refusing peer, and put through the
    # batched path again (on the `lru` trace a batch get leases a peer's every block for 500 ms,
    # and a put that follows finds it full: one route and one or two peer calls for all of its
    # refused blocks, where each used to cost a route, an AllocateSlot, a write and a
    # CommitSlot). What that second pass could not store goes key by key (_put_again): more
    # peers to try, and the wait for room of a pool that is full everywhere.
    def _put_rerouted(self, batch: _PutBatch, moved: set[str], deadline: float) -> None:
        by_peer: dict[str, list[tuple[int, PeerUnavailableError | None]]] = {}
        for i, node, failure in batch.retry:
            # Restarted elsewhere (NOTE [direct put]): routed again without excluding it, as a new peer.
            by_peer.setdefault(node, []).append((i, None if node in moved else failure))
        # Every peer's refused blocks take their batched passes before any block waits key by key:
        # a wait outlasts the leases that made the peers refuse, and what one block then finds
        # (room again on the peer that refused it) another block placed by the stale refusal would not.
        one_by_one: list[tuple[int, list[str], PeerUnavailableError | None, list[tuple[Any, _NoSpace]]]] = []
        for node, refused in by_peer.items():
            idx = [i for i, _ in refused]
            _say_routing_again(batch.keys, refused)
            exclude = [] if node in moved else [node]
            routes = self._master.batch_route_put([batch.keys[i] for i in idx], [batch.sizes[i] for i in idx], exclude)
            sub = batch.subset(idx, routes)
            unrouted = self._put_routed(sub, list(range(len(idx))))
            for j, stored in enumerate(sub.out):
                batch.out[idx[j]] = stored
            _say_routing_again(sub.keys, [(j, f) for j, _, f in sub.retry])
            again = [(j, node2, failure2) for j, node2, failure2 in sub.retry] + [(j, "", None) for j in unrouted]
            if node not in moved:  # full on both peers: the first one asked again at once, as one batch
                again = self._ask_again_at_once(batch, refused, again)
            for j, node2, failure2 in again:
                i, failure = refused[j]
                # Full peers (no failure) are asked again for room if every other one is full too.
                full = [(batch.routes[i], _NoSpace.of_batch(node))] if failure is None and node not in moved else []
                tried = list(exclude)
                if node2:  # "": the master had no route for it (it asks once more)
                    tried.append(node2)
                    if failure2 is None:
                        full.append((sub.routes[j], _NoSpace.of_batch(node2)))
                one_by_one.append((i, tried, failure2 or failure, full))
        for i, tried, failure, full in one_by_one:
            batch.out[i] = self._put_again(
                batch.keys[i],
                batch.ptrs[i],
                batch.sizes[i],
                batch.depths[i],
                batch.devs[i],
                tried,
                failure,
                deadline,
                full,
                attempts=MAX_ATTEMPTS - 2,
            )

    def _ask_again_at_once(
        self,
        batch: _PutBatch,
        refused: list[tuple[int, PeerUnavailableError | None]],
        again: list[tuple[int, str, PeerUnavailableError | None]],
    ) -> list[tuple[int, str, PeerUnavailableError | None]]:
        """NOTE [batched re-route]: the blocks of ``again`` (index in ``refused``, the second peer,
        why) that both peers refused as full ask the first one again at once in one batch, as the
        key-by-key wait for room would do first for each (on the `lru` trace a peer's leases end a
        few at a time, so some room is there again). Returns those of ``again`` still not stored."""
        full = [j for j, node2, failure2 in again if node2 and failure2 is None and refused[j][1] is None]
        if not full:
            return again
        idx = [refused[j][0] for j in full]
        sub = batch.subset(idx, [batch.routes[i] for i in idx])
        self._put_routed(sub, list(range(len(idx))))
        for k, stored in enumerate(sub.out):
            batch.out[idx[k]] = stored
        done = set(full) - {full[k] for k, _, _ in sub.retry}
        return [item for item in again if item[0] not in done]

    def _moved_owners(self, batch: _PutBatch) -> set[str]:
        """NOTE [direct put]: the owners a direct put failed on that the master now lists at
        another address (restarted): their keys are routed again without excluding them. The
        others leave the view until the master's next one, and are excluded as on the routed path
        (a copy they committed before failing may be gone with them)."""
        tried = {node: batch.routes[i].peer_address for i, node, failure in batch.retry if failure is not None}
        if not tried:
            return set()
        try:
            self._hb.beat(want_view=True)  # the master's view now, rather than at the next interval
        except MasterUnavailableError as exc:
            log.warning("no fresh pool view: %s", exc)
        moved = {node for node, address in tried.items() if self._view.address(node) not in (None, address)}
        for node in tried.keys() - moved:
            self._view.forget(node)
        return moved

    def _place(self, keys: Sequence[str], sizes: Sequence[int]) -> tuple[Sequence[Any], bool]:
        """(routes, direct): placed by this client over its pool view (NOTE [direct put]), or, when
        the view has no room for some key (or no nodes yet), routed by the master."""
        if self._view:
            seen: set[str] = set()
            todo: list[int | None] = []
            for key, size in zip(keys, sizes, strict=True):
                todo.append(None if key in seen else size)  # a repeated key shares the first's fate
                seen.add(key)
            picks = self._view.place(todo)
            if all(pick is not None for pick, want in zip(picks, todo, strict=True) if want is not None):
                return picks, True
        return self._master.batch_route_put(keys, sizes), False

    def _take_inline(
        self, remote: dict[str, list[int]], routes: Any, sizes: Sequence[int], devs: list[int]
    ) -> dict[str, list[int]]:
        """Moves the host-memory blocks of at most INLINE_MAX_BYTES out of ``remote``: they go
        inline (NOTE [inline put] in mori.umbp.peer.service), unless their peer lacks the call or
        they add up to more than INLINE_GROUP_MAX_BYTES for it (NOTE [inline or slots])."""
        inline: dict[str, list[int]] = {}
        for node in list(remote):
            if routes[remote[node][0]].peer_address in self._no_inline:
                continue
            small = [i for i in remote[node] if sizes[i] <= INLINE_MAX_BYTES and devs[i] == devmem.HOST]
            if not small or sum(sizes[i] for i in small) > INLINE_GROUP_MAX_BYTES:
                continue
            inline[node] = small
            rest = [i for i in remote[node] if sizes[i] > INLINE_MAX_BYTES or devs[i] != devmem.HOST]
            if rest:
                remote[node] = rest
            else:
                del remote[node]
        return inline

    def _put_inline(self, batch: _PutBatch, groups: dict[str, list[int]]) -> dict[str, list[int]]:
        """One BatchPutInline per owning peer and chunk, in rounds (chunk_rounds): the bytes ride in
        the call, and an answer of STORED means committed and acknowledged by the master. Returns
        the blocks of peers that do not serve the call (an older version), for the slot path."""
        ppb = rpc.peer_pb
        res_t = ppb.PutInlineResult
        older: dict[str, list[int]] = {}
        for round_ in chunk_rounds(groups):
            calls = []
            for j, (node, idx) in enumerate(round_.items()):
                route = batch.routes[idx[0]]
                req = ppb.BatchPutInlineRequest(
                    entries=[
                        ppb.PutInlineEntry(
                            key=batch.keys[i],
                            tier=int(batch.routes[i].tier),
                            depth=batch.depths[i],
                            data=ctypes.string_at(batch.ptrs[i], batch.sizes[i]),
                            if_absent=batch.direct,
                        )
                        for i in idx
                    ]
                )
                what = f"BatchPutInline on peer {node!r} at {route.peer_address}"
                put = self._peer_call(route.peer_address, "BatchPutInline")
                # NOTE [overlapped calls]: the last chunk's call runs in this thread, taken first below.
                last = j == len(round_) - 1
                calls.append((node, idx, rpc.start(what, put, req, PeerUnavailableError, overlap=not last)))
            for node, idx, pending in reversed(calls):
                route = batch.routes[idx[0]]
                who = f"peer {node!r} at {route.peer_address}"
                try:
                    res = pending.result()
                except PeerUnavailableError as exc:
                    if exc.unimplemented:
                        log.info("peer %r at %s has no BatchPutInline: putting by slots", node, route.peer_address)
                        self._no_inline.add(route.peer_address)
                        older.setdefault(node, []).extend(idx)
                    else:
                        batch.retry.extend((i, node, exc) for i in idx)
                    continue
                if batch.direct:
                    self._view.refresh(node, res.tier_capacities)
                owner = self._owners.owner(node, route.peer_address, route.engine_desc)
                for i, e in zip(idx, res.entries, strict=True):
                    if e.outcome == res_t.STORED:
                        batch.out[i] = True
                        self._owners.remember(batch.keys[i], owner)
                    elif e.outcome == res_t.ALREADY_EXISTS:
                        batch.out[i] = True
                    else:
                        batch.not_taken(i, node, who, "BatchPutInline", res_t, e)
        return older

    def _put_local(self, batch: _PutBatch, idx: list[int]) -> None:
        """Self-target puts: local copies, no RPC but the one acknowledgement of all their ADDs
        (ADD-if-absents when ``direct``; a refused one is a key stored elsewhere: True too)."""
        committed: list[int] = []
        for i in reversed(idx):  # NOTE [chain order] in mori.umbp.peer.store
            try:
                done = self._put_self(
                    batch.keys[i],
                    batch.ptrs[i],
                    batch.sizes[i],
                    int(batch.routes[i].tier),
                    batch.depths[i],
                    batch.devs[i],
                    batch.direct,
                )
                if done == "COMMITTED":
                    committed.append(i)
                else:
                    batch.out[i] = done == "EXISTS"
            except _NoSpace:
                batch.retry.append((i, self.node_id, None))
        if committed and not self._after_commit([batch.keys[i] for i in committed], batch.direct):
            failure = PeerUnavailableError("local commit: the master did not acknowledge it in time")
            batch.retry.extend((i, self.node_id, failure) for i in committed)
            return
        for i in committed:
            batch.out[i] = True

    def _put_self(self, key: str, ptr: int, size: int, tier: int, depth: int, dev: int, direct: bool = False) -> str:
        """ "COMMITTED" here by this call (not yet acknowledged by the master), "EXISTS" (committed
        and acknowledged before) or "PENDING" (another writer still holds it: not stored)."""
        outcome, slot_id, pages = self.store.allocate(key, size, tier, depth, self.node_id, rpc.timeout_s())
        if outcome in ("NO_SPACE", "NO_TIER"):
            raise _NoSpace.of_store(self.node_id, self.store.no_room(tier, size) if outcome == "NO_SPACE" else None)
        if outcome == "LIMIT":
            raise PendingLimitError(
                f"node {self.node_id!r} holds UMBP_MAX_PENDING_SLOTS_PER_NODE={self.store.max_pending_per_node} "
                "pending slots on itself"
            )
        if outcome == "PENDING":
            log.warning("put %r: another writer still holds it uncommitted; not stored", key)
            return "PENDING"
        if outcome != "ALLOCATED":
            return "EXISTS"
        try:
            self.store.copy_in(tier, pages, ptr, size, dev)
        except Exception:
            self.store.abort(slot_id)
            raise
        why, _ = self.store.commit_block(slot_id, key, direct)
        if why:
            raise PeerUnavailableError(f"local commit of {key!r} failed: {why}")
        return "COMMITTED"

    def _put_remote(self, batch: _PutBatch, groups: dict[str, list[int]]) -> None:
        """See NOTE [batched data path]; ``direct``: the commits are ADD-if-absents (NOTE [direct put])."""
        ppb = rpc.peer_pb
        res_t = ppb.AllocateSlotResponse
        rounds = chunk_rounds(groups)
        last = {node: r for r, round_ in enumerate(rounds) for node in round_}
        deferred = _Deferred()  # NOTE [deferred acknowledgement]
        in_columns: dict[str, bool] = {}  # NOTE [columns] in mori.umbp.columns
        for r, round_ in enumerate(rounds):
            allocs = {}
            for node, idx in round_.items():
                route = batch.routes[idx[0]]
                in_columns[node] = self._columns(route.peer_address)
                claims = [(batch.keys[i], batch.sizes[i], int(batch.routes[i].tier), batch.depths[i]) for i in idx]
                req = columns.allocate_request(claims, in_columns[node])
                allocs[node] = rpc.start(
                    f"BatchAllocateSlots on peer {node!r} at {route.peer_address}",
                    self._peer_call(route.peer_address, "BatchAllocateSlots"),
                    req,
                    PeerUnavailableError,
                    overlap=len(round_) > 1,
                )
            # NOTE [overlapped writes]: each owner's mori-io write starts as soon as its slots are
            # allocated, and all of the round's are waited for after, so the writes to several
            # owners overlap (and with the allocations still in flight) rather than queue.
            moving: dict[str, tuple[list[tuple[int, Any]], Any, Moving]] = {}
            started: list[Moving] = []
            with _settled(started.copy):
                for node, pending in allocs.items():
                    idx = round_[node]
                    route = batch.routes[idx[0]]
                    who = f"peer {node!r} at {route.peer_address}"
                    try:
                        try:
                            answers = columns.allocations_of(pending.result(), len(idx))
                        except ValueError as exc:  # a peer of another version since it was asked
                            self._reads_columns.pop(route.peer_address, None)
                            raise PeerUnavailableError(f"BatchAllocateSlots on {who}: {exc}") from None
                    except PeerUnavailableError as exc:
                        batch.retry.extend((i, node, exc) for i in idx)
                        batch.retry.extend((i, node, exc) for i in deferred.drop(node))  # unacknowledged
                        continue
                    slots: list[tuple[int, columns.Allocation]] = []
                    for i, a in zip(idx, answers, strict=True):
                        if a.outcome == res_t.SUCCESS_ALLOCATED:
                            slots.append((i, a))
                        elif a.outcome == res_t.SUCCESS_ALREADY_EXISTS:
                            batch.out[i] = True
                        else:
                            batch.not_taken(i, node, who, "AllocateSlot", res_t, a)
                    if not slots:
                        continue
                    items = [
                        (
                            batch.ptrs[i],
                            batch.sizes[i],
                            RemotePages(route.engine_desc, a.desc, a.pages, a.page_size),
                            batch.devs[i],
                        )
                        for i, a in slots
                    ]
                    moving[node] = (slots, route, self._mover.start_many(False, items, who))
                    started.append(moving[node][2])
            commits = {}
            for node, (slots, route, transfer) in moving.items():
                who = transfer.who
                stub = self._peer(route.peer_address)
                try:
                    transfer.wait()
                except PeerUnavailableError as exc:
                    self._abort_all(stub, [a.slot_id for _, a in slots])
                    batch.retry.extend((i, node, exc) for i, _ in slots)
                    continue
                # NOTE [deferred acknowledgement]: the owner's last round, or one whose commits
                # would take its deferred keys past MAX_BATCH, waits for the master and
                # acknowledges the earlier rounds' commits.
                ack = r == last[node] or deferred.must_acknowledge(node, len(slots))
                req = columns.commit_request(
                    [(a.slot_id, batch.keys[i], batch.direct) for i, a in slots],
                    in_columns[node],
                    defer_ack=not ack,
                    acknowledge_keys=[batch.keys[i] for i in deferred.waiting(node)] if ack else [],
                )
                commits[node] = (
                    slots,
                    ack,
                    rpc.start(
                        f"BatchCommitSlots on {who}",
                        self._peer_call(route.peer_address, "BatchCommitSlots"),
                        req,
                        PeerUnavailableError,
                        overlap=len(round_) > 1,
                    ),
                )
            for node, (slots, ack, pending) in commits.items():
                try:
                    done = pending.result()
                except PeerUnavailableError as exc:
                    batch.retry.extend((i, node, exc) for i, _ in slots)
                    if ack:
                        batch.retry.extend((i, node, exc) for i in deferred.drop(node))
                    continue
                route = batch.routes[slots[0][0]]
                owner = self._owners.owner(node, route.peer_address, route.engine_desc)
                if ack:
                    self._settle(batch, deferred, node, done, owner)
                exists = list(done.already_exists) or [False] * len(slots)  # an older peer sends none
                stored, placed = [], []
                for (i, _), ok, why, there in zip(slots, done.success, done.message, exists, strict=True):
                    if ok:
                        stored.append(i)
                        if not there:
                            placed.append(batch.keys[i])
                    else:
                        batch.retry.append(
                            (i, node, PeerUnavailableError(f"CommitSlot on peer {node!r} refused: {why}"))
                        )
                self._owners.remember_many(placed, owner)
                if done.deferred:  # committed, not acknowledged yet: True once a later commit is
                    batch.retry.extend((i, node, exc) for i, exc in deferred.add(node, int(done.instance), stored))
                else:
                    for i in stored:
                        batch.out[i] = True
        # Owners whose last round committed nothing (refused, full, or a failed write) still owe
        # the acknowledgement of their deferred commits: one call with no entries asks for it
        # (at most MAX_BATCH keys: must_acknowledge bounds them).
        for node in deferred.nodes():
            route = batch.routes[deferred.waiting(node)[0]]
            req = ppb.BatchCommitSlotsRequest(acknowledge_keys=[batch.keys[i] for i in deferred.waiting(node)])
            try:
                done = rpc.call(
                    f"BatchCommitSlots on peer {node!r} at {route.peer_address}",
                    self._peer_call(route.peer_address, "BatchCommitSlots"),
                    req,
                    PeerUnavailableError,
                )
            except PeerUnavailableError as exc:
                batch.retry.extend((i, node, exc) for i in deferred.drop(node))
                continue
            owner = self._owners.owner(node, route.peer_address, route.engine_desc)
            self._settle(batch, deferred, node, done, owner)

    def _settle(self, batch: _PutBatch, deferred: _Deferred, node: str, done: Any, owner: Owner) -> None:
        """NOTE [deferred acknowledgement]: ``node``'s deferred commits are stored once the answer
        that acknowledged them comes from the same run of the peer that committed them; else
        (not acknowledged in time, or the peer restarted in between) they are put again."""
        instance, idx = deferred.take(node)
        if not idx:
            return
        if done.acknowledged and int(done.instance) == instance:
            for i in idx:
                batch.out[i] = True
            self._owners.remember_many([batch.keys[i] for i in idx], owner)
            return
        why = "the peer restarted" if done.acknowledged else "the master did not acknowledge them in time"
        failure = PeerUnavailableError(f"deferred commits on peer {node!r}: {why}")
        batch.retry.extend((i, node, failure) for i in idx)

    def _put_again(
        self,
        key: str,
        ptr: int,
        size: int,
        depth: int,
        dev: int,
        exclude: list[str],
        failure: PeerUnavailableError | None,
        deadline: float,
        full: list[tuple[Any, _NoSpace]],
        attempts: int,
    ) -> bool:
        """Routes ``key`` again past the peers in ``exclude`` (they were full or failed; ``failure``:
        the last error of one that failed), at most ``attempts`` times; ``full``: the routes of
        those that were full, with their refusals. When every peer it may go to is full, asks them
        again for room until ``deadline`` (NOTE [waiting for room] in mori.umbp.peer.store)."""
        pb = rpc.pb
        full = list(full)
        for _ in range(attempts):
            (route,) = self._master.batch_route_put([key], [size], exclude)
            if route.outcome == pb.ALREADY_EXISTS:
                return True
            if route.outcome != pb.ROUTED:
                break
            try:
                return self._put_to(key, ptr, size, route, depth, dev)
            except _NoSpace as exc:
                log.info("peer %r was full for %r: routing again", route.node_id, key)
                full.append((route, exc))
            except PeerUnavailableError as exc:
                log.warning("put %r: %s; routing again", key, exc)
                failure = exc
            exclude.append(route.node_id)
        refusal = None
        if full:
            stored, refusal = self._wait_for_room(key, ptr, size, depth, dev, full, deadline)
            if stored is not None:
                return stored
        if failure is not None:
            raise PeerUnavailableError(f"put {key!r}: no live peer took it (last error: {failure})")
        # Every peer tried was full of blocks it may not evict (read leases, pending or
        # unacknowledged writes) until the deadline: said here, as the other reasons a put is not
        # stored are, with what the last refusal found.
        tried = ", ".join(exclude) or "none"
        if refusal is None:
            log.warning("put %r: no peer had room (tried %s); not stored", key, tried)
        else:
            log.warning(
                "put %r: no peer had room (tried %s) within its deadline: %s; not stored", key, tried, refusal.error
            )
        return False

    def _wait_for_room(
        self, key: str, ptr: int, size: int, depth: int, dev: int, full: list[tuple[Any, _NoSpace]], deadline: float
    ) -> tuple[bool | None, _NoSpace]:
        """NOTE [waiting for room] in mori.umbp.peer.store: asks each peer of ``full`` (route,
        refusal) again when its last refusal said room may come, the soonest first, until
        ``deadline``. (the put's result, or None when no peer took it; the last refusal)."""
        now = time.monotonic()
        due = {r.node_id: (now + exc.retry_after_s, r) for r, exc in full if exc.retry_after_s is not None}
        last = full[-1][1]
        while due:
            node = min(due, key=lambda n: due[n][0])
            at, route = due.pop(node)
            if at > deadline:
                break
            time.sleep(max(0.0, at - time.monotonic()))
            try:
                return self._put_to(key, ptr, size, route, depth, dev), last
            except _NoSpace as exc:
                last = exc
                if exc.retry_after_s is not None:
                    due[node] = (time.monotonic() + exc.retry_after_s, route)
            except PeerUnavailableError as exc:
                log.warning("put %r: %s; not asking it again", key, exc)
        return None, last

    def _put_to(self, key: str, ptr: int, size: int, route: Any, depth: int, dev: int) -> bool:
        """True once the block is committed and visible (ours, or another writer's); False when
        another writer still held the key after our wait (NOTE [one key, many writers])."""
        tier = int(route.tier)
        if route.node_id == self.node_id:  # self-target fast path: a local copy, no RPC
            done = self._put_self(key, ptr, size, tier, depth, dev)
            if done != "COMMITTED":
                return done == "EXISTS"
            if not self._after_commit([key]):
                raise PeerUnavailableError(f"local commit of {key!r}: the master did not acknowledge it in time")
            return True
        stub = self._peer(route.peer_address)
        who = f"peer {route.node_id!r} at {route.peer_address}"
        out = rpc.peer_pb.AllocateSlotResponse
        res = rpc.call(
            f"AllocateSlot on {who}",
            stub.AllocateSlot,
            rpc.peer_pb.AllocateSlotRequest(size=size, tier=tier, key=key, depth=depth),
            PeerUnavailableError,
        )
        if res.outcome == out.SUCCESS_ALREADY_EXISTS:
            return True
        if res.outcome == out.FAILED_PENDING:
            log.warning("put %r: %s; not stored", key, res.message)
            return False
        if res.outcome == out.FAILED_NO_SPACE:
            raise _NoSpace.of_answer(who, route.node_id, res)
        if res.outcome != out.SUCCESS_ALLOCATED:
            raise PeerUnavailableError(f"AllocateSlot on {who} failed: {res.message}")
        remote = RemotePages(
            route.engine_desc, res.descs[0], [int(p.page_index) for p in res.pages], int(res.page_size)
        )
        try:
            self._mover.write(ptr, size, remote, who, dev)
        except PeerUnavailableError:
            self._abort_all(stub, [int(res.slot_id)])
            raise
        done = rpc.call(
            f"CommitSlot on {who}",
            stub.CommitSlot,
            rpc.peer_pb.CommitSlotRequest(slot_id=res.slot_id, key=key),
            PeerUnavailableError,
        )
        if not done.success:
            raise PeerUnavailableError(f"CommitSlot on {who} refused: {done.message}")
        return True

    def _abort_all(self, stub: Any, slot_ids: list[int]) -> None:
        # Best effort: the pending TTL frees the slots anyway.
        with contextlib.suppress(PeerUnavailableError):
            rpc.call(
                "BatchAbortSlots",
                stub.BatchAbortSlots,
                rpc.peer_pb.BatchAbortSlotsRequest(slot_ids=slot_ids),
                PeerUnavailableError,
            )

    # -- get ------------------------------------------------------------------------------------
    def _get_batch(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], devs: list[int]) -> list[bool]:
        """Owners from NOTE [owner cache], the rest from one BatchRouteGet; then per owning peer one
        BatchResolveKeys and one mori-io batch read (NOTE [batched data path]); keys an owner no
        longer holds, or whose owner failed, try another replica through the master."""
        out = [False] * len(keys)
        owners: list[Owner | None] = [self._owners.get(k) for k in keys]
        cached = [o is not None for o in owners]
        ask = [i for i, o in enumerate(owners) if o is None]
        if ask:
            res = self._master.batch_route_get([keys[i] for i in ask])
            for j, i in enumerate(ask):
                ref = int(res.node_ref[j])
                if not ref:
                    continue
                if int(res.size[j]) != sizes[i]:
                    raise InvalidArgumentError(f"size={sizes[i]} but block {keys[i]!r} holds {int(res.size[j])} bytes")
                node = res.nodes[ref - 1]
                owners[i] = self._owners.owner(node.node_id, node.peer_address, node.engine_desc)
        groups: dict[Owner, list[int]] = {}
        for i, owner in enumerate(owners):
            if owner is not None:
                groups.setdefault(owner, []).append(i)
        retry: list[tuple[int, str, PeerUnavailableError | None]] = []
        address = {o.node_id: o.peer_address for o in groups}
        mine = [i for owner in [o for o in groups if o.node_id == self.node_id] for i in groups.pop(owner)]
        for i in reversed(mine):  # NOTE [chain order] in mori.umbp.peer.store
            out[i] = self.store.read_local(keys[i], ptrs[i], sizes[i], devs[i])
            if not out[i]:
                retry.append((i, self.node_id, None))
        pending = []
        # NOTE [wire chunks]: every chunk's call is in flight at once, so an owner's keys go in at
        # most PEER_STREAMS calls, the wire connections its channel holds. A 300-block get of the
        # trace went in five 32-key calls per owner, and the fifth took gRPC (a stream, answered
        # through threads on both sides): 9-10 ms against a read ceiling of 5-6 ms.
        chunks = [item for round_ in chunk_rounds(groups, PEER_STREAMS) for item in round_.items()]
        for j, (owner, chunk) in enumerate(chunks):
            req = rpc.peer_pb.BatchResolveKeysRequest(keys=[keys[i] for i in chunk], columns=True)
            what = f"BatchResolveKeys on peer {owner.node_id!r} at {owner.peer_address}"
            resolve = self._peer_call(owner.peer_address, "BatchResolveKeys")
            # NOTE [overlapped calls]: the last chunk's call runs in this thread, taken first below.
            call = rpc.start(what, resolve, req, PeerUnavailableError, overlap=j < len(chunks) - 1)
            pending.append((owner, chunk, call))
        reading: list[tuple[Owner, list[int], list[int], Moving]] = []
        with _settled(lambda: [r[3] for r in reading]):
            self._start_reads(pending, keys, ptrs, sizes, devs, retry, reading)
        for owner, done, leases, transfer in reading:
            try:
                transfer.wait()
                for i in done:
                    out[i] = True
                self._owners.remember_many([keys[i] for i in done if not cached[i]], owner)
            except PeerUnavailableError as exc:
                self._owners.forget_node(owner.node_id)
                retry.extend((i, owner.node_id, exc) for i in done)
            finally:
                for lease in leases:  # free the staging slots now rather than at lease expiry
                    self._release_ssd(owner.peer_address, lease)
        for i, excluded, failure in retry:
            if cached[i] and failure is not None:  # the master decides, as if never remembered
                failed_on = (excluded, address[excluded], failure)
                out[i] = self._get_again(keys[i], ptrs[i], sizes[i], devs[i], [], None, failed_on)
            else:
                out[i] = self._get_again(keys[i], ptrs[i], sizes[i], devs[i], [excluded], failure)
        return out

    def _start_reads(
        self,
        pending: list[tuple[Owner, list[int], Any]],
        keys: Sequence[str],
        ptrs: Sequence[int],
        sizes: Sequence[int],
        devs: list[int],
        retry: list[tuple[int, str, PeerUnavailableError | None]],
        reading: list[tuple[Owner, list[int], list[int], Moving]],
    ) -> None:
        """Takes each BatchResolveKeys answer (last chunk first) and starts the mori-io read of
        what it found, appending (owner, keys' indexes, SSD leases, transfer) to ``reading``."""
        for owner, chunk, call in reversed(pending):
            who = f"peer {owner.node_id!r} at {owner.peer_address}"
            try:
                try:  # NOTE [columns] in mori.umbp.columns: either form
                    found = columns.resolutions_of(call.result(), len(chunk))
                except ValueError as exc:
                    raise PeerUnavailableError(f"BatchResolveKeys on {who}: {exc}") from None
            except PeerUnavailableError as exc:
                self._owners.forget_node(owner.node_id)
                retry.extend((i, owner.node_id, exc) for i in chunk)
                continue
            items, done, leases = [], [], []
            for i, e in zip(chunk, found, strict=True):
                if e.found and e.ssd_lease_id:
                    leases.append(e.ssd_lease_id)
                if not e.found:  # evicted since it was routed or remembered: try another replica
                    self._owners.forget(keys[i])
                    retry.append((i, owner.node_id, None))
                    continue
                if e.size != sizes[i]:  # a remembered owner: the size is checked here
                    for lease in leases:
                        self._release_ssd(owner.peer_address, lease)
                    raise InvalidArgumentError(f"size={sizes[i]} but block {keys[i]!r} holds {e.size} bytes")
                items.append((ptrs[i], sizes[i], RemotePages(owner.engine_desc, e.desc, e.pages, e.page_size), devs[i]))
                done.append(i)
            # NOTE [overlapped writes] (reads here): started now, waited for once all are started.
            reading.append((owner, done, leases, self._mover.start_many(True, items, who)))

    def _get_again(
        self,
        key: str,
        ptr: int,
        size: int,
        dev: int,
        exclude: list[str],
        failure: PeerUnavailableError | None,
        failed_on: tuple[str, str, PeerUnavailableError] | None = None,
    ) -> bool:
        """Another replica of ``key``, past the nodes in ``exclude``. ``failed_on`` (a remembered
        owner that failed, and its address): if the master routes to it there too, that failure
        counts as this attempt's (a node restarted on another address is tried)."""
        if failure is not None:
            log.warning("get %r: %s; trying another replica", key, failure)
        for _ in range(MAX_ATTEMPTS - 1):
            hit = self._master.route_get(key, exclude)
            if not hit.found:
                break
            if failed_on is not None and (hit.node_id, hit.peer_address) == failed_on[:2]:
                log.warning("get %r: %s; trying another replica", key, failed_on[2])
                failure = failed_on[2]
                exclude.append(hit.node_id)
                continue
            if int(hit.size) != size:
                raise InvalidArgumentError(f"size={size} but block {key!r} holds {int(hit.size)} bytes")
            try:
                if self._get_from(key, ptr, size, hit, dev):
                    return True
            except PeerUnavailableError as exc:
                log.warning("get %r: %s; trying another replica", key, exc)
                failure = exc
            exclude.append(hit.node_id)
        if failure is not None:
            raise PeerUnavailableError(f"get {key!r}: every replica's peer failed (last error: {failure})")
        return False

    def _get_from(self, key: str, ptr: int, size: int, node: Any, dev: int) -> bool:
        if node.node_id == self.node_id:  # a local copy or a file read: no transfer
            return self.store.read_local(key, ptr, size, dev)
        who = f"peer {node.node_id!r} at {node.peer_address}"
        res = rpc.call(
            f"ResolveKey on {who}",
            self._peer(node.peer_address).ResolveKey,
            rpc.peer_pb.ResolveKeyRequest(key=key),
            PeerUnavailableError,
        )
        if not res.found:
            return False  # evicted since the master routed us: try another replica
        remote = RemotePages(node.engine_desc, res.descs[0], [int(p.page_index) for p in res.pages], int(res.page_size))
        try:
            self._mover.read(ptr, size, remote, who, dev)
        finally:
            if res.ssd_lease_id:  # free the staging slot now rather than at lease expiry
                self._release_ssd(node.peer_address, int(res.ssd_lease_id))
        return True

    def _release_ssd(self, address: str, lease_id: int) -> None:
        # Best effort, as MORI's ReleaseSsdLease: the lease expires on its own.
        with contextlib.suppress(PeerUnavailableError):
            rpc.call(
                "ReleaseSsdLease",
                self._peer(address).ReleaseSsdLease,
                rpc.peer_pb.ReleaseSsdLeaseRequest(lease_id=lease_id),
                PeerUnavailableError,
            )

    # -- external KV (MORI's names; for this node) ----------------------------------------------
    def report_external_kv_blocks(self, hashes: Sequence[str], tier: UMBPTierType) -> bool:
        self._live()
        self._master.report_external_kv_blocks(self.node_id, hashes, tier)
        return True

    def revoke_external_kv_blocks(self, hashes: Sequence[str], tier: UMBPTierType) -> bool:
        self._live()
        self._master.revoke_external_kv_blocks(self.node_id, hashes, tier)
        return True

    def revoke_all_external_kv_blocks_at_tier(self, tier: UMBPTierType) -> bool:
        self._live()
        self._master.revoke_all_external_kv_blocks_at_tier(self.node_id, tier)
        return True

    def match_external_kv(self, hashes: Sequence[str], count_as_hit: bool = False) -> list[UMBPExternalKvMatch]:
        """As MORI: an unreachable master gives [] (a router then just sees no match); bad input
        still raises."""
        self._live()
        try:
            return [UMBPExternalKvMatch.of(m) for m in self._master.match_external_kv(hashes, count_as_hit)]
        except MasterUnavailableError as exc:
            log.warning("match_external_kv: %s; answering no match", exc)
            return []

    def get_external_kv_hit_counts(self, hashes: Sequence[str]) -> list[UMBPExternalKvHitCountEntry]:
        self._live()
        return self._master.get_external_kv_hit_counts(hashes)

    def flush(self) -> bool:
        """Ships this node's pending events to the master now; True once acknowledged."""
        self._live()
        return self._hb.flush(rpc.timeout_s())

    def clear(self) -> bool:
        """Drops every block this node owns (page tiers and SSD) and tells the master."""
        self._live()
        self.store.clear()
        return self.flush()

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Unregisters (best effort), stops serving and releases memory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._hb.stop()
        try:
            self._master.unregister_self()
        except Exception as exc:  # the master may be gone; the reaper then expires this node
            log.warning("unregister on close failed: %s", exc)
        self._teardown()

    def _teardown(self) -> None:
        if self._peer_wire is not None:
            self._peer_wire.stop()
        self._peer_server.stop(0).wait()
        with self._peers_lock:
            for ch, _, pools in self._peers.values():
                for pool in pools.values():
                    pool.close()
                ch.close()
            self._peers.clear()
        self._master.close()
        self._mover.close()
        self.store.close(self._engine)
        self._engine.shutdown()

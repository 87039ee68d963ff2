# SPDX-License-Identifier: MIT
"""``UMBPClient`` in distributed mode (MORI's PoolClient): a node of the pool.

Each client is also a peer: it owns a DRAM tier (``dram.capacity_bytes``; 0 owns none), serves
UMBPPeer for it and heartbeats to the master. Puts route through the master (which dedups),
allocate pages on the chosen peer, write them with mori-io and commit; gets route, resolve the
pages on the owning peer and read them with mori-io. Bytes go peer to peer, never via the master.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mori.io import BackendType, IOEngine, IOEngineConfig, TcpBackendConfig
from mori.umbp import rpc, settings
from mori.umbp.client.config import UMBPConfig, UMBPDeploymentMode
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch
from mori.umbp.client.heartbeat import HeartbeatLoop
from mori.umbp.client.master_client import UMBPMasterClient
from mori.umbp.client.transfer import Mover, RemotePages
from mori.umbp.errors import (
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    MasterUnavailableError,
    PeerUnavailableError,
)
from mori.umbp.peer.service import PeerServicer
from mori.umbp.peer.ssd import SsdTier
from mori.umbp.peer.ssd_staging import SsdStaging
from mori.umbp.peer.store import PeerStore
from mori.umbp.types import UMBPTierType, check_key, check_ptr, check_size

log = logging.getLogger(__name__)

#: Route attempts per key: the first choice plus retries after a full or dead peer.
MAX_ATTEMPTS = 4


class _NoSpace(Exception):
    """The routed peer had no free pages after all (the master's view lagged)."""


def _check_lists(**lists: Sequence[Any]) -> int:
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(f"list lengths differ: {lengths}")
    return next(iter(lengths.values()))


class UMBPClient:
    """MORI's ``UMBPClient`` API over the distributed pool; also a context manager."""

    def __init__(self, config: UMBPConfig | None = None) -> None:
        config = config if config is not None else UMBPConfig.from_environment()
        dist = config.distributed
        if dist is None:
            raise ConfigError("UMBPConfig.distributed is None: this build has the distributed mode only")
        mc = dist.master_config
        if not mc.master_address or not mc.node_id:
            raise ConfigError(
                f"master_config.master_address={mc.master_address!r} and node_id={mc.node_id!r} are required"
            )
        if config.dram.capacity_bytes < 0 or config.dram.page_size < 4096:
            raise ConfigError(
                f"dram.capacity_bytes={config.dram.capacity_bytes} must be >= 0 and "
                f"dram.page_size={config.dram.page_size} >= 4096"
            )
        if dist.staging_buffer_size <= 0:
            raise ConfigError(f"staging_buffer_size={dist.staging_buffer_size} must be positive")
        self.config = config
        self.node_id = mc.node_id
        # Built first: it checks the SSD config before anything needs tearing down.
        ssd = self._make_ssd_tier(config) if config.ssd.enabled else None
        host = mc.node_address or settings.get_str("UMBP_NODE_ADDRESS")
        timeout_ms = settings.get_int("UMBP_TRANSFER_TIMEOUT_MS")
        self._closed = False
        self._engine = IOEngine(f"umbp-{self.node_id}", IOEngineConfig(host=host))
        self._engine.create_backend(BackendType.TCP, TcpBackendConfig(op_timeout_ms=timeout_ms, num_data_conns=2))
        self._desc = self._engine.get_engine_desc().pack()
        self.store = PeerStore(
            self._engine,
            config.dram.capacity_bytes,
            config.dram.page_size,
            settings.get_int("UMBP_PENDING_SLOT_TTL_MS") / 1000,
            settings.get_int("UMBP_DRAM_READ_LEASE_MS") / 1000,
        )
        if ssd is not None:
            staging = SsdStaging(
                self._engine,
                dist.ssd_staging_buffer_size,
                dist.ssd_staging_buffer_slots,
                settings.get_int("UMBP_SSD_READ_LEASE_MS") / 1000,
            )
            self.store.enable_ssd(ssd, staging, lambda: self._hb.kick())
        self._mover = Mover(self._engine, dist.staging_buffer_size, timeout_ms)
        self._sync_flush = settings.get_bool("UMBP_COMMIT_SYNC_FLUSH")
        self._peer_server: Any = rpc.server(workers=8)
        servicer = PeerServicer(self.store, self._desc, self._after_commit, lambda: self._hb.kick())
        rpc.peer_grpc.add_UMBPPeerServicer_to_server(servicer, self._peer_server)
        port = rpc.bind(self._peer_server, f"{host}:{dist.peer_service_port}")
        self.peer_address = f"{host}:{port}"
        self._peer_server.start()
        self._master = UMBPMasterClient(mc.master_address, self.node_id, host)
        self._tags = list(mc.tags)
        self._peers: dict[str, Any] = {}
        self._peers_lock = threading.Lock()
        try:
            interval_ms = self._register()
        except Exception:
            self._teardown()
            raise
        self._hb = HeartbeatLoop(self._master, self.store, self._register, interval_ms / 1000)
        self._hb.start()
        log.info("UMBP node %r up: peer %s, %d bytes DRAM", self.node_id, self.peer_address, self.store.alloc.capacity)

    def __repr__(self) -> str:
        return (
            f"UMBPClient(node_id={self.node_id!r}, peer={self.peer_address!r}, master={self._master.master_address!r})"
        )

    @staticmethod
    def _make_ssd_tier(config: UMBPConfig) -> SsdTier:
        ssd = config.ssd
        # One subdirectory per node, so nodes may share a storage_dir without clobbering files.
        subdir = re.sub(r"[^A-Za-z0-9._-]", "_", config.distributed.master_config.node_id if config.distributed else "")
        return SsdTier(
            Path(ssd.storage_dir) / subdir,
            ssd.capacity_bytes,
            ssd.high_watermark,
            ssd.low_watermark,
            config.eviction.policy,
            config.eviction.candidate_window,
        )

    def _register(self) -> int:
        caps = {UMBPTierType(t): c for t, c in self.store.capacities().items()}
        return self._master.register_self(caps, self.peer_address, self._desc, self._tags)

    def _after_commit(self) -> None:
        if self._sync_flush:
            self._hb.flush(rpc.timeout_s())
        else:
            self._hb.kick()

    def _peer(self, address: str) -> Any:
        with self._peers_lock:
            if address not in self._peers:
                ch = rpc.channel(address)
                self._peers[address] = (ch, rpc.peer_grpc.UMBPPeerStub(ch))
            return self._peers[address][1]

    def _live(self) -> None:
        if self._closed:
            raise ClosedError(f"{self!r} is closed")

    # -- MORI's API ----------------------------------------------------------------------------
    def is_distributed(self) -> bool:
        return True

    def get_deployment_mode(self) -> UMBPDeploymentMode:
        return UMBPDeploymentMode.Distributed

    def register_memory(self, ptr: int, size: int) -> bool:
        """Pins [ptr, ptr+size) with mori-io so puts and gets in it need no staging copy."""
        self._live()
        if isinstance(size, bool) or not isinstance(size, int) or not 0 < size < 2**63:
            raise InvalidArgumentError(f"size={size!r} must be a positive int")
        self._mover.register(check_ptr(ptr), size)
        return True

    def deregister_memory(self, ptr: int) -> None:
        self._mover.deregister(ptr)

    def put_from_ptr(self, key: str, src: int, size: int) -> bool:
        """Stores ``size`` bytes at ``src`` under ``key``; first writer wins (an existing key is a
        no-op returning True). False when no peer has room; PeerUnavailableError when the peers
        chosen died mid-put (nothing of the block is visible then)."""
        self._check_one(key, src, size, "src")
        return self.batch_put_from_ptr([key], [src], [size])[0]

    def get_into_ptr(self, key: str, dst: int, size: int) -> bool:
        """Reads ``key`` into ``dst``; False on a miss. The block must be ``size`` bytes."""
        self._check_one(key, dst, size, "dst")
        return self.batch_get_into_ptr([key], [dst], [size])[0]

    def _check_one(self, key: str, ptr: int, size: int, ptr_name: str) -> None:
        # Single-key calls name their own arguments (``size``, not ``sizes[0]``).
        check_key(key)
        check_ptr(ptr, ptr_name)
        check_size(size)
        self._mover.check_fits(ptr, size, "size")

    def exists(self, key: str) -> bool:
        return self.batch_exists([key])[0]

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        self._live()
        return self._master.batch_lookup(keys)

    def batch_exists_consecutive(self, keys: Sequence[str]) -> int:
        """Length of the prefix of ``keys`` that exist (stops at the first miss)."""
        count = 0
        for found in self.batch_exists(keys):
            if not found:
                break
            count += 1
        return count

    def batch_put_from_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        return self.batch_put_from_ptr_with_depth(keys, ptrs, sizes, [-1] * len(keys))

    def batch_put_from_ptr_with_depth(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int]
    ) -> list[bool]:
        """``batch_put_from_ptr`` that also records each block's radix-chain depth (its index in
        the prompt's chain; -1: unknown), which the owner's ``prefix_aware_lru`` ranks by."""
        self._live()
        _check_lists(keys=keys, ptrs=ptrs, sizes=sizes, depths=depths)
        for i, (k, p, s, d) in enumerate(zip(keys, ptrs, sizes, depths, strict=True)):
            check_key(k, f"keys[{i}]")
            check_ptr(p, f"ptrs[{i}]")
            check_size(s, f"sizes[{i}]")
            self._mover.check_fits(p, s, f"sizes[{i}]")
            if isinstance(d, bool) or not isinstance(d, int) or not -1 <= d < 2**31:
                raise InvalidArgumentError(f"depths[{i}]={d!r} must be an int in [-1, 2**31)")
        if not keys:
            return []
        routes = self._master.batch_route_put(keys, sizes)
        return [self._put_one(k, p, s, r, d) for k, p, s, r, d in zip(keys, ptrs, sizes, routes, depths, strict=True)]

    def _put_one(self, key: str, ptr: int, size: int, route: Any, depth: int = -1) -> bool:
        pb = rpc.pb
        exclude: list[str] = []
        failure: PeerUnavailableError | None = None
        for _ in range(MAX_ATTEMPTS):
            if route.outcome == pb.ALREADY_EXISTS:
                return True
            if route.outcome != pb.ROUTED:
                break
            try:
                self._put_to(key, ptr, size, route, depth)
                return True
            except _NoSpace:
                log.info("peer %r was full for %r: routing again", route.node_id, key)
            except PeerUnavailableError as exc:
                log.warning("put %r: %s; routing again", key, exc)
                failure = exc
            exclude.append(route.node_id)
            (route,) = self._master.batch_route_put([key], [size], exclude)
        if failure is not None:
            raise PeerUnavailableError(f"put {key!r}: no live peer took it (last error: {failure})")
        return False

    def _put_to(self, key: str, ptr: int, size: int, route: Any, depth: int) -> None:
        tier = int(route.tier)
        if route.node_id == self.node_id:  # self-target fast path: a memcpy, no RPC
            outcome, slot_id, pages = self.store.allocate(key, size, tier, depth)
            if outcome == "NO_SPACE":
                raise _NoSpace()
            if outcome == "ALLOCATED":
                self.store.copy_in(pages, ptr, size)
                why = self.store.commit(slot_id, key)
                if why:
                    raise PeerUnavailableError(f"local commit of {key!r} failed: {why}")
                self._after_commit()
            return
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
            return
        if res.outcome == out.FAILED_NO_SPACE:
            raise _NoSpace()
        if res.outcome != out.SUCCESS_ALLOCATED:
            raise PeerUnavailableError(f"AllocateSlot on {who} failed: {res.message}")
        remote = RemotePages(
            route.engine_desc, res.descs[0], [int(p.page_index) for p in res.pages], int(res.page_size)
        )
        try:
            self._mover.write(ptr, size, remote, who)
        except PeerUnavailableError:
            self._abort(stub, int(res.slot_id))
            raise
        done = rpc.call(
            f"CommitSlot on {who}",
            stub.CommitSlot,
            rpc.peer_pb.CommitSlotRequest(slot_id=res.slot_id, key=key),
            PeerUnavailableError,
        )
        if not done.success:
            raise PeerUnavailableError(f"CommitSlot on {who} refused: {done.message}")

    def _abort(self, stub: Any, slot_id: int) -> None:
        # Best effort: the pending TTL frees the slot anyway.
        with contextlib.suppress(PeerUnavailableError):
            rpc.call("AbortSlot", stub.AbortSlot, rpc.peer_pb.AbortSlotRequest(slot_id=slot_id), PeerUnavailableError)

    def batch_get_into_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        self._live()
        _check_lists(keys=keys, ptrs=ptrs, sizes=sizes)
        for i, (k, p, s) in enumerate(zip(keys, ptrs, sizes, strict=True)):
            check_key(k, f"keys[{i}]")
            check_ptr(p, f"ptrs[{i}]")
            check_size(s, f"sizes[{i}]")
            self._mover.check_fits(p, s, f"sizes[{i}]")
        if not keys:
            return []
        res = self._master.batch_route_get(keys)
        out = []
        for i, key in enumerate(keys):
            ref = int(res.node_ref[i])
            node = res.nodes[ref - 1] if ref else None
            out.append(self._get_one(key, ptrs[i], sizes[i], node, int(res.size[i])))
        return out

    def _get_one(self, key: str, ptr: int, size: int, node: Any, stored: int) -> bool:
        exclude: list[str] = []
        failure: PeerUnavailableError | None = None
        for _ in range(MAX_ATTEMPTS):
            if node is None:
                break
            if stored != size:
                raise InvalidArgumentError(f"size={size} but block {key!r} holds {stored} bytes")
            try:
                if self._get_from(key, ptr, size, node.node_id, node.peer_address, node.engine_desc):
                    return True
            except PeerUnavailableError as exc:
                log.warning("get %r: %s; trying another replica", key, exc)
                failure = exc
            exclude.append(node.node_id)
            hit = self._master.route_get(key, exclude)
            node, stored = (hit, int(hit.size)) if hit.found else (None, 0)
        if failure is not None:
            raise PeerUnavailableError(f"get {key!r}: every replica's peer failed (last error: {failure})")
        return False

    def _get_from(self, key: str, ptr: int, size: int, node_id: str, address: str, engine_desc: bytes) -> bool:
        if node_id == self.node_id:  # DRAM memcpy or a file read: no transfer
            return self.store.read_local(key, ptr, size)
        who = f"peer {node_id!r} at {address}"
        res = rpc.call(
            f"ResolveKey on {who}",
            self._peer(address).ResolveKey,
            rpc.peer_pb.ResolveKeyRequest(key=key),
            PeerUnavailableError,
        )
        if not res.found:
            return False  # evicted since the master routed us: try another replica
        remote = RemotePages(engine_desc, res.descs[0], [int(p.page_index) for p in res.pages], int(res.page_size))
        try:
            self._mover.read(ptr, size, remote, who)
        finally:
            if res.ssd_lease_id:  # free the staging slot now rather than at lease expiry
                self._release_ssd(address, int(res.ssd_lease_id))
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
            return self._master.match_external_kv(hashes, count_as_hit)
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
        self._peer_server.stop(0).wait()
        with self._peers_lock:
            for ch, _ in self._peers.values():
                ch.close()
            self._peers.clear()
        self._master.close()
        self._mover.close()
        self.store.close(self._engine)
        self._engine.shutdown()

    def __enter__(self) -> UMBPClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

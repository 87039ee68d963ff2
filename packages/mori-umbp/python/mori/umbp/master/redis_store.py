# SPDX-License-Identifier: MIT
"""The Redis metadata store (UMBP_METADATA_BACKEND=redis): a master restarted on it keeps its
node registry and index, and several masters may share one namespace.

Layout, all under one hash tag ``{umbp:<ns>}`` (MORI's control tag; one slot keeps every multi-key
transaction legal on a cluster):

- ``node:<id>`` HASH: addr, peer, engine, tags ("\\n"-joined), caps ("tier:total:avail;..."),
  last_hb, reg_at, seq (``<id>`` is percent-encoded in every key and field)
- ``nodes`` SET of node ids; ``node:<id>:blocks`` SET of the node's keys
- ``block:<key>`` HASH: ``l|<node>|<tier>`` -> size, plus ``_lacc`` (last access) and ``_lease``

Run Redis with persistence off: reads are writes here (access and lease bumps), and a wiped store
heals through the peers' full-sync heartbeats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from mori.umbp.errors import MetadataStoreError
from mori.umbp.master.store import Candidate, Location, MetadataStore, NodeInfo

T = TypeVar("T")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _node_part(node_id: str) -> str:
    """A node id as one component of a Redis key or field: percent-encoded, so that ':' and '|' in
    an id (SGLang's default ids are ``<address>:dp0:pp0:tp0``) cannot name another node's records."""
    return quote(node_id, safe="")


class RedisMetadataStore(MetadataStore):
    def __init__(self, uri: str, namespace: str = "default", timeout_ms: int = 1000) -> None:
        import redis  # type: ignore[import-not-found]  # optional dependency: mori-umbp[redis]

        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._r = redis.Redis.from_url(uri, socket_timeout=timeout_ms / 1000, socket_connect_timeout=timeout_ms / 1000)
        self._tag = f"{{umbp:{namespace}}}"
        self._uri = uri
        self._do("ping", lambda: self._r.ping())

    def _k(self, *parts: str) -> str:
        return ":".join((self._tag, *parts))

    def _do(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except self._errors as exc:
            raise MetadataStoreError(f"Redis store at {self._uri}: {what} failed: {exc}") from None

    # -- nodes ----------------------------------------------------------------------------------
    def upsert_node(self, info: NodeInfo) -> None:
        def run() -> None:
            old_keys = self._r.smembers(self._k("node", _node_part(info.node_id), "blocks"))
            pipe = self._r.pipeline(transaction=True)
            for key in old_keys:
                self._unlink(pipe, info.node_id, _s(key))
            pipe.delete(self._k("node", _node_part(info.node_id), "blocks"))
            pipe.delete(self._k("node", _node_part(info.node_id)))
            pipe.hset(self._k("node", _node_part(info.node_id)), mapping=self._node_fields(info))
            pipe.sadd(self._k("nodes"), info.node_id)
            pipe.execute()

        self._do("register_client", run)

    @staticmethod
    def _node_fields(info: NodeInfo) -> dict[str, Any]:
        caps = ";".join(f"{t}:{tot}:{av}" for t, (tot, av) in sorted(info.capacities.items()))
        return {
            "addr": info.node_address,
            "peer": info.peer_address,
            "engine": info.engine_desc,
            "tags": "\n".join(info.tags),
            "caps": caps,
            "last_hb": repr(info.last_heartbeat),
            "reg_at": repr(info.registered_at),
            "seq": info.seq,
        }

    @staticmethod
    def _parse_node(node_id: str, h: dict[bytes, bytes]) -> NodeInfo:
        caps: dict[int, tuple[int, int]] = {}
        for item in _s(h.get(b"caps", b"")).split(";"):
            if item:
                tier, total, avail = item.split(":")
                caps[int(tier)] = (int(total), int(avail))
        tags = _s(h.get(b"tags", b""))
        return NodeInfo(
            node_id=node_id,
            node_address=_s(h.get(b"addr", b"")),
            peer_address=_s(h.get(b"peer", b"")),
            engine_desc=bytes(h.get(b"engine", b"")),
            tags=tags.split("\n") if tags else [],
            capacities=caps,
            last_heartbeat=float(h.get(b"last_hb", 0)),
            registered_at=float(h.get(b"reg_at", 0)),
            seq=int(h.get(b"seq", 0)),
        )

    def get_node(self, node_id: str) -> NodeInfo | None:
        h = self._do("get_node", lambda: self._r.hgetall(self._k("node", _node_part(node_id))))
        return self._parse_node(node_id, h) if h else None

    def list_nodes(self) -> list[NodeInfo]:
        def run() -> list[NodeInfo]:
            ids = sorted(_s(i) for i in self._r.smembers(self._k("nodes")))
            pipe = self._r.pipeline(transaction=False)
            for node_id in ids:
                pipe.hgetall(self._k("node", _node_part(node_id)))
            return [self._parse_node(i, h) for i, h in zip(ids, pipe.execute(), strict=True) if h]

        return self._do("list_nodes", run)

    def update_heartbeat(self, node_id: str, now: float, capacities: dict[int, tuple[int, int]]) -> None:
        fields: dict[str, Any] = {"last_hb": repr(now)}
        if capacities:
            fields["caps"] = ";".join(f"{t}:{tot}:{av}" for t, (tot, av) in sorted(capacities.items()))
        self._do("heartbeat", lambda: self._r.hset(self._k("node", _node_part(node_id)), mapping=fields))

    def remove_node(self, node_id: str) -> None:
        def run() -> None:
            keys = self._r.smembers(self._k("node", _node_part(node_id), "blocks"))
            pipe = self._r.pipeline(transaction=True)
            for key in keys:
                self._unlink(pipe, node_id, _s(key))
            pipe.delete(self._k("node", _node_part(node_id), "blocks"), self._k("node", _node_part(node_id)))
            pipe.srem(self._k("nodes"), node_id)
            pipe.execute()

        self._do("remove_node", run)

    # -- blocks ---------------------------------------------------------------------------------
    def _unlink(self, pipe: Any, node_id: str, key: str) -> None:
        # Tiers are few: drop the node's field for each; emptied hashes are cleaned by _gc.
        pipe.hdel(self._k("block", key), *(f"l|{_node_part(node_id)}|{t}" for t in range(4)))

    def _gc(self, keys: Iterable[str]) -> None:
        # A block hash left with only meta fields has no location: delete it.
        keys = list(keys)
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.hkeys(self._k("block", key))
        dead = [
            k for k, fields in zip(keys, pipe.execute(), strict=True) if not any(_s(f).startswith("l|") for f in fields)
        ]
        if dead:
            self._r.delete(*(self._k("block", k) for k in dead))

    def apply_events(
        self,
        node_id: str,
        seq: int,
        adds: Iterable[tuple[str, int, int]],
        removes: Iterable[tuple[str, int]],
        now: float,
    ) -> None:
        adds, removes = list(adds), list(removes)

        def run() -> None:
            pipe = self._r.pipeline(transaction=True)
            for key, tier, size in adds:
                pipe.hset(self._k("block", key), f"l|{_node_part(node_id)}|{tier}", size)
                pipe.hsetnx(self._k("block", key), "_lacc", repr(now))
                pipe.sadd(self._k("node", _node_part(node_id), "blocks"), key)
            for key, tier in removes:
                pipe.hdel(self._k("block", key), f"l|{_node_part(node_id)}|{tier}")
            pipe.hset(self._k("node", _node_part(node_id)), "seq", seq)
            pipe.execute()
            if removes:
                self._after_remove(node_id, [k for k, _ in removes])

        self._do("apply_heartbeat", run)

    def _after_remove(self, node_id: str, keys: list[str]) -> None:
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            pipe.hkeys(self._k("block", key))
        gone = [
            k
            for k, fields in zip(keys, pipe.execute(), strict=True)
            if not any(_s(f).startswith(f"l|{_node_part(node_id)}|") for f in fields)
        ]
        if gone:
            self._r.srem(self._k("node", _node_part(node_id), "blocks"), *gone)
        self._gc(keys)

    def replace_node_locations(
        self, node_id: str, seq: int, entries: Iterable[tuple[str, int, int]], now: float
    ) -> None:
        entries = list(entries)

        def run() -> None:
            old = [_s(k) for k in self._r.smembers(self._k("node", _node_part(node_id), "blocks"))]
            pipe = self._r.pipeline(transaction=True)
            for key in old:
                self._unlink(pipe, node_id, key)
            pipe.delete(self._k("node", _node_part(node_id), "blocks"))
            for key, tier, size in entries:
                pipe.hset(self._k("block", key), f"l|{_node_part(node_id)}|{tier}", size)
                pipe.hsetnx(self._k("block", key), "_lacc", repr(now))
                pipe.sadd(self._k("node", _node_part(node_id), "blocks"), key)
            pipe.hset(self._k("node", _node_part(node_id)), "seq", seq)
            pipe.execute()
            self._gc(old)

        self._do("full_sync", run)

    def lookup(self, keys: list[str]) -> list[list[Location]]:
        def run() -> list[list[Location]]:
            pipe = self._r.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(self._k("block", key))
            out = []
            for h in pipe.execute():
                locs = []
                for f, v in h.items():
                    name = _s(f)
                    if name.startswith("l|"):
                        _, node, tier = name.rsplit("|", 2)
                        locs.append(Location(unquote(node), int(tier), int(v)))
                out.append(locs)
            return out

        return self._do("lookup", run)

    def record_access(self, key: str, now: float, lease_until: float) -> None:
        def run() -> None:
            block = self._k("block", key)
            if not self._r.exists(block):
                return
            lease = float(self._r.hget(block, "_lease") or 0)
            self._r.hset(block, mapping={"_lacc": repr(now), "_lease": repr(max(lease, lease_until))})

        self._do("record_access", run)

    def candidates(self, node_id: str, tier: int) -> list[Candidate]:
        def run() -> list[Candidate]:
            keys = [_s(k) for k in self._r.smembers(self._k("node", _node_part(node_id), "blocks"))]
            pipe = self._r.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(self._k("block", key), f"l|{_node_part(node_id)}|{tier}", "_lacc", "_lease")
            out = []
            for key, (size, lacc, lease) in zip(keys, pipe.execute(), strict=True):
                if size is not None:
                    out.append(Candidate(key, int(size), float(lacc or 0), float(lease or 0)))
            return out

        return self._do("enumerate_eviction", run)

    def close(self) -> None:
        self._r.close()

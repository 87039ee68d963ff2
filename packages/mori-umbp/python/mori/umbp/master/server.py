# SPDX-License-Identifier: MIT
"""``MasterServer`` and the ``mori-umbp-master`` console script.

``mori-umbp-master [listen_address] [metrics_port]`` (MORI's ``umbp_master`` arguments; the
defaults come from UMBP_MASTER_LISTEN and UMBP_MASTER_METRICS_PORT). It prints the resolved
timing and the bound address, and exits on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mori.umbp import auth, rpc, settings, wire
from mori.umbp.errors import ConfigError
from mori.umbp.master.core import Master, MasterTiming
from mori.umbp.master.eviction import Evictor
from mori.umbp.master.metrics import MasterMetrics
from mori.umbp.master.policy import AFFINITIES, ALGOS
from mori.umbp.master.service import MAX_MASTER_WIRES, WIRE_CALLS, MasterServicer
from mori.umbp.master.store import InMemoryMetadataStore, MetadataStore
from mori.umbp.wire import WireServer

log = logging.getLogger(__name__)

#: The node id the master signs its own calls to peers (EvictKey) with.
MASTER_CALLER = "umbp-master"


@dataclass
class MasterServerConfig:
    """MORI's ``MasterServerConfig``; ``from_environment()`` reads the UMBP_* registry."""

    listen_address: str = "127.0.0.1:15558"
    metrics_port: int = 0
    timing: MasterTiming = field(default_factory=MasterTiming)
    reaper_interval_s: float = 5.0
    eviction_check_interval_s: float = 5.0
    high_watermark: float = 0.9
    low_watermark: float = 0.7
    evictkey_deadline_s: float = 1.0
    metadata_backend: str = "inmemory"
    redis_uri: str = ""
    redis_namespace: str = "default"
    redis_timeout_ms: int = 1000
    hit_index_ttl_s: float = 7200.0
    hit_index_gc_interval_s: float = 60.0
    hit_query_max_batch: int = 4096
    #: MORI's UMBP_ROUTE_PUT_SELECT_ALGO / UMBP_ROUTE_PUT_NODE_AFFINITY.
    put_algo: str = "most_available"
    put_affinity: str = "none"
    #: The pool secret (16 to 256 bytes) every RPC must prove; None: UMBP_POOL_SECRET, else the
    #: secret file of this port, else a fresh one written there (NOTE [pool authentication]).
    pool_secret: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_environment(cls) -> MasterServerConfig:
        g = settings
        return cls(
            listen_address=g.get_str("UMBP_MASTER_LISTEN"),
            metrics_port=g.get_int("UMBP_MASTER_METRICS_PORT"),
            timing=MasterTiming(
                g.get_float("UMBP_HEARTBEAT_TTL_SEC"),
                g.get_int("UMBP_HEARTBEAT_INTERVAL_DIVISOR"),
                g.get_int("UMBP_MAX_MISSED_HEARTBEATS"),
                g.get_float("UMBP_LEASE_DURATION_SEC"),
            ),
            reaper_interval_s=g.get_float("UMBP_REAPER_INTERVAL_SEC"),
            eviction_check_interval_s=g.get_float("UMBP_EVICTION_CHECK_INTERVAL_SEC"),
            high_watermark=g.get_float("UMBP_DRAM_HIGH_WM"),
            low_watermark=g.get_float("UMBP_DRAM_LOW_WM"),
            evictkey_deadline_s=g.get_int("UMBP_EVICTKEY_DEADLINE_MS") / 1000,
            metadata_backend=g.get_str("UMBP_METADATA_BACKEND"),
            redis_uri=g.get_str("UMBP_REDIS_URI"),
            redis_namespace=g.get_str("UMBP_REDIS_NAMESPACE"),
            redis_timeout_ms=g.get_int("UMBP_REDIS_SOCKET_TIMEOUT_MS"),
            hit_index_ttl_s=g.get_float("UMBP_HIT_INDEX_TTL_SEC"),
            hit_index_gc_interval_s=g.get_float("UMBP_HIT_INDEX_GC_INTERVAL_SEC"),
            hit_query_max_batch=g.get_int("UMBP_HIT_QUERY_MAX_BATCH"),
            put_algo=g.get_str("UMBP_ROUTE_PUT_SELECT_ALGO"),
            put_affinity=g.get_str("UMBP_ROUTE_PUT_NODE_AFFINITY"),
        )

    def validate(self) -> None:
        if not 0 < self.low_watermark < self.high_watermark <= 1:
            raise ConfigError(
                f"watermarks low={self.low_watermark}, high={self.high_watermark} must satisfy 0 < low < high <= 1"
            )
        for name in (
            "reaper_interval_s",
            "eviction_check_interval_s",
            "hit_index_ttl_s",
            "hit_index_gc_interval_s",
            "hit_query_max_batch",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be positive")
        if self.put_algo not in ALGOS:
            raise ConfigError(f"put_algo={self.put_algo!r} is not one of {', '.join(ALGOS)}")
        if self.put_affinity not in AFFINITIES:
            raise ConfigError(f"put_affinity={self.put_affinity!r} is not one of {', '.join(AFFINITIES)}")
        if self.timing.heartbeat_ttl_s <= 0 or self.timing.max_missed < 1:
            raise ConfigError(
                f"heartbeat ttl={self.timing.heartbeat_ttl_s}s and max_missed={self.timing.max_missed} must be positive"
            )


def make_store(config: MasterServerConfig) -> MetadataStore:
    """MORI's ``MakeMasterMetadataStore``: ``inmemory`` or ``redis`` (imported only when asked for)."""
    if config.metadata_backend == "redis":
        from mori.umbp.master.redis_store import RedisMetadataStore

        return RedisMetadataStore(config.redis_uri, config.redis_namespace, config.redis_timeout_ms)
    return InMemoryMetadataStore()


class MasterServer:
    """Serves UMBPMaster on ``listen_address`` and runs the reaper and the eviction loop."""

    def __init__(self, config: MasterServerConfig | None = None) -> None:
        self.config = config if config is not None else MasterServerConfig.from_environment()
        self.config.validate()
        self.metrics = MasterMetrics()
        store = make_store(self.config)
        self.master = Master(store, self.config.timing, self.metrics, self.config.put_algo, self.config.put_affinity)
        self.evictor = Evictor(
            self.master, self.config.high_watermark, self.config.low_watermark, self.config.evictkey_deadline_s
        )
        server_auth = auth.ServerAuth()
        self._server: Any = rpc.server(server_auth)
        self._servicer = MasterServicer(self.master, self.config.hit_query_max_batch)
        rpc.pb_grpc.add_UMBPMasterServicer_to_server(self._servicer, self._server)
        self._port = rpc.bind(self._server, self.config.listen_address)
        # After the bind: a generated secret is filed under the port actually bound.
        try:
            secret = auth.master_secret(self.config.pool_secret, self.address)
        except Exception:
            self._server.stop(0)
            self.evictor.close()
            store.close()
            raise
        server_auth.set_secret(secret)
        handlers = {n: (getattr(rpc.pb, f"{n}Request").FromString, getattr(self._servicer, n)) for n in WIRE_CALLS}
        listen = self.config.listen_address
        self._wire: WireServer | None = wire.serve(secret, handlers, listen, "master", MAX_MASTER_WIRES)
        self._servicer.wire_port = self._wire.port if self._wire is not None else 0
        self.evictor.set_auth(auth.ClientAuth(MASTER_CALLER, lambda: secret))
        self._stop = threading.Event()
        self._loops: list[threading.Thread] = []
        self._metrics_http: Any = None

    def GetBoundPort(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        host = self.config.listen_address.rsplit(":", 1)[0]
        return f"{host}:{self._port}"

    def start(self) -> MasterServer:
        self._server.start()
        if self.config.metrics_port:
            from prometheus_client import start_http_server  # type: ignore[import-not-found]

            self._metrics_http, _ = start_http_server(self.config.metrics_port, registry=self.metrics.registry)
        for name, interval, fn in (
            ("reaper", self.config.reaper_interval_s, self.master.reap),
            ("evictor", self.config.eviction_check_interval_s, self.evictor.run_once),
            ("hit-gc", self.config.hit_index_gc_interval_s, self._gc_hits),
        ):
            thread = threading.Thread(target=self._loop, args=(name, interval, fn), name=f"umbp-{name}", daemon=True)
            thread.start()
            self._loops.append(thread)
        log.info("UMBP master listening on %s (%s store)", self.address, self.config.metadata_backend)
        return self

    def _gc_hits(self) -> None:
        dropped = self.master.external_kv.gc(time.time(), self.config.hit_index_ttl_s)
        if dropped:
            log.info("dropped %d external-KV hit counters idle for %.0fs", dropped, self.config.hit_index_ttl_s)

    def _loop(self, name: str, interval: float, fn: Any) -> None:
        while not self._stop.wait(interval):
            try:
                fn()
                self.metrics.nodes.set(len(self.master.alive_nodes()))
            except Exception:  # a store hiccup must not kill the loop; the next pass retries
                log.exception("master %s pass failed", name)

    def Run(self) -> None:
        self.start()
        self._stop.wait()

    def Shutdown(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stops serving (RPCs in flight get UMBP_GRPC_SHUTDOWN_DEADLINE_SEC) and the loops. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._servicer.streams.stop()
        if self._wire is not None:
            self._wire.stop()
        self._server.stop(settings.get_float("UMBP_GRPC_SHUTDOWN_DEADLINE_SEC")).wait()
        for thread in self._loops:
            thread.join(5)
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
        self.evictor.close()
        self.master.store.close()

    def __enter__(self) -> MasterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mori-umbp-master", description="The UMBP master (control plane).")
    parser.add_argument("listen_address", nargs="?", default=None, help="host:port (default UMBP_MASTER_LISTEN)")
    parser.add_argument("metrics_port", nargs="?", type=int, default=None, help="Prometheus port, 0 = off")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=settings.get_str("MORI_UMBP_LOG_LEVEL"), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    config = MasterServerConfig.from_environment()
    if args.listen_address:
        config.listen_address = args.listen_address
    if args.metrics_port is not None:
        config.metrics_port = args.metrics_port
    server = MasterServer(config)
    t = config.timing
    sys.stdout.write(
        f"[Master] Resolved timing: heartbeat_ttl={t.heartbeat_ttl_s}s interval={t.heartbeat_interval_s}s "
        f"max_missed={t.max_missed} lease={t.lease_s}s reaper={config.reaper_interval_s}s "
        f"eviction_check={config.eviction_check_interval_s}s store={config.metadata_backend} "
        f"put={config.put_algo}/{config.put_affinity}\n"
    )
    sys.stdout.write(f"[Master] listening on {server.address}\n")
    sys.stdout.flush()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    done.wait()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

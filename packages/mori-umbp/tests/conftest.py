# SPDX-License-Identifier: MIT
"""Shared fixtures of the mori-umbp suite: short deadlines, a master and peers on loopback.

Peers that must live in other processes run ``peer_programs.serve_peer`` (module level, so
multiprocessing's spawn can import it) under mori.testing.PeerProcess; the master runs as the real
``mori-umbp-master`` script. Markers, timeouts and ``free_port`` come from mori.testing.pytest_plugin.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mori import testing

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # spawned children inherit sys.path

# A broken test must fail in seconds, not after production deadlines. Children inherit these.
for name, value in {
    "UMBP_HEARTBEAT_TTL_SEC": "1",  # heartbeat every 0.5 s, reaped after 3 s of silence
    "UMBP_REAPER_INTERVAL_SEC": "0.5",
    "UMBP_RPC_TIMEOUT_MS": "2000",
    "UMBP_TRANSFER_TIMEOUT_MS": "3000",
    "UMBP_PENDING_SLOT_TTL_MS": "1500",
    "UMBP_EVICTION_CHECK_INTERVAL_SEC": "3600",  # tests drive eviction passes themselves
    "MORI_IO_CP_TIMEOUT_MS": "2000",
}.items():
    os.environ.setdefault(name, value)

KiB = 1 << 10
PAGE = 64 * KiB

free_port = testing.find_free_port  # the tests' name for it


def pytest_mori_default_timeout(config: pytest.Config) -> float:
    return 60


_MAIN = "import sys; from mori.umbp.master.server import main; sys.exit(main())"


class MasterProcess:
    """The real ``mori-umbp-master`` console script in a subprocess."""

    def __init__(self, port: int, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.address = f"127.0.0.1:{port}"
        # The installed console script when there is one (the wheel under test), else its function.
        script = shutil.which("mori-umbp-master")
        command = [script] if script else [sys.executable, "-c", _MAIN]
        self.proc = subprocess.Popen(
            [*command, self.address, "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + 30
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if "listening on" in line:
                return
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"master did not start on {self.address}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class PeerProcess(testing.PeerProcess):
    """A pool node in a spawned process (``peer_programs.serve_peer``), driven over a pipe."""

    def __init__(self, master: str, node_id: str, capacity: int, **options: object) -> None:
        import peer_programs

        super().__init__(peer_programs.serve_peer, master, node_id, capacity, name=node_id, **options)
        self.node_id = node_id
        _, self.address = self.recv(60, what="its start")

    def ask(self, *cmd: object, timeout: float = 20) -> object:
        return super().ask(*cmd, timeout=timeout)


class StubPool:
    """A DRAM page tier without memory, for a bare PeerStore: what the store and the peer
    service read of a pool (its allocator, and a descriptor that packs to fixed bytes)."""

    tier, page_size, buffer_index = 2, PAGE, 0  # 2: DRAM

    class Desc:
        def pack(self) -> bytes:
            return b"the pool's packed descriptor"

    def __init__(self, pages: int) -> None:
        from mori.umbp.peer.allocator import PageAllocator

        self.capacity = pages * PAGE
        self.alloc = PageAllocator(self.capacity, PAGE)
        self.desc = self.Desc()


class Aborted(Exception):
    """What StubContext.abort raises: the status a handler ended the call with."""

    def __init__(self, code, details) -> None:
        super().__init__(details)
        self.code = code


class StubContext:
    """A handler's gRPC context, for calling a PeerServicer directly."""

    def time_remaining(self) -> float:
        return 5.0

    def abort(self, code, details):
        raise Aborted(code, details)


def bare_peer(pages: int):
    """(store, servicer) of a peer with ``pages`` stub DRAM pages and no master: a commit is
    published at once."""
    from mori.umbp.peer.service import PeerServicer
    from mori.umbp.peer.store import PeerStore

    store = PeerStore([StubPool(pages)], 60.0, 0.0, 64, "lru", 16, 0.9)

    def publish(keys, conditional):
        store.publish(keys)
        return True

    return store, PeerServicer(store, b"engine", publish, lambda: None, 4)


def random_blocks(n: int, seed: int, size: int = PAGE) -> list[np.ndarray]:
    """n blocks of size random bytes, from one seeded generator (the same blocks for the same seed)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]


def ssd_read(tier, key: str, size: int) -> bytes | None:
    """What an SsdTier holds for key (size bytes), or None when it does not hold it."""
    out = np.zeros(size, np.uint8)
    return out.tobytes() if tier.read_into(key, out.ctypes.data, size) else None


def stop_cluster(master: MasterProcess, peers: Sequence[PeerProcess], client=None) -> None:
    """Closes the client, kills the peers, then the master."""
    if client is not None:
        client.close()
    for peer in peers:
        peer.kill()
    master.kill()


@contextlib.contextmanager
def running_cluster(reader: str, *peers: dict[str, Any]) -> Iterator[tuple[MasterProcess, list[PeerProcess], Any]]:
    """The real master script, one PeerProcess per entry of ``peers`` (PeerProcess's keyword
    arguments but the master's address) and a client named ``reader`` with no DRAM of its own;
    all stopped on exit, whatever failed."""
    master = MasterProcess(free_port())
    started: list[PeerProcess] = []
    client = None
    try:
        for options in peers:
            started.append(PeerProcess(master.address, **options))
        client = make_client(master.address, reader, 0)
        yield master, started, client
    finally:
        stop_cluster(master, started, client)


#: The exit status of a peer started with ``die_in_commit`` once it died in its commit (peer_programs).
DIED_IN_COMMIT = 17


@contextlib.contextmanager
def cluster_with_a_dying_owner(
    when: str, capacity: int, *live: dict[str, Any]
) -> Iterator[tuple[MasterProcess, PeerProcess, list[PeerProcess], Any]]:
    """``running_cluster("writer", ...)`` whose first peer, "doomed", holds ``capacity`` bytes (the
    most of all for the writer's puts to go to it) and dies in its commit RPC, ``when`` "before" or
    "after" committing; then one peer per entry of ``live``. Yields (master, doomed, live peers, writer)."""
    doomed = {"node_id": "doomed", "capacity": capacity, "die_in_commit": when}
    with running_cluster("writer", doomed, *live) as (master, (doomed_peer, *live_peers), writer):
        yield master, doomed_peer, live_peers, writer


def assert_died_in_commit(peer: PeerProcess) -> None:
    peer.proc.join(10)
    assert peer.proc.exitcode == DIED_IN_COMMIT, f"{peer.node_id} exited {peer.proc.exitcode}, not in its commit"


def assert_reads_back(client, keys: Sequence[str], blocks: Sequence[np.ndarray]) -> None:
    """Every key reads back through ``client`` with exactly its block's bytes."""
    for key, block in zip(keys, blocks, strict=True):
        back = np.zeros_like(block)
        assert client.get_into_ptr(key, back.ctypes.data, back.nbytes), key
        assert np.array_equal(back, block), key


def signed_peer_stub(peer_address: str, node_id: str, secret: bytes) -> tuple[Any, Any]:
    """(channel, UMBPPeerStub) of a caller that signs its calls to the peer at ``peer_address`` as
    ``node_id`` with ``secret``, bypassing the client's own checks; close the channel when done."""
    from mori.umbp import auth, rpc

    ch = rpc.channel(peer_address, auth.ClientAuth(node_id, lambda: secret))
    return ch, rpc.peer_grpc.UMBPPeerStub(ch)


def member_peer_stub(master_address: str, peer_address: str, node_id: str) -> tuple[Any, Any]:
    """``signed_peer_stub`` with the pool secret of the master at ``master_address``: a member."""
    from mori.umbp import auth

    secret = auth.member_secret(None, master_address)
    assert secret is not None
    return signed_peer_stub(peer_address, node_id, secret)


def count_peer_rpcs(monkeypatch: pytest.MonkeyPatch, names: Sequence[str]) -> collections.Counter[str]:
    """Counts the peer RPCs named in ``names`` that this process serves, per method name, for the
    rest of the test (PeerServicer's methods wrapped through monkeypatch)."""
    from mori.umbp.peer.service import PeerServicer

    calls: collections.Counter[str] = collections.Counter()
    for name in names:
        method = getattr(PeerServicer, name)

        def counting(self, req, ctx, _method=method, _name=name):
            calls[_name] += 1
            return _method(self, req, ctx)

        monkeypatch.setattr(PeerServicer, name, counting)
    return calls


def wait_for(predicate, timeout: float = 10.0, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def master_config(**overrides):
    """The master's config from the test environment (short heartbeats), on a free loopback port."""
    from mori.umbp import MasterServerConfig

    config = MasterServerConfig.from_environment()
    config.listen_address = "127.0.0.1:0"
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


def make_client(master_address: str, node_id: str, capacity: int = 0, ssd=None, policy: str = "lru", hbm=None):
    """A pool node with ``capacity`` bytes of DRAM in PAGE pages; ``ssd`` (a UMBPSsdConfig) adds an
    SSD tier whose staging buffer has 4 slots of one PAGE each; ``hbm`` (a UMBPHbmConfig) an HBM tier."""
    from mori.umbp import UMBPClient, UMBPConfig, UMBPEvictionConfig, UMBPHbmConfig, UMBPSsdConfig
    from mori.umbp.client.config import UMBPDistributedConfig, UMBPDramConfig, UMBPMasterClientConfig

    mc = UMBPMasterClientConfig(master_address, node_id, "127.0.0.1")
    dist = UMBPDistributedConfig(mc, staging_buffer_size=4 << 20, ssd_staging_buffer_size=4 * PAGE)
    dist.ssd_staging_buffer_slots = 4
    return UMBPClient(
        UMBPConfig(
            UMBPDramConfig(capacity, PAGE),
            dist,
            ssd or UMBPSsdConfig(),
            UMBPEvictionConfig(policy),
            hbm or UMBPHbmConfig(),
        )
    )


@contextlib.contextmanager
def owner_and_writer(
    owner: str, capacity: int, writer: str, *, policy: str = "lru", **master_overrides: Any
) -> Iterator[tuple[Any, Any, Any]]:
    """The in-process pool most tests need: a master (``master_config(**master_overrides)``), a node
    ``owner`` holding ``capacity`` bytes of DRAM (eviction ``policy``) and a client ``writer`` with
    none, whose puts therefore land on ``owner``. Yields (master, owner, writer); all closed on exit."""
    from mori.umbp import MasterServer

    with (
        MasterServer(master_config(**master_overrides)) as master,
        make_client(master.address, owner, capacity, policy=policy) as owner_node,
        make_client(master.address, writer) as writer_client,
    ):
        yield master, owner_node, writer_client

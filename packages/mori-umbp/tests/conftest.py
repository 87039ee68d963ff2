# SPDX-License-Identifier: MIT
"""Shared fixtures of the mori-umbp suite: short deadlines, a master and peers on loopback.

Peers that must live in other processes run ``peer_programs.serve_peer`` (module level, so
multiprocessing's spawn can import it); the master runs as the real ``mori-umbp-master`` script.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

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

DEFAULT_TEST_TIMEOUT_S = 60
KiB = 1 << 10
PAGE = 64 * KiB


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few tens of seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU and torch (skips with the reason elsewhere)")
    if not config.pluginmanager.hasplugin("timeout"):  # the GPU machine has no pytest-timeout
        config.addinivalue_line("markers", "timeout(seconds): deadline of a test under pytest-timeout")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


class PeerProcess:
    """A pool node in a spawned process (``peer_programs.serve_peer``), driven over a pipe."""

    def __init__(self, master: str, node_id: str, capacity: int, **options: object) -> None:
        import multiprocessing as mp

        import peer_programs

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.node_id = node_id
        self.proc = ctx.Process(
            target=peer_programs.serve_peer, args=(child, master, node_id, capacity), kwargs=options, daemon=True
        )
        self.proc.start()
        assert self.conn.poll(60), f"peer {node_id} did not start"
        _, self.address = self.conn.recv()

    def ask(self, *cmd: object, timeout: float = 20) -> object:
        self.conn.send(cmd)
        assert self.conn.poll(timeout), f"peer {self.node_id} did not answer {cmd[0]}"
        return self.conn.recv()

    def kill(self) -> None:
        import signal

        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(10)


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

# SPDX-License-Identifier: MIT
"""The Mooncake Store side of ``mori-umbp-bench``, run inside the network namespace that
``mooncake.MooncakeStorePool`` makes (``python -m mori.umbp.bench.mooncake_side``).

Mooncake's transfer engine, given a metadata server, binds to a LAN address and refuses the
loopback interface; MC_TCP_BIND_ADDRESS names one. Inside a fresh namespace this process brings
``lo`` up and gives Mooncake 127.0.0.2 (on ``lo``, whose 127.0.0.0/8 route makes every 127/8
address local), so nothing leaves the namespace and its fixed ports (the master's RPC, HTTP
metadata and metrics ports) meet no one else's.

It starts ``mooncake_master`` and ``--peers`` storage nodes (a process each, each mounting
``--peer-capacity`` bytes of DRAM), then joins as a client that mounts none, so every block
crosses Mooncake's TCP transport between processes, as every mori-umbp block crosses mori-io.
Then it serves the bench's requests on the inherited socket (``--fd``): the same ``ops.run_case``
and ``runner.replay`` code the mori-umbp side runs, through ``MooncakeClient``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib
import importlib.util
import logging
import os
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: The address Mooncake binds to inside the namespace.
ADDRESS = "127.0.0.2"
MASTER_PORT = 50051
METADATA_PORT = 8080
#: Seconds for the master's ports to open and a storage node to mount its segment.
START_TIMEOUT_S = 60.0

log = logging.getLogger(__name__)


def bring_loopback_up() -> None:
    """``ip link set lo up`` by ioctl (a new network namespace starts with lo down)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(s, siocgifflags, req))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sh14x", b"lo", flags | iff_up))


def _store() -> Any:
    # Optional and untyped: looked up at run time so the package needs no stubs for it.
    return importlib.import_module("mooncake.store").MooncakeDistributedStore()


def _setup(store: Any, segment: int, local_buffer: int) -> None:
    rc = store.setup(ADDRESS, f"http://{ADDRESS}:{METADATA_PORT}/metadata", segment, local_buffer, "tcp", "",
                     f"{ADDRESS}:{MASTER_PORT}")  # fmt: skip
    if rc != 0:
        raise RuntimeError(f"MooncakeDistributedStore.setup(segment={segment}) returned {rc}")


def _master_binary() -> str:
    spec = importlib.util.find_spec("mooncake")
    here = Path(spec.origin).parent if spec and spec.origin else None
    for cand in (here / "mooncake_master" if here else None, Path(sys.executable).parent / "mooncake_master"):
        if cand is not None and cand.is_file():
            return str(cand)
    raise RuntimeError("mooncake_master is not installed beside the mooncake package")


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before opening port {port}")
        with contextlib.suppress(OSError), socket.create_connection((ADDRESS, port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not open port {port} within {START_TIMEOUT_S:.0f}s")


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class MooncakeClient:
    """A Mooncake Store client with the ``UMBPClient`` methods the bench's workloads call."""

    def __init__(self, local_buffer: int) -> None:
        self.store = _store()
        _setup(self.store, 0, local_buffer)

    def register_memory(self, ptr: int, size: int) -> None:
        if (rc := self.store.register_buffer(ptr, size)) != 0:
            raise RuntimeError(f"Mooncake register_buffer({size} bytes) returned {rc}")

    def deregister_memory(self, ptr: int) -> None:
        self.store.unregister_buffer(ptr)

    def put_from_ptr(self, key: str, ptr: int, size: int) -> bool:
        return bool(self.store.put_from(key, ptr, size) == 0)

    def get_into_ptr(self, key: str, ptr: int, size: int) -> bool:
        return bool(self.store.get_into(key, ptr, size) == size)

    def batch_put_from_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        return [rc == 0 for rc in self.store.batch_put_from(list(keys), list(ptrs), list(sizes))]

    def batch_put_from_ptr_with_depth(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int]
    ) -> list[bool]:
        # Mooncake's eviction knows no chain depth: the depths have nothing to go to.
        return self.batch_put_from_ptr(keys, ptrs, sizes)

    def batch_get_into_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        got = self.store.batch_get_into(list(keys), list(ptrs), list(sizes))
        return [rc == n for rc, n in zip(got, sizes, strict=True)]

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        return [found == 1 for found in self.store.batch_is_exist(list(keys))]

    def batch_exists_consecutive(self, keys: Sequence[str]) -> int:
        n = 0
        for found in self.store.batch_is_exist(list(keys)):
            if found != 1:
                break
            n += 1
        return n

    def close(self) -> None:
        self.store.close()


class _Pool:
    """The master and storage nodes' processes; ``cpu_s`` sums theirs (ops.run_case's pool)."""

    def __init__(self, peers: int, capacity: int, high_watermark: float, lease_ms: int, log_dir: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.master_flags = [
            f"--rpc_address={ADDRESS}", f"--rpc_port={MASTER_PORT}", "--enable_http_metadata_server=true",
            f"--http_metadata_server_host={ADDRESS}", f"--http_metadata_server_port={METADATA_PORT}",
            f"--eviction_high_watermark_ratio={high_watermark}", f"--default_kv_lease_ttl={lease_ms}",
        ]  # fmt: skip
        try:
            master = self._start([_master_binary(), *self.master_flags], log_dir / "mooncake-master.log", False)
            _wait_port(MASTER_PORT, master, "mooncake_master")
            _wait_port(METADATA_PORT, master, "mooncake_master's metadata server")
            nodes = [
                self._start(
                    [sys.executable, "-m", "mori.umbp.bench.mooncake_side", "--node", str(capacity)],
                    log_dir / f"mooncake-node-{i}.log",
                )
                for i in range(peers)
            ]
            for i, node in enumerate(nodes):
                self._wait_ready(node, f"storage node {i}")
        except BaseException:
            self.close()
            raise

    def _start(self, argv: list[str], logfile: Path, answers: bool = True) -> subprocess.Popen[bytes]:
        """A child whose stderr (and, unless it ``answers`` on stdout, stdout) goes to ``logfile``."""
        with open(logfile, "wb") as out:
            stdout = subprocess.PIPE if answers else out
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=stdout, stderr=out)
        self.procs.append(proc)
        return proc

    @staticmethod
    def _wait_ready(proc: subprocess.Popen[bytes], what: str) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                line = proc.stdout.readline()
                if line.strip() == b"ready":
                    return
                proc.wait(10)
                raise RuntimeError(
                    f"{what} failed to start ({proc.returncode}): {line.decode(errors='replace').strip()!r}"
                )
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}")
        raise RuntimeError(f"{what} did not mount its segment within {START_TIMEOUT_S:.0f}s")

    def cpu_s(self) -> float:
        total = 0.0
        for proc in self.procs:
            with contextlib.suppress(OSError):
                total += _cpu_s(proc.pid)
        return total

    def close(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()  # a node unmounts and exits when its stdin closes
            if proc is self.procs[0]:
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()


def _node(capacity: int) -> int:
    """A storage node: mounts ``capacity`` bytes, says ready, serves until stdin closes."""
    store = _store()
    try:
        _setup(store, capacity, 16 << 20)
    except RuntimeError as exc:
        sys.stdout.write(f"{exc}\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # nobody reads stdout past "ready": what Mooncake prints there goes to the log
    sys.stdin.buffer.read()
    store.close()
    return 0


def _serve(conn: Connection, args: argparse.Namespace) -> None:
    from mori.umbp.bench import ops, runner

    log_dir = Path(args.log_dir)
    try:
        try:
            importlib.import_module("mooncake.store")
        except ImportError as exc:  # e.g. libibverbs.so.1, which Mooncake's wheel links but does not ship
            raise ImportError(f"{exc} (Mooncake's store needs libibverbs1: apt-get install libibverbs1)") from exc
        bring_loopback_up()
        os.environ["MC_TCP_BIND_ADDRESS"] = ADDRESS
        pool = _Pool(args.peers, args.peer_capacity, args.high_watermark, args.lease_ms, log_dir)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    client: MooncakeClient | None = None
    try:
        client = MooncakeClient(args.local_buffer)
        conn.send(("ready", {"master_flags": pool.master_flags, "address": ADDRESS}))
        while True:
            try:
                cmd, kw = conn.recv()
            except EOFError:
                return
            if cmd == "stop":
                conn.send(("ok", None))
                return
            try:
                if cmd == "ops":
                    put, get = ops.run_case(client, pool, **kw)
                    conn.send(("ok", (ops.summary(put), ops.summary(get))))
                elif cmd == "trace":
                    res = runner.replay(client, kw["requests"], kw["block_bytes"], prepared=kw.get("prepared", False))
                    conn.send(("ok", res))
                else:
                    conn.send(("error", f"unknown command {cmd!r}"))
            except Exception as exc:  # a failed case is reported to the bench, which says so
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        if client is not None:
            client.close()
        pool.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mori.umbp.bench.mooncake_side")
    p.add_argument("--node", type=int, help="run a storage node of this many bytes (internal)")
    p.add_argument("--fd", type=int, help="the bench's socket")
    p.add_argument("--peers", type=int, default=2)
    p.add_argument("--peer-capacity", type=int, default=256 << 20)
    p.add_argument("--high-watermark", type=float, default=0.9)
    p.add_argument("--lease-ms", type=int, default=500)
    p.add_argument("--local-buffer", type=int, default=16 << 20)
    p.add_argument("--log-dir", default=".")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.node is not None:
        return _node(args.node)
    if args.fd is None:
        p.error("--fd is required")
    conn = Connection(args.fd)
    try:
        _serve(conn, args)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

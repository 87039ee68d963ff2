# SPDX-License-Identifier: MIT
"""GPU memory through mori.io, checked byte for byte against numpy: the TCP backend's pinned
staging (GPU->GPU, GPU->host, host->GPU) and the P2P backend (BackendType.XGMI, in one process
through the pointer and across processes through CUDA IPC), random offsets and sizes, batches of
many small descriptors, and P2P's failover to TCP. Skips with the reason without a GPU; on the
GPU machine two processes share the one GPU under MPS (docs/developer-guide/gpu.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import mori.io as mio
from mori.io import BackendType, EngineDesc, IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType, StatusCode
from mori.io._native import _C
from mori.testing import PeerProcess

WHY_NOT = _C.gpu_unavailable_reason()
torch = pytest.importorskip("torch") if not WHY_NOT else None
if torch is not None and not torch.cuda.is_available():
    WHY_NOT = "torch sees no CUDA device"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(WHY_NOT), reason=f"needs a GPU: {WHY_NOT}")]

SIZE = 12 << 20  # past the 4 MiB TCP chunk, so transfers span frames and staging pieces
WAIT_MS = 30000


class Memory:
    """A host (numpy) or GPU (torch) buffer with random content, registered with an engine."""

    def __init__(self, engine: IOEngine, kind: str, size: int, seed: int) -> None:
        data = np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)
        self.kind = kind
        self.tensor = torch.from_numpy(data)
        if kind == "gpu":
            self.tensor = self.tensor.to("cuda:0")
            torch.cuda.synchronize()
        self.desc = engine.register_torch_tensor(self.tensor)

    def bytes(self) -> np.ndarray:
        torch.cuda.synchronize()
        return self.tensor.cpu().numpy().copy()


def make_engine(key: str, backends: str) -> IOEngine:
    engine = IOEngine(key, IOEngineConfig())
    if "tcp" in backends:
        engine.create_backend(BackendType.TCP, mio.TcpBackendConfig(num_data_conns=4))
    if "p2p" in backends:
        engine.create_backend(BackendType.XGMI)
    return engine


@pytest.fixture
def engines(request: pytest.FixtureRequest) -> Iterator[tuple[IOEngine, IOEngine]]:
    backends = getattr(request, "param", "tcp")
    a, b = make_engine("gpu-a", backends), make_engine("gpu-b", backends)
    a.register_remote_engine(b.get_engine_desc())
    b.register_remote_engine(a.get_engine_desc())
    yield a, b
    a.shutdown()
    b.shutdown()


def random_transfers(rng: np.random.Generator, count: int, size: int) -> list[tuple[int, int, int]]:
    """(local offset, remote offset, size) triples: odd sizes and offsets, some past one chunk."""
    out = []
    for i in range(count):
        n = int(rng.integers(1, 9 << 20)) if i % 3 == 0 else int(rng.integers(1, 70000))
        out.append((int(rng.integers(0, size - n)), int(rng.integers(0, size - n)), n))
    return out


def check_status(status: mio.TransferStatus) -> None:
    assert status.WaitFor(WAIT_MS) == StatusCode.SUCCESS, status.Message()


# -- one process ----------------------------------------------------------------------------------


def test_bad_device_id_names_the_value_and_the_count():
    count = _C.gpu_device_count()
    with IOEngine("dev", IOEngineConfig()) as e:
        t = torch.zeros(64, dtype=torch.uint8, device="cuda:0")
        with pytest.raises(mio.InvalidArgumentError, match=rf"device_id={count} is not a GPU: {count} device"):
            e.register_memory(t.data_ptr(), 64, count, MemoryLocationType.GPU)
        host = np.zeros(64, np.uint8)
        with pytest.raises(mio.InvalidArgumentError, match="not GPU device memory"):
            e.register_memory(host.ctypes.data, 64, 0, MemoryLocationType.GPU)


def test_gpu_memory_desc_carries_ipc_handle_offset_and_bus_id():
    with IOEngine("desc", IOEngineConfig()) as e:
        t = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda:0")
        whole = e.register_torch_tensor(t)
        part = e.register_torch_tensor(t[4096:])
        assert whole.loc == MemoryLocationType.GPU and whole.device_id == 0
        assert len(whole.ipc_handle) == 64 and whole.device_bus_id.count(":") == 2
        assert part.ipc_offset == whole.ipc_offset + 4096 and part.ipc_handle == whole.ipc_handle
        assert MemoryDesc.unpack(part.pack()) == part


@pytest.mark.parametrize("engines", ["tcp", "p2p", "tcp+p2p"], indirect=True)
@pytest.mark.parametrize("op", ["write", "read"])
@pytest.mark.parametrize("kinds", [("gpu", "gpu"), ("gpu", "cpu"), ("cpu", "gpu")], ids=lambda k: "->".join(k))
def test_random_transfers_in_one_process(engines, op, kinds, request):
    a, b = engines
    backends = request.node.callspec.params["engines"]
    if backends == "p2p" and kinds != ("gpu", "gpu"):
        pytest.skip("the P2P backend alone moves GPU memory only")
    local, remote = Memory(a, kinds[0], SIZE, 1), Memory(b, kinds[1], SIZE, 2)
    want_local, want_remote = local.bytes(), remote.bytes()
    rng = np.random.default_rng(3)
    for lo, ro, n in random_transfers(rng, 12, SIZE):
        uid = a.allocate_transfer_uid()
        if op == "write":
            check_status(a.write(local.desc, lo, remote.desc, ro, n, uid))
            want_remote[ro : ro + n] = want_local[lo : lo + n]
        else:
            check_status(a.read(local.desc, lo, remote.desc, ro, n, uid))
            want_local[lo : lo + n] = want_remote[ro : ro + n]
        # TCP records an inbound status at the target, P2P (as MORI's XGMI) does not: this tells
        # which backend moved the bytes.
        inbound = b.pop_inbound_transfer_status("gpu-a", uid)
        went_p2p = "p2p" in backends and kinds == ("gpu", "gpu")
        assert (inbound is None) == went_p2p
    np.testing.assert_array_equal(remote.bytes(), want_remote)
    np.testing.assert_array_equal(local.bytes(), want_local)


@pytest.mark.parametrize("engines", ["tcp", "p2p"], indirect=True)
@pytest.mark.parametrize("kinds", [("gpu", "gpu"), ("cpu", "gpu")], ids=lambda k: "->".join(k))
def test_batch_of_many_small_descriptors(engines, kinds, request):
    a, b = engines
    if request.node.callspec.params["engines"] == "p2p" and kinds != ("gpu", "gpu"):
        pytest.skip("the P2P backend alone moves GPU memory only")
    n, slot = 4000, 600
    local, remote = Memory(a, kinds[0], n * slot, 4), Memory(b, kinds[1], n * slot, 5)
    want_local, want_remote = local.bytes(), remote.bytes()
    rng = np.random.default_rng(6)
    sizes = rng.integers(1, slot - 88, size=n, dtype=np.int64)
    lo = np.arange(n, dtype=np.int64) * slot + rng.integers(0, 88, size=n)
    ro = rng.permutation(n).astype(np.int64) * slot + rng.integers(0, 88, size=n)
    session = a.create_session(local.desc, remote.desc)
    assert session is not None
    check_status(session.batch_write(lo, ro, sizes, session.allocate_transfer_uid()))
    for i in range(n):
        want_remote[ro[i] : ro[i] + sizes[i]] = want_local[lo[i] : lo[i] + sizes[i]]
    np.testing.assert_array_equal(remote.bytes(), want_remote)
    lo2 = rng.permutation(n).astype(np.int64) * slot + 7
    check_status(session.batch_read(lo2, ro, sizes, session.allocate_transfer_uid()))
    for i in range(n):
        want_local[lo2[i] : lo2[i] + sizes[i]] = want_remote[ro[i] : ro[i] + sizes[i]]
    np.testing.assert_array_equal(local.bytes(), want_local)


def test_out_of_range_gpu_transfer_is_refused_before_sending(engines):
    a, b = engines
    local, remote = Memory(a, "gpu", 4096, 7), Memory(b, "gpu", 4096, 8)
    before = remote.bytes()
    # As on host memory (test_route.py): the status says why, as MORI's does; nothing is sent.
    refused = a.write(local.desc, 0, remote.desc, 4000, 100, a.allocate_transfer_uid())
    assert refused.WaitFor(20000) == StatusCode.ERR_INVALID_ARGS
    assert "exceeds the remote memory's size 4096" in refused.Message()
    np.testing.assert_array_equal(remote.bytes(), before)


# -- two processes --------------------------------------------------------------------------------


class Target(PeerProcess):
    """gpu_programs.target in a spawned process."""

    def __init__(self, size: int, kind: str, p2p: bool, seed: int) -> None:
        from gpu_programs import target

        super().__init__(target, size, kind, p2p, seed, name=f"{kind} target")
        engine_desc, mem_desc = self.recv(120, what="its engine and memory descriptors")
        self.engine_desc, self.desc = EngineDesc.unpack(engine_desc), MemoryDesc.unpack(mem_desc)
        self.initial = np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)

    def ask(self, *cmd: object, timeout: float = 60.0) -> object:
        return super().ask(*cmd, timeout=timeout)

    def bytes(self) -> np.ndarray:
        return np.frombuffer(self.ask("bytes"), dtype=np.uint8).copy()

    def close(self, *exit_command: object, timeout: float = 60.0) -> None:
        super().close(*(exit_command or ("exit",)), timeout=timeout)  # it answers ("exit",), then leaves


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backends", ["tcp", "tcp+p2p"])
@pytest.mark.parametrize("kinds", [("gpu", "gpu"), ("gpu", "cpu"), ("cpu", "gpu")], ids=lambda k: "->".join(k))
def test_random_transfers_between_two_processes(backends, kinds):
    peer = Target(SIZE, kinds[1], "p2p" in backends, seed=11)
    a = make_engine("gpu-a", backends)
    try:
        a.register_remote_engine(peer.engine_desc)
        local = Memory(a, kinds[0], SIZE, 12)
        want_local, want_remote = local.bytes(), peer.initial.copy()
        rng = np.random.default_rng(13)
        for i, (lo, ro, n) in enumerate(random_transfers(rng, 10, SIZE)):
            uid = a.allocate_transfer_uid()
            if i % 2 == 0:
                check_status(a.write(local.desc, lo, peer.desc, ro, n, uid))
                want_remote[ro : ro + n] = want_local[lo : lo + n]
            else:
                check_status(a.read(local.desc, lo, peer.desc, ro, n, uid))
                want_local[lo : lo + n] = want_remote[ro : ro + n]
            went_p2p = "p2p" in backends and kinds == ("gpu", "gpu")
            assert (peer.ask("inbound", "gpu-a", uid) is None) == went_p2p
        np.testing.assert_array_equal(peer.bytes(), want_remote)
        np.testing.assert_array_equal(local.bytes(), want_local)
    finally:
        a.shutdown()
        peer.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("broken", ["ipc_offset", "ipc_handle"])
@pytest.mark.parametrize("backends", ["tcp+p2p", "p2p"])
def test_p2p_failure_falls_back_to_tcp_or_fails(backends, broken):
    """A MemoryDesc P2P cannot use (its region does not fit the exported allocation, or its IPC
    handle does not open): with TCP as well the transfer still lands, over TCP, so the target
    records it; with P2P alone it fails with ERR_GPU_OP and nothing is written."""
    peer = Target(1 << 20, "gpu", True, seed=21)
    a = make_engine("gpu-a", backends)
    try:
        a.register_remote_engine(peer.engine_desc)
        local = Memory(a, "gpu", 1 << 20, 22)
        if broken == "ipc_offset":
            bad = dataclasses.replace(peer.desc, ipc_offset=1 << 40)
        else:
            bad = dataclasses.replace(peer.desc, ipc_handle=bytes(64))
        uid = a.allocate_transfer_uid()
        status = a.write(local.desc, 0, bad, 0, 1 << 20, uid)
        if backends == "p2p":
            assert status.WaitFor(WAIT_MS) == StatusCode.ERR_GPU_OP
            assert "P2P" in status.Message()
            np.testing.assert_array_equal(peer.bytes(), peer.initial)
        else:
            check_status(status)
            assert peer.ask("inbound", "gpu-a", uid) == int(StatusCode.SUCCESS)
            np.testing.assert_array_equal(peer.bytes(), local.bytes())
    finally:
        a.shutdown()
        peer.close()


@dataclasses.dataclass
class P2PPair:
    """An initiator engine with the given P2P config, its GPU memory, and the remote GPU memory of
    a second engine in this process or in a spawned one."""

    engine: IOEngine
    local: Memory
    remote_desc: MemoryDesc
    remote_bytes: Callable[[], np.ndarray]


@contextlib.contextmanager
def p2p_pair(config: mio.XgmiBackendConfig, size: int, where: str, seed: int) -> Iterator[P2PPair]:
    a = IOEngine("gpu-a", IOEngineConfig())
    a.create_backend(BackendType.XGMI, config)
    peer = Target(size, "gpu", True, seed=seed) if where == "two-processes" else None
    b = None
    try:
        if peer is not None:
            a.register_remote_engine(peer.engine_desc)
            remote_desc, remote_bytes = peer.desc, peer.bytes
        else:
            b = make_engine("gpu-b", "p2p")
            a.register_remote_engine(b.get_engine_desc())
            remote = Memory(b, "gpu", size, seed + 1)
            remote_desc, remote_bytes = remote.desc, remote.bytes
        yield P2PPair(a, Memory(a, "gpu", size, seed + 2), remote_desc, remote_bytes)
    finally:
        a.shutdown()
        if b is not None:
            b.shutdown()
        if peer is not None:
            peer.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("threshold", [0, 1], ids=["copy-engine", "kernel"])
@pytest.mark.parametrize("where", ["one-process", "two-processes"])
def test_p2p_batch_kernel_and_copy_engine_agree(threshold, where):
    """The P2P backend's two ways of copying a batch (one cuMemcpyAsync per run, or one kernel
    launch over a descriptor table: threshold 1 forces it, 0 forbids it): runs of every alignment
    (16-byte, 8-byte, odd), runs longer than the kernel's 256 KiB piece, both directions."""
    size = 64 << 20
    config = mio.XgmiBackendConfig(scatter_gather_threshold=threshold)
    with p2p_pair(config, size, where, seed=31) as pair:
        local, remote_bytes = pair.local, pair.remote_bytes
        want_local, want_remote = local.bytes(), remote_bytes()
        rng = np.random.default_rng(34)
        slot = size // 80  # room for the longest run plus its offset; one run per slot, so none overlap
        sizes = [int(s) for s in rng.integers(1, 4096, size=60)] + [300 << 10, 700 << 10, 16, 24, 4096]
        align = [16, 8, 1]
        lo = [i * slot + align[i % 3] * int(rng.integers(0, 64)) for i in range(len(sizes))]
        ro = [int(j) * slot + align[(i + 1) % 3] * int(rng.integers(0, 64))
              for i, j in enumerate(rng.permutation(len(sizes)))]  # fmt: skip
        session = pair.engine.create_session(local.desc, pair.remote_desc)
        assert session is not None
        check_status(session.batch_write(lo, ro, sizes, session.allocate_transfer_uid()))
        for i, n in enumerate(sizes):
            want_remote[ro[i] : ro[i] + n] = want_local[lo[i] : lo[i] + n]
        np.testing.assert_array_equal(remote_bytes(), want_remote)
        lo2 = [int(j) * slot + 8 * (i % 5) for i, j in enumerate(rng.permutation(len(sizes)))]
        check_status(session.batch_read(lo2, ro, sizes, session.allocate_transfer_uid()))
        for i, n in enumerate(sizes):
            want_local[lo2[i] : lo2[i] + n] = want_remote[ro[i] : ro[i] + n]
        np.testing.assert_array_equal(local.bytes(), want_local)


P2P_MODES = {
    "run-kernel": {},
    "memcpy": {"run_kernel": False},
    "resident": {"resident_blocks": 8, "resident_idle_us": 50},
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", list(P2P_MODES))
@pytest.mark.parametrize("where", ["one-process", "two-processes"])
def test_p2p_single_runs_in_flight_together(mode, where):
    """One-run transfers, the P2P backend's common case: by a launch of the run kernel (completion
    written to host memory), by cuMemcpyAsync and an event, or by the resident copier (no launch;
    it leaves after 50 us idle and is launched again by the next transfer). Sizes around the
    kernels' 32 KiB piece and past the run kernel's grid (64 MiB + 5), every alignment, both
    directions, and more transfers in flight than num_events=2 completion slots or ring entries,
    so the ones beyond them take the next way down."""
    size = 80 << 20
    config = mio.XgmiBackendConfig(num_events=2, **P2P_MODES[mode])
    with p2p_pair(config, size, where, seed=41) as pair:
        local, remote_bytes = pair.local, pair.remote_bytes
        session = pair.engine.create_session(local.desc, pair.remote_desc)
        assert session is not None
        want_local, want_remote = local.bytes(), remote_bytes()
        big = (64 << 20) + 5
        writes = [(8, 16, big), (big + 64, big + 64, 32 << 10), (big + (1 << 20), big + (2 << 20), (32 << 10) + 1)]
        writes += [(big + (4 << 20) + i * 70000, big + (8 << 20) + i * 70000 + i % 3, 1 + i * 4099) for i in range(6)]
        statuses = [session.write(lo, ro, n, session.allocate_transfer_uid()) for lo, ro, n in writes]
        for status in statuses:
            check_status(status)
        for lo, ro, n in writes:
            want_remote[ro : ro + n] = want_local[lo : lo + n]
        np.testing.assert_array_equal(remote_bytes(), want_remote)
        time.sleep(0.01)  # the resident copier leaves: the reads launch it again
        reads = [(lo + 3, ro, n) for lo, ro, n in writes[1:]]
        for status in [session.read(lo, ro, n, session.allocate_transfer_uid()) for lo, ro, n in reads]:
            check_status(status)
        for lo, ro, n in reads:
            want_local[lo : lo + n] = want_remote[ro : ro + n]
        np.testing.assert_array_equal(local.bytes(), want_local)


def test_resident_blocks_beyond_the_sm_count_are_refused():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    too_many = mio.XgmiBackendConfig(resident_blocks=sms + 1)
    with IOEngine("r", IOEngineConfig()) as e:
        with pytest.raises(
            mio.InvalidArgumentError, match=rf"resident_blocks={sms + 1} exceeds the {sms} SMs of GPU 0"
        ):
            e.create_backend(BackendType.XGMI, too_many)
        assert "XGMI" not in repr(e)

# SPDX-License-Identifier: MIT
"""The RDMA backend (UCX) with two engines in one process: every transfer is checked byte for byte
against a numpy model of the target, with UCX's own transport choice and with UCX_TLS=tcp.

On a machine without RDMA hardware UCX moves these bytes over its tcp transport (and shared memory
where its error handling allows); the engine code paths are the same as over verbs.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import multi_pair_batch_round_trip, random_bytes, register, run_threads
from hypothesis import given, settings
from hypothesis import strategies as st
from rdma_programs import rdma_engine, ucx_unavailable

from mori.io import (
    BackendType,
    ConfigError,
    InvalidArgumentError,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    NotFoundError,
    PollCqMode,
    RdmaBackendConfig,
    StatusCode,
)

MiB = 1 << 20

pytestmark = pytest.mark.timeout(60)


_WHY = ucx_unavailable()
if _WHY:
    pytest.skip(f"UCX cannot be loaded here: {_WHY}", allow_module_level=True)


def connect(a: IOEngine, b: IOEngine) -> None:
    a.register_remote_engine(b.get_engine_desc())
    b.register_remote_engine(a.get_engine_desc())


@pytest.fixture
def rdma_pair(ucx_tls):
    """An initiator and a target that have the RDMA backend only: nothing can go over TCP."""
    a, b = rdma_engine("initiator"), rdma_engine("target")
    connect(a, b)
    yield a, b
    a.shutdown()
    b.shutdown()


def wait_ok(status, timeout_ms: int = 20000) -> None:
    assert status.WaitFor(timeout_ms) == StatusCode.SUCCESS, status.Message()
    assert status.Succeeded() and not status.Failed()


def test_write_read_round_trip_and_inbound_status(rdma_pair):
    a, b = rdma_pair
    src, dst, back = random_bytes(MiB, 1), np.zeros(MiB + 64, np.uint8), np.zeros(MiB, np.uint8)
    m_src, m_dst, m_back = register(a, src), register(b, dst), register(a, back)
    remote = MemoryDesc.unpack(m_dst.pack())  # as a peer would get it
    assert b.pop_inbound_transfer_status("initiator", 11) is None
    wait_ok(a.write(m_src, 0, remote, 32, MiB, 11))
    np.testing.assert_array_equal(dst[32 : 32 + MiB], src)
    assert not dst[:32].any() and not dst[32 + MiB :].any()
    # The target recorded the write before the initiator's status turned final.
    assert b.pop_inbound_transfer_status("initiator", 11).Succeeded()
    assert b.pop_inbound_transfer_status("initiator", 11) is None
    wait_ok(a.read(m_back, 10, remote, 32 + 20, 5000, 12))
    np.testing.assert_array_equal(back[10:5010], src[20:5020])
    assert not back[:10].any() and not back[5010:].any()
    assert b.pop_inbound_transfer_status("initiator", 12).Succeeded()


def test_multi_pair_batch_write_and_read(rdma_pair):
    multi_pair_batch_round_trip(*rdma_pair, seed=20)


def test_thousands_of_scattered_descriptors_in_one_session_batch(rdma_pair):
    a, b = rdma_pair
    rng = np.random.default_rng(3)
    count, slot = 2000, 16 * 1024
    sizes = rng.integers(1, slot, size=count, dtype=np.uint64)
    local_offsets = np.arange(count, dtype=np.uint64) * slot
    remote_offsets = rng.permutation(count).astype(np.uint64) * slot
    src, dst = random_bytes(count * slot, 4), np.zeros(count * slot, np.uint8)
    session = a.create_session(register(a, src), register(b, dst))
    wait_ok(session.batch_write(local_offsets, remote_offsets, sizes, 9))
    expected = np.zeros_like(dst)
    for lo, ro, s in zip(local_offsets.tolist(), remote_offsets.tolist(), sizes.tolist(), strict=True):
        expected[ro : ro + s] = src[lo : lo + s]
    assert np.array_equal(dst, expected)
    assert b.pop_inbound_transfer_status("initiator", 9).Succeeded()  # the whole batch is one transfer
    back = np.zeros_like(src)
    session_r = a.create_session(register(a, back), session.remote)
    wait_ok(session_r.batch_read(local_offsets, remote_offsets, sizes, 10))
    for lo, ro, s in zip(local_offsets.tolist(), remote_offsets.tolist(), sizes.tolist(), strict=True):
        assert np.array_equal(back[lo : lo + s], expected[ro : ro + s])


def test_lanes_and_chunking_land_every_byte_once(ucx_tls):
    a = rdma_engine("initiator", qp_per_transfer=4, enable_transfer_chunking=True, chunk_bytes=4096,
                    max_chunks_per_transfer=7, post_batch_size=3)  # fmt: skip
    b = rdma_engine("target")
    with a, b:
        connect(a, b)
        n = 3 * MiB + 12345
        src, dst = random_bytes(n, 5), np.zeros(n, np.uint8)
        m_src, m_dst = register(a, src), register(b, dst)
        wait_ok(a.write(m_src, 0, m_dst, 0, n, 1))
        assert np.array_equal(dst, src)
        # Contiguous descriptors merge, then split again into chunks over the four endpoints.
        src2 = random_bytes(n, 6)
        m_src2 = register(a, src2)
        sizes = [1000] * (n // 1000) + [n % 1000]
        offsets = np.cumsum([0, *sizes[:-1]]).tolist()
        wait_ok(a.create_session(m_src2, m_dst).batch_write(offsets, offsets, sizes, 2))
        assert np.array_equal(dst, src2)
        back = np.zeros(n, np.uint8)
        wait_ok(a.read(register(a, back), 0, m_dst, 0, n, 3))
        assert np.array_equal(back, src2)


def test_threads_share_one_peer(ucx_tls):
    """Four threads, each owning a quarter of the target, write and read back random batches at
    once over the same endpoints; every read is checked against the thread's numpy model."""
    quarter = 512 * 1024
    with rdma_engine("initiator", qp_per_transfer=3) as a, rdma_engine("target") as b:
        connect(a, b)
        target = np.zeros(4 * quarter, np.uint8)
        remote = register(b, target)
        errors: list[str] = []
        finished: list[int] = []

        def worker(index: int) -> None:
            try:
                steps(index)
                finished.append(index)
            except Exception as exc:  # reported below: a thread's exception would pass unseen
                errors.append(f"thread {index}: {exc!r}")

        def steps(index: int) -> None:
            rng = np.random.default_rng(60 + index)
            src, back = random_bytes(quarter, 70 + index), np.zeros(quarter, np.uint8)
            model = np.zeros(quarter, np.uint8)
            writer = a.create_session(register(a, src), remote)  # the first of them connects
            reader = a.create_session(register(a, back), remote)
            for step in range(30):
                count = int(rng.integers(1, 32))
                slots = rng.choice(quarter // 8192, size=count, replace=False) * 8192
                sizes = rng.integers(1, 8192, size=count)
                local = rng.integers(0, quarter - 8192, size=count)
                status = writer.batch_write(local, index * quarter + slots, sizes, 1000 * index + step)
                if status.WaitFor(20000) != StatusCode.SUCCESS:
                    errors.append(status.Message())
                    return
                for lo, so, n in zip(local, slots, sizes, strict=True):
                    model[so : so + n] = src[lo : lo + n]
                status = reader.batch_read([0], [index * quarter], [quarter], 100000 + 1000 * index + step)
                if status.WaitFor(20000) != StatusCode.SUCCESS or not np.array_equal(back, model):
                    errors.append(f"thread {index} step {step}: {status.Message() or 'read mismatch'}")
                    return

        run_threads(worker, 4, 50)
        assert not errors, errors[:3]
        assert sorted(finished) == [0, 1, 2, 3]


@pytest.mark.timeout(120)
@settings(max_examples=25)
@given(data=st.data())
def test_random_batches_match_a_numpy_model(data):
    size = 256 * 1024
    with rdma_engine("initiator", qp_per_transfer=2) as a, rdma_engine("target") as b:
        connect(a, b)
        local = random_bytes(size, data.draw(st.integers(0, 1000)))
        target = random_bytes(size, data.draw(st.integers(0, 1000)))
        model = target.copy()
        session = a.create_session(register(a, local), register(b, target))
        for step in range(data.draw(st.integers(1, 4))):
            count = data.draw(st.integers(0, 40))
            lengths = data.draw(st.lists(st.integers(0, 8192), min_size=count, max_size=count))
            # Disjoint destinations (overlapping ones race on any backend), arbitrary sources.
            starts = sorted(data.draw(st.lists(st.integers(0, size - 8192), min_size=count, max_size=count)))
            dst_offsets, end = [], 0
            for s, n in zip(starts, lengths, strict=True):
                dst_offsets.append(max(s, end))
                end = dst_offsets[-1] + n
            if end > size:
                continue
            src_offsets = [data.draw(st.integers(0, size - n)) for n in lengths]
            if data.draw(st.booleans()):
                wait_ok(session.batch_write(src_offsets, dst_offsets, lengths, step))
                for so, do, n in zip(src_offsets, dst_offsets, lengths, strict=True):
                    model[do : do + n] = local[so : so + n]
            else:
                before = local.copy()
                wait_ok(session.batch_read(dst_offsets, src_offsets, lengths, step))
                for do, so, n in zip(dst_offsets, src_offsets, lengths, strict=True):
                    before[do : do + n] = model[so : so + n]
                assert np.array_equal(local, before)
            assert np.array_equal(target, model)


def test_without_notification_the_target_records_nothing(ucx_tls):
    with rdma_engine("initiator", enable_notification=False) as a, rdma_engine("target") as b:
        connect(a, b)
        src, dst = random_bytes(65536, 7), np.zeros(65536, np.uint8)
        wait_ok(a.write(register(a, src), 0, register(b, dst), 0, 65536, 4))
        assert np.array_equal(dst, src)
        assert b.pop_inbound_transfer_status("initiator", 4) is None


def test_out_of_range_requests_fail_before_anything_is_posted(rdma_pair):
    a, b = rdma_pair
    guard = np.full(4096 + 128, 0xA5, np.uint8)  # the region is the middle 4096 bytes
    local = register(a, random_bytes(4096, 8))
    remote = b.register_memory(guard.ctypes.data + 64, 4096, -1, local.loc)
    # Reported as MORI's RDMA backend reports them: a status failed with ERR_INVALID_ARGS at once.
    status = a.write(local, 4000, remote, 0, 100, 1)
    assert status.Code() == StatusCode.ERR_INVALID_ARGS
    assert re.search(r"local_offsets\[0\].*exceeds the local memory's size 4096", status.Message())
    status = a.create_session(local, remote).batch_write([0, 0], [0, 4095], [16, 2], 2)
    assert status.Code() == StatusCode.ERR_INVALID_ARGS
    assert re.search(r"remote_offsets\[1\].*exceeds the remote memory's size 4096", status.Message())
    with pytest.raises(InvalidArgumentError, match="transfer_uid"):
        a.write(local, 0, remote, 0, 16, -1)
    # A forged descriptor claiming more than the target registered is refused by the bound the
    # target itself reported, before any byte moves.
    forged = MemoryDesc(remote.engine_key, remote.id, -1, "", -1, remote.data, 8192, remote.loc)
    status = a.write(local, 0, forged, 4096, 4096, 3)
    assert status.WaitFor(10000) == StatusCode.ERR_INVALID_ARGS
    assert "has 4096 bytes, the MemoryDesc says 8192" in status.Message()
    assert (guard == 0xA5).all()
    assert b.pop_inbound_transfer_status("initiator", 3) is None


def test_deregistered_remote_memory_is_not_found(rdma_pair):
    a, b = rdma_pair
    src, dst = random_bytes(4096, 9), np.zeros(4096, np.uint8)
    local, remote = register(a, src), register(b, dst)
    wait_ok(a.write(local, 0, remote, 0, 4096, 1))  # the initiator now holds the region's rkey
    assert np.array_equal(dst, src)
    dst[:] = 0
    b.deregister_memory(remote)
    # A session asks the owner anew, learns the region is gone and drops the cached rkey, so the
    # next transfer asks again instead of writing into memory that is no longer registered.
    with pytest.raises(NotFoundError, match=r"memory id \d+ is not registered with engine 'target'"):
        a.create_session(local, remote)
    status = a.write(local, 0, remote, 0, 4096, 2)
    assert status.WaitFor(10000) == StatusCode.ERR_NOT_FOUND
    assert "not registered with engine 'target'" in status.Message()
    assert not dst.any()
    a.deregister_memory(local)  # returns: nothing uses it any more


def test_falls_over_to_tcp_when_the_target_has_no_rdma(ucx_tls, capfd):
    with rdma_engine("initiator", tcp=True) as a, IOEngine("target", IOEngineConfig()) as b:
        b.create_backend(BackendType.TCP)
        connect(a, b)
        src, dst = random_bytes(MiB, 10), np.zeros(MiB, np.uint8)
        m_src, m_dst = register(a, src), register(b, dst)
        wait_ok(a.write(m_src, 0, m_dst, 0, MiB, 1))
        assert np.array_equal(dst, src)
        assert "engine 'target' has no RDMA backend" in capfd.readouterr().err
        # The refusal is remembered: the next transfers go straight to TCP, without a new warning.
        src[:] = 7
        wait_ok(a.write(m_src, 0, m_dst, 0, MiB, 2))
        assert (dst == 7).all()
        assert "has no RDMA backend" not in capfd.readouterr().err
        # Both went over TCP, which records inbound status for each of them.
        assert b.pop_inbound_transfer_status("initiator", 1).Succeeded()


def test_without_tcp_a_target_without_rdma_fails_the_transfer(ucx_tls):
    with rdma_engine("initiator") as a, IOEngine("target", IOEngineConfig()) as b:
        b.create_backend(BackendType.TCP)
        connect(a, b)
        status = a.write(register(a, random_bytes(64, 11)), 0, register(b, np.zeros(64, np.uint8)), 0, 64, 1)
        assert status.WaitFor(10000) == StatusCode.ERR_RDMA_OP
        assert "has no RDMA backend" in status.Message()


def test_falls_over_to_tcp_when_rdma_breaks_mid_transfer(monkeypatch, capfd):
    monkeypatch.setenv("UCX_TLS", "tcp")  # a removed worker closes its sockets: the failure is immediate
    with rdma_engine("initiator", tcp=True) as a, rdma_engine("target", tcp=True) as b:
        connect(a, b)
        n = 64 * MiB
        src, dst = random_bytes(n, 12), np.zeros(n, np.uint8)
        m_src, m_dst = register(a, src), register(b, dst)
        wait_ok(a.write(m_src, 0, m_dst, 0, MiB, 1))  # connected over RDMA
        assert np.array_equal(dst[:MiB], src[:MiB]) and "TCP" not in capfd.readouterr().err
        status = a.write(m_src, 0, m_dst, 0, n, 2)
        time.sleep(0.01)
        if not status.InProgress():
            pytest.skip("UCX moved 64 MiB before the target's backend could be removed")
        b.remove_backend(BackendType.RDMA)  # the target's UCX worker goes away under the transfer
        wait_ok(status, 30000)
        assert np.array_equal(dst, src)
        err = capfd.readouterr().err
        assert "RDMA transfer 2 to engine 'target' failed" in err and "retrying it over TCP" in err, err
        # The next transfer learns that the target has no RDMA any more and goes straight to TCP.
        src[:] = 3
        wait_ok(a.write(m_src, 0, m_dst, 0, n, 3))
        assert (dst == 3).all()


def test_remove_and_create_the_backend_again(rdma_pair):
    a, b = rdma_pair
    src, dst = random_bytes(4096, 14), np.zeros(4096, np.uint8)
    m_src, m_dst = register(a, src), register(b, dst)
    a.remove_backend(BackendType.RDMA)
    status = a.write(m_src, 0, m_dst, 0, 4096, 1)
    assert status.WaitFor(5000) == StatusCode.ERR_BAD_STATE
    assert "No available backend" in status.Message()
    assert a.create_session(m_src, m_dst) is None
    a.create_backend(BackendType.RDMA)  # memory registered before the backend is mapped on first use
    wait_ok(a.write(m_src, 0, m_dst, 0, 4096, 2))
    assert np.array_equal(dst, src)
    session = a.create_session(m_src, m_dst)
    assert session is not None and session.alive()


def test_config_is_checked_and_takes_its_defaults_from_the_environment(monkeypatch):
    for bad, match in [
        (RdmaBackendConfig(qp_per_transfer=0), "qp_per_transfer=0 is out of range"),
        (RdmaBackendConfig(qp_per_transfer=65), "qp_per_transfer=65 is out of range"),
        (RdmaBackendConfig(enable_transfer_chunking=True, chunk_bytes=100), "chunk_bytes=100"),
        (RdmaBackendConfig(notif_per_qp=0), "notif_per_qp=0"),
        (RdmaBackendConfig(post_batch_size=0), "post_batch_size=0"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            bad.validate()
    RdmaBackendConfig(notif_per_qp=0, enable_notification=False).validate()
    monkeypatch.setenv("MORI_IO_QP_PER_TRANSFER", "3")
    monkeypatch.setenv("MORI_IO_POLL_CQ_MODE", "event")
    monkeypatch.setenv("MORI_IO_ENABLE_NOTIFICATION", "0")
    cfg = RdmaBackendConfig()
    assert cfg.qp_per_transfer == 3 and cfg.poll_cq_mode.name == "EVENT" and cfg.enable_notification is False
    assert RdmaBackendConfig(qp_per_transfer=2).qp_per_transfer == 2  # an explicit value wins
    monkeypatch.setenv("MORI_IO_POLL_CQ_MODE", "sometimes")
    with pytest.raises(ConfigError, match="MORI_IO_POLL_CQ_MODE='sometimes'"):
        RdmaBackendConfig()


def test_event_mode_moves_bytes_and_idle_engines_use_no_cpu(ucx_tls):
    with rdma_engine("initiator", poll_cq_mode=PollCqMode.EVENT) as a, rdma_engine("target") as b:
        connect(a, b)
        src, dst = random_bytes(MiB, 15), np.zeros(MiB, np.uint8)
        wait_ok(a.write(register(a, src), 0, register(b, dst), 0, MiB, 1))
        assert np.array_equal(dst, src)
        time.sleep(0.2)
        before = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(1.0)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        assert cpu < 0.1, f"two idle engines used {cpu:.3f} s of CPU in 1 s"


def test_create_backend_without_ucx_raises_and_tcp_keeps_working(tmp_path):
    """MORI_IO_UCX_LIB_DIR pointing at an empty directory, in a fresh process (UCX, once loaded, stays)."""
    script = """
import numpy as np
from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, StatusCode, UnsupportedError
a, b = IOEngine("a", IOEngineConfig()), IOEngine("b", IOEngineConfig())
try:
    a.create_backend(BackendType.RDMA)
except UnsupportedError as exc:
    print("UNSUPPORTED:", exc)
else:
    raise SystemExit("create_backend(RDMA) did not raise")
for e in (a, b):
    e.create_backend(BackendType.TCP)
a.register_remote_engine(b.get_engine_desc())
src, dst = np.arange(4096, dtype=np.uint8), np.zeros(4096, np.uint8)
ms = a.register_memory(src.ctypes.data, 4096, -1, MemoryLocationType.CPU)
md = b.register_memory(dst.ctypes.data, 4096, -1, MemoryLocationType.CPU)
s = a.write(ms, 0, md, 0, 4096, 1)
assert s.WaitFor(10000) == StatusCode.SUCCESS, s.Message()
assert (dst == src).all()
print("TCP OK")
"""
    env = dict(os.environ, MORI_IO_UCX_LIB_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"MORI_IO_UCX_LIB_DIR={tmp_path}" in done.stdout, done.stdout
    assert "no libucs.so or libucs.so.0 in" in done.stdout, done.stdout
    assert "type=RDMA" in done.stdout
    assert "TCP OK" in done.stdout


def test_without_the_wheel_the_system_ucx_is_tried(tmp_path):
    """A libucx package without its lib/ (shadowing the installed wheel) leaves the system's
    libucp.so.0, which the dynamic loader may or may not find: either way nothing crashes."""
    (tmp_path / "libucx").mkdir()
    (tmp_path / "libucx" / "__init__.py").write_text("")
    script = """
from mori.io import BackendType, IOEngine, IOEngineConfig, UnsupportedError
from mori.io.config import ucx_library_dir
print("SOURCE:", ucx_library_dir()[1])
with IOEngine("a", IOEngineConfig()) as a:
    try:
        a.create_backend(BackendType.RDMA)
        print("RDMA: system UCX")
    except UnsupportedError as exc:
        print("RDMA:", exc)
"""
    env = {k: v for k, v in os.environ.items() if k != "MORI_IO_UCX_LIB_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SOURCE: the system" in done.stdout, done.stdout
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not os.path.exists(ldconfig):
        return  # cannot tell whether a system UCX exists; the run above did not crash
    if "libucp.so.0" not in subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout:
        assert "RDMA: type=RDMA (the UCX backend): UCX from the system" in done.stdout, done.stdout
        assert "dlopen(libucp.so.0) failed" in done.stdout and "pip install libucx-cu12" in done.stdout

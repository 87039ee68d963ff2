# SPDX-License-Identifier: MIT
"""The API surface: MORI's names and enums, typed errors for bad input, statuses and settings."""

from __future__ import annotations

import array
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import new_engine, random_bytes, register

import mori.io as mio
from mori.io import (
    BackendType,
    IOEngine,
    IOEngineConfig,
    MemoryLocationType,
    StatusCode,
    TransferStatus,
)


def test_mori_names_and_enum_values():
    assert [int(x) for x in (BackendType.Unknown, BackendType.XGMI, BackendType.RDMA, BackendType.TCP)] == [0, 1, 2, 3]
    assert int(BackendType.FABRIC) == 4
    assert (int(MemoryLocationType.CPU), int(MemoryLocationType.GPU)) == (1, 2)
    assert int(StatusCode.ERR_BAD_STATE) == 14 and int(StatusCode.IN_PROGRESS) == 2
    assert (int(mio.PollCqMode.POLLING), int(mio.PollCqMode.EVENT)) == (0, 1)
    for name in ("RdmaBackendConfig", "XgmiBackendConfig", "FabricBackendConfig", "TcpBackendConfig"):
        getattr(mio, name)()
    assert mio.TcpBackendConfig().num_data_conns == 8  # MORI's default (MORI_IO_TCP_NUM_DATA_CONNS)


def test_port_zero_binds_a_free_loopback_port():
    with IOEngine("e", IOEngineConfig(port=0)) as e:
        desc = e.get_engine_desc()
        assert desc.port > 0 and desc.host == "127.0.0.1" and desc.key == "e"
        assert len(desc.secret) == 32 and "secret" not in repr(desc)
        listening = Path("/proc/net/tcp").read_text()  # local_address column is HEX_IP:HEX_PORT
        assert f"0100007F:{desc.port:04X}" in listening
        # a second engine cannot take the same port
        with pytest.raises(mio.ConnectionFailedError, match=str(desc.port)):
            IOEngine("f", IOEngineConfig(port=desc.port))


def test_transfer_status_semantics():
    s = TransferStatus()
    assert s.Init() and s.Code() == StatusCode.INIT
    assert s.WaitFor(0) == StatusCode.INIT
    s.Update(StatusCode.ERR_BAD_STATE, "first")
    s.Update(StatusCode.ERR_NOT_FOUND, "second")  # the first error sticks
    assert s.Failed() and s.Code() == StatusCode.ERR_BAD_STATE and s.Message() == "first"
    assert "ERR_BAD_STATE" in repr(s)
    ok = TransferStatus()
    ok.SetCode(StatusCode.SUCCESS)
    assert IOEngine.wait_all([]) == StatusCode.SUCCESS
    assert IOEngine.wait_all([ok, s], 0) == StatusCode.ERR_BAD_STATE  # failure wins
    pending = TransferStatus()
    pending.SetCode(StatusCode.IN_PROGRESS)
    assert IOEngine.wait_all([ok, pending], 50) == StatusCode.IN_PROGRESS


def test_uids_count_up_from_zero():
    with IOEngine("u", IOEngineConfig()) as e:
        assert [e.allocate_transfer_uid() for _ in range(3)] == [0, 1, 2]


def test_fabric_is_not_built_and_configs_are_checked():
    # RDMA is built on UCX (tests/test_rdma.py covers it, including UCX being absent).
    with IOEngine("b", IOEngineConfig()) as e:
        with pytest.raises(mio.UnsupportedError, match="FABRIC"):
            e.create_backend(BackendType.FABRIC)
        with pytest.raises(mio.InvalidArgumentError, match="num_data_conns=17 is out of range"):
            e.create_backend(BackendType.TCP, mio.TcpBackendConfig(num_data_conns=17))
        with pytest.raises(mio.InvalidArgumentError, match="TcpBackendConfig"):
            e.create_backend(BackendType.TCP, mio.RdmaBackendConfig())


def test_transfer_without_backend_fails_with_mori_message():
    a, b = IOEngine("nb-a", IOEngineConfig()), IOEngine("nb-b", IOEngineConfig())
    try:
        a.register_remote_engine(b.get_engine_desc())
        ma, mb = register(a, np.zeros(8, np.uint8)), register(b, np.zeros(8, np.uint8))
        status = a.write(ma, 0, mb, 0, 8, 0)
        assert status.Failed() and status.Code() == StatusCode.ERR_BAD_STATE
        assert "create backend first" in status.Message()
        assert a.create_session(ma, mb) is None
    finally:
        a.shutdown()
        b.shutdown()


def test_register_torch_tensor_rules():
    with IOEngine("t", IOEngineConfig()) as e, pytest.raises(mio.InvalidArgumentError, match=r"not a torch\.Tensor"):
        e.register_torch_tensor(np.zeros(4))


def test_register_torch_tensor_with_real_torch():
    torch = pytest.importorskip("torch")
    with IOEngine("tt", IOEngineConfig()) as e:
        t = torch.arange(10, dtype=torch.int32)
        desc = e.register_torch_tensor(t)
        assert (desc.data, desc.size, desc.loc) == (t.data_ptr(), 40, MemoryLocationType.CPU)
        with pytest.raises(mio.InvalidArgumentError, match="contiguous"):
            e.register_torch_tensor(torch.zeros(4, 4).t())


def invalid_args(status, pattern: str) -> None:
    """A status failed at once with MORI's invalid-arguments code and a message matching pattern."""
    assert status.Failed() and status.Code() == StatusCode.ERR_INVALID_ARGS, status
    assert re.search(pattern, status.Message()), status.Message()


def test_bad_arguments_name_argument_value_and_limit(pair):
    a, b = pair
    ma, mb = register(a, np.zeros(100, np.uint8)), register(b, np.zeros(50, np.uint8))
    # Offsets and sizes out of range, and offset lists of different lengths, fail the status with
    # ERR_INVALID_ARGS as in MORI (its backends report them there); wrong types raise.
    invalid_args(a.write(ma, 0, mb, 40, 20, 0), r"remote_offsets\[0\].*\[40, 40 \+ 20\).*size 50")
    invalid_args(a.create_session(ma, mb).batch_write([0, 90], [0, 0], [10, 20], 0),
                 r"local_offsets\[1\].*\[90, 90 \+ 20\).*size 100")  # fmt: skip
    with pytest.raises(mio.InvalidArgumentError, match=r"local_offsets\[0\]=-1 must be in \[0, 2\*\*64\)"):
        a.read(ma, -1, mb, 0, 1, 0)
    with pytest.raises(mio.InvalidArgumentError, match=r"sizes\[0\]='x' is not an int"):
        a.read(ma, 0, mb, 0, "x", 0)
    with pytest.raises(mio.InvalidArgumentError, match=r"sizes\[0\]=-3 must be >= 0"):
        a.create_session(ma, mb).batch_read(np.zeros(1, np.int64), np.zeros(1, np.int64), np.array([-3]), 0)
    invalid_args(a.create_session(ma, mb).batch_read([0, 1], [0], [1], 0), "got 2, 1 and 1")
    statuses = a.batch_write([ma, ma], [[0], [0, 1]], [mb, mb], [[0], [0]], [[1], [1]], [1, 2])
    assert statuses[0].WaitFor(5000) == StatusCode.SUCCESS
    invalid_args(statuses[1], "mismatch")
    with pytest.raises(mio.InvalidArgumentError, match=r"transfer_uid=-5 is out of range \[0, 9223372036854775807\]"):
        a.write(ma, 0, mb, 0, 1, -5)
    with pytest.raises(mio.InvalidArgumentError, match="sizes has 1 entries; expected one per local_mem_desc"):
        a.batch_write([ma, ma], [[0], [0]], [mb, mb], [[0], [0]], [[1]], [1, 2])
    with pytest.raises(mio.InvalidArgumentError, match="belongs to engine 'target'"):
        a.write(mb, 0, mb, 0, 1, 0)
    with pytest.raises(mio.InvalidArgumentError, match="size=2 is out of range"):
        a.register_memory(2**64 - 2, 2, -1, MemoryLocationType.CPU)


def test_unknown_remote_and_deregistered_memory_are_not_found(pair):
    a, b = pair
    stranger = new_engine("stranger")
    try:
        ma = register(a, np.zeros(8, np.uint8))
        ms = register(stranger, np.zeros(8, np.uint8))
        with pytest.raises(mio.NotFoundError, match="'stranger' is not registered"):
            a.write(ma, 0, ms, 0, 8, 0)
        a.deregister_memory(ma)
        mb = register(b, np.zeros(8, np.uint8))
        with pytest.raises(mio.NotFoundError, match="memory id 0 is not registered"):
            a.write(ma, 0, mb, 0, 8, 0)
        with pytest.raises(mio.NotFoundError):
            a.deregister_memory(ma)
    finally:
        stranger.shutdown()


def test_transfer_to_memory_deregistered_on_the_target_fails_cleanly(pair):
    a, b = pair
    src, dst = random_bytes(4096, 1), np.zeros(4096, np.uint8)
    ma, mb = register(a, src), register(b, dst)
    b.deregister_memory(mb)
    status = a.write(ma, 0, mb, 0, 4096, 3)
    assert status.WaitFor(10000) == StatusCode.ERR_NOT_FOUND
    assert "not registered with engine 'target'" in status.Message()
    assert not dst.any()
    with pytest.raises(mio.NotFoundError):
        a.create_session(ma, mb)


def test_a_session_refuses_what_was_deregistered_after_it_was_made(pair):
    a, b = pair
    src, dst = random_bytes(4096, 2), np.zeros(4096, np.uint8)
    ma, mb = register(a, src), register(b, dst)
    session = a.create_session(ma, mb)
    assert session.write(0, 0, 4096, 1).WaitFor(10000) == StatusCode.SUCCESS
    assert bytes(dst) == bytes(src)
    a.deregister_memory(ma)
    with pytest.raises(mio.NotFoundError, match=f"local memory id {ma.id} is not registered"):
        session.write(0, 0, 16, 2)
    mc = register(a, src)
    other = a.create_session(mc, mb)
    a.deregister_remote_engine(b.get_engine_desc())
    with pytest.raises(mio.NotFoundError, match="remote engine 'target' is not registered"):
        other.batch_write([0], [0], [16], 3)
    a.register_remote_engine(b.get_engine_desc())  # the route is looked up again
    assert other.batch_write([0], [0], [16], 4).WaitFor(10000) == StatusCode.SUCCESS
    with pytest.raises(mio.InvalidArgumentError, match="transfer_uid"):
        other.write(0, 0, 16, -1)


def test_single_transfers_take_python_and_numpy_ints_and_name_bad_ones(pair):
    a, b = pair
    src, dst = random_bytes(256, 5), np.zeros(256, np.uint8)
    session = a.create_session(register(a, src), register(b, dst))
    uid = session.allocate_transfer_uid
    assert session.write(np.int64(8), np.uint32(16), np.int16(24), uid()).WaitFor(10000) == StatusCode.SUCCESS
    assert session.read(100, 16, 24, np.uint64(uid())).WaitFor(10000) == StatusCode.SUCCESS
    np.testing.assert_array_equal(dst[16:40], src[8:32])
    with pytest.raises(mio.InvalidArgumentError, match=r"remote_offsets\[0\]=-2 must be in \[0, 2\*\*64\)"):
        session.write(0, -2, 1, uid())
    with pytest.raises(mio.InvalidArgumentError, match=r"sizes\[0\]=1.5 is not an int"):
        session.read(0, 0, 1.5, uid())
    with pytest.raises(mio.InvalidArgumentError, match=r"transfer_uid=True must be an int"):
        session.write(0, 0, 1, True)
    with pytest.raises(mio.InvalidArgumentError, match=r"transfer_uid=9223372036854775808 is out of range"):
        session.write(0, 0, 1, 2**63)
    with pytest.raises(mio.InvalidArgumentError, match=r"local_offsets\[0\]=\{\} is not an int"):
        session.batch_write({}, [0], [1], uid())


def test_batch_offsets_as_lists_tuples_and_int_arrays_agree_and_name_bad_entries(pair):
    """Lists and tuples are read in place (ints directly, anything else through __index__), int64
    buffers in one go: every form moves the same bytes, and a bad entry is named by position."""
    a, b = pair
    src, dst = random_bytes(4096, 9), np.zeros(4096, np.uint8)
    session = a.create_session(register(a, src), register(b, dst))
    uid = session.allocate_transfer_uid
    offsets = [i * 64 for i in range(40)]
    sizes = [8 + i for i in range(40)]
    forms = [
        (offsets, offsets, sizes),
        (tuple(offsets), tuple(offsets), tuple(sizes)),
        ([np.int64(o) for o in offsets], offsets, [np.uint16(s) for s in sizes]),
        (array.array("q", offsets), array.array("Q", offsets), array.array("q", sizes)),
    ]
    expected = np.zeros_like(dst)
    for o, n in zip(offsets, sizes, strict=True):
        expected[o : o + n] = src[o : o + n]
    for local, remote, size in forms:
        dst[:] = 0
        assert session.batch_write(local, remote, size, uid()).WaitFor(10000) == StatusCode.SUCCESS
        np.testing.assert_array_equal(dst, expected)
    with pytest.raises(mio.InvalidArgumentError, match=r"sizes\[3\]=-1 must be in \[0, 2\*\*64\)"):
        session.batch_write(offsets[:4], offsets[:4], [1, 2, 3, -1], uid())
    with pytest.raises(mio.InvalidArgumentError, match=r"local_offsets\[2\]=18446744073709551616 must be in"):
        session.batch_write((0, 1, 2**64), (0, 1, 2), (1, 1, 1), uid())
    with pytest.raises(mio.InvalidArgumentError, match=r"remote_offsets\[1\]='7' is not an int"):
        session.batch_read([0, 1], [0, "7"], [1, 1], uid())


def test_stale_memory_desc_is_caught_by_create_session(pair):
    a, b = pair
    ma, mb = register(a, np.zeros(64, np.uint8)), register(b, np.zeros(64, np.uint8))
    bigger = type(mb)(**{**mb.__dict__, "size": 1 << 20})
    with pytest.raises(mio.InvalidArgumentError, match="stale"):
        a.create_session(ma, bigger)


def test_settings_registry_and_env_command(monkeypatch):
    from mori.io import settings

    names = [name for name, *_ in settings.entries()]
    assert len(names) == len(set(names)) and all(n.startswith("MORI_") for n in names)
    monkeypatch.setenv("MORI_IO_TCP_NUM_DATA_CONNS", "lots")
    with pytest.raises(mio.ConfigError, match="MORI_IO_TCP_NUM_DATA_CONNS='lots'"):
        mio.TcpBackendConfig()
    monkeypatch.setenv("MORI_IO_TCP_CHUNK_BYTES", "2M")
    monkeypatch.delenv("MORI_IO_TCP_NUM_DATA_CONNS")
    assert mio.TcpBackendConfig().chunk_bytes == 2 << 20
    out = subprocess.run([sys.executable, "-m", "mori.io", "env"], capture_output=True, text=True, check=True).stdout
    assert "MORI_IO_HOST=127.0.0.1" in out and "MORI_IO_TCP_CHUNK_BYTES=2M" in out


def test_set_log_level():
    mio.set_log_level("info")
    mio.set_log_level("warning")
    with pytest.raises(mio.InvalidArgumentError, match="level='loud'"):
        mio.set_log_level("loud")


def test_mori_io_does_not_import_mori_shmem():
    code = "import sys, mori.io; print('mori.shmem' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_secret_sources(monkeypatch):
    monkeypatch.setenv("MORI_IO_SECRET", "ab" * 32)
    with IOEngine("s1", IOEngineConfig()) as e:
        assert e.get_engine_desc().secret == bytes.fromhex("ab" * 32)
    with IOEngine("s2", IOEngineConfig(secret=b"k" * 16)) as e:  # the config beats the environment
        assert e.get_engine_desc().secret == b"k" * 16
    monkeypatch.setenv("MORI_IO_SECRET", "abcd")
    with pytest.raises(mio.ConfigError, match=r"MORI_IO_SECRET='abcd'.*16 to 256 bytes"):
        IOEngine("s3", IOEngineConfig())
    with pytest.raises(mio.InvalidArgumentError, match="secret must be 16 to 256 bytes"):
        IOEngine("s4", IOEngineConfig(secret=b"short"))

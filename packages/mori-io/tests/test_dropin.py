# SPDX-License-Identifier: MIT
"""MORI behaviour its users rely on: same-engine transfers, TransferStatus as MORI's tests and
SGLang use it, MORI's names importable from mori.io, MORI_RDMA_DEVICES, and the two-process
example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import new_engine, random_bytes, register

from mori.io import StatusCode, TransferStatus
from mori.io.config import rdma_devices_to_ucx

pytestmark = pytest.mark.timeout(60)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_transfer_between_two_memories_of_one_engine():
    """MORI's engine handles its own key: no register_remote_engine of itself needed."""
    engine = new_engine("solo")
    try:
        src, dst = random_bytes(256 * 1024, 4), np.zeros(256 * 1024, np.uint8)
        ms, md = register(engine, src), register(engine, dst)
        assert engine.write(ms, 0, md, 4096, 8192, 1).WaitFor(10000) == StatusCode.SUCCESS
        assert np.array_equal(dst[4096 : 4096 + 8192], src[:8192])
        back = np.zeros(8192, np.uint8)
        assert engine.read(register(engine, back), 0, md, 4096, 8192, 2).WaitFor(10000) == StatusCode.SUCCESS
        assert np.array_equal(back, src[:8192])
        session = engine.create_session(ms, md)
        assert session is not None
        status = session.batch_write([0, 100_000], [200_000, 0], [1000, 50_000], session.allocate_transfer_uid())
        assert status.WaitFor(10000) == StatusCode.SUCCESS
        assert np.array_equal(dst[200_000:201_000], src[:1000])
        assert np.array_equal(dst[:50_000], src[100_000:150_000])
        inbound = engine.pop_inbound_transfer_status("solo", 1)
        assert inbound is not None and inbound.Succeeded()
    finally:
        engine.shutdown()


def test_transfer_status_has_moris_methods():
    """The method set of MORI's pybind TransferStatus (src/pybind/pybind_io.cpp), used as MORI's
    tests and SGLang use it."""
    status = TransferStatus()
    assert status.Init() and status.Code() == StatusCode.INIT and status.Message() == ""
    assert not (status.InProgress() or status.Succeeded() or status.Failed())
    status.SetCode(StatusCode.IN_PROGRESS)
    assert status.InProgress() and status.WaitFor(0) == StatusCode.IN_PROGRESS
    assert status.WaitBusy(1) == StatusCode.IN_PROGRESS
    status.Update(StatusCode.ERR_NOT_FOUND, "gone")
    status.Update(StatusCode.SUCCESS, "late")  # the first error sticks, as in MORI
    assert status.Failed() and status.Code() == StatusCode.ERR_NOT_FOUND and status.Message() == "gone"
    status.Wait()
    status.SetMessage("changed")
    status.SetCode(StatusCode.SUCCESS)
    assert status.Succeeded() and status.Message() == "changed" and status.WaitBusy() == StatusCode.SUCCESS


def test_moris_names_and_constructors_come_from_mori_io():
    import mori.io as mio

    names = ["IOEngineConfig", "StatusCode", "BackendType", "EngineDesc", "MemoryDesc", "MemoryLocationType",
             "PollCqMode", "RdmaBackendConfig", "XgmiBackendConfig", "TcpBackendConfig", "TransferStatus"]  # fmt: skip
    for name in names:
        assert hasattr(mio, name), name
    config = mio.IOEngineConfig("10.0.0.1", 1234)  # MORI's positional (host, port)
    assert (config.host, config.port) == ("10.0.0.1", 1234)
    assert (mio.IOEngineConfig().host, mio.IOEngineConfig().port) == ("", 0)
    rdma = mio.RdmaBackendConfig(4, -1, 4, mio.PollCqMode.POLLING, False)  # SGLang's call
    assert (rdma.qp_per_transfer, rdma.post_batch_size, rdma.num_worker_threads) == (4, -1, 4)
    assert rdma.poll_cq_mode == mio.PollCqMode.POLLING and rdma.enable_notification is False
    default = mio.RdmaBackendConfig()
    assert (default.qp_per_transfer, default.post_batch_size, default.num_worker_threads) == (1, -1, -1)
    assert default.enable_notification is True and default.poll_cq_mode == mio.PollCqMode.POLLING
    assert (mio.XgmiBackendConfig().num_streams, mio.XgmiBackendConfig().num_events) == (64, 64)
    tcp = mio.TcpBackendConfig()
    assert (tcp.sock_sndbuf_bytes, tcp.num_data_conns, tcp.striping_threshold_bytes) == (32 << 20, 8, 65536)


def test_mori_rdma_devices_maps_to_ucx_net_devices(tmp_path):
    for port in ("1", "2"):
        (tmp_path / "mlx5_0" / "ports" / port).mkdir(parents=True)
    (tmp_path / "mlx5_1" / "ports" / "1").mkdir(parents=True)
    assert rdma_devices_to_ucx("mlx5_0,mlx5_1", tmp_path) == "mlx5_0:1,mlx5_0:2,mlx5_1:1"
    assert rdma_devices_to_ucx("^mlx5_1", tmp_path) == "^mlx5_1:1"
    assert rdma_devices_to_ucx("mlx5_1:1, lo", tmp_path) == "mlx5_1:1,lo"
    from mori.io import ConfigError

    with pytest.raises(ConfigError):
        rdma_devices_to_ucx(" , ", tmp_path)


def test_two_process_example_runs():
    result = subprocess.run([sys.executable, str(EXAMPLES / "two_process_transfer.py")], capture_output=True,
                            text=True, timeout=90, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("OK")


def test_mori_rdma_devices_selects_the_nics_of_the_rdma_backend(monkeypatch, capfd):
    """Over UCX's tcp transport: MORI_RDMA_DEVICES=lo carries the transfer; a device that does not
    exist leaves UCX without one, so the RDMA backend cannot be created (UCX names the device)."""
    from rdma_programs import rdma_engine, ucx_unavailable

    from mori.io import UnsupportedError

    why = ucx_unavailable()
    if why:
        pytest.skip(f"UCX cannot be loaded here: {why}")
    monkeypatch.setenv("UCX_TLS", "tcp")
    monkeypatch.setenv("MORI_RDMA_DEVICES", "lo")
    a, b = rdma_engine("a", num_worker_threads=4), rdma_engine("b")
    from mori._compat import noted_settings

    assert "RdmaBackendConfig.num_worker_threads" in noted_settings()  # accepted, no effect, logged once
    try:
        a.register_remote_engine(b.get_engine_desc())
        src, dst = random_bytes(65536, 8), np.zeros(65536, np.uint8)
        status = a.write(register(a, src), 0, register(b, dst), 0, src.nbytes, 1)
        assert status.WaitFor(20000) == StatusCode.SUCCESS, status.Message()
        assert np.array_equal(src, dst)
    finally:
        a.shutdown()
        b.shutdown()
    monkeypatch.setenv("MORI_RDMA_DEVICES", "mori_no_such_nic0")
    with pytest.raises(UnsupportedError, match="UCS_ERR_NO_DEVICE"):
        rdma_engine("c")
    captured = capfd.readouterr()
    assert "mori_no_such_nic0" in captured.out + captured.err


def test_fabric_config_fields_are_noted_as_without_effect():
    from mori._compat import noted_settings
    from mori.io import FabricBackendConfig

    FabricBackendConfig(num_events=8)
    assert "FabricBackendConfig.num_events" in noted_settings()

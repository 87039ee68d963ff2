# SPDX-License-Identifier: MIT
"""MORI_RDMA_DEVICES's selection (src/remote/rdma_devices.cpp), compiled alone with a small driver
and run against made-up sysfs trees; the expected lists follow MORI's reading of the variable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from native_driver import build_native_driver

# device -> its ports, as /sys/class/infiniband/<device>/ports/<port> would list them.
SYSFS = {"mlx5_0": ["1"], "mlx5_1": ["1", "2"], "mlx5_2": ["1"]}


@pytest.fixture(scope="module")
def select(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("rdma")
    exe = build_native_driver(work, "select_rdma_ports", "remote/rdma_devices.cpp")
    root = work / "infiniband"
    for device, ports in SYSFS.items():
        for port in ports:
            (root / device / "ports" / port).mkdir(parents=True)

    def run(setting: str, sysfs: Path = root) -> list[str]:
        done = subprocess.run([str(exe), setting, str(sysfs)], capture_output=True, text=True, check=True, timeout=30)
        return done.stdout.splitlines()

    return run


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("", ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_2:1"]),
        ("mlx5_2, mlx5_0", ["mlx5_2:1", "mlx5_0:1"]),  # MORI keeps the setting's order; blanks trimmed
        ("mlx5_1", ["mlx5_1:1", "mlx5_1:2"]),
        ("mlx5_1:2", ["mlx5_1:2"]),
        ("^mlx5_1", ["mlx5_0:1", "mlx5_2:1"]),
        ("^mlx5_1:1,mlx5_2", ["mlx5_0:1", "mlx5_1:2"]),
        ("^", ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_2:1"]),
        ("mlx5_9,mlx5_0", ["mlx5_0:1", "unknown mlx5_9"]),
        ("^mlx5_9", ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_2:1", "unknown mlx5_9"]),
        (",,", ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_2:1"]),
    ],
)
def test_selection(select, setting: str, expected: list[str]) -> None:
    assert select(setting) == expected


def test_no_rdma_devices(select, tmp_path: Path) -> None:
    assert select("", tmp_path / "absent") == []
    assert select("mlx5_0", tmp_path / "absent") == ["unknown mlx5_0"]

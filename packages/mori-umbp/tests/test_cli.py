# SPDX-License-Identifier: MIT
"""The console entry points and the master's Prometheus endpoint."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request

import numpy as np
from conftest import PAGE, free_port, make_client, master_config

from mori.umbp import MasterServer


def test_smoke_command_round_trips():
    out = subprocess.run(
        [sys.executable, "-m", "mori.umbp", "smoke", "--blocks", "8", "--size", "100000"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "put=8 get=8 bytes_match=True" in out.stdout and out.stdout.rstrip().endswith("OK")


def test_env_command_lists_the_registry():
    out = subprocess.run(
        [sys.executable, "-m", "mori.umbp", "env"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "UMBP_DRAM_CAPACITY": "1G"},
    )
    assert out.returncode == 0, out.stderr
    assert "UMBP_DRAM_CAPACITY=1G  (size, default '4G')" in out.stdout
    assert "UMBP_METADATA_BACKEND=inmemory" in out.stdout


def test_master_console_script_is_installed():
    script = shutil.which("mori-umbp-master")
    if script is None:  # running from a source tree without the wheel installed
        return
    out = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "listen_address" in out.stdout


def test_metrics_endpoint_counts_routes_and_capacity():
    port = free_port()
    with (
        MasterServer(master_config(metrics_port=port)) as master,
        make_client(master.address, "m-peer", 4 * PAGE),
        make_client(master.address, "m-client") as c,
        make_client(master.address, "m-reader") as r,
    ):
        data = np.ones(PAGE, np.uint8)
        assert c.put_from_ptr("m1", data.ctypes.data, PAGE)
        # A reader that did not put m1 asks the master (the writer would read from the owner it
        # remembers, NOTE [owner cache]).
        assert r.get_into_ptr("m1", data.ctypes.data, PAGE)
        r.get_into_ptr("m2", data.ctypes.data, PAGE)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'mori_umbp_route_get_total{result="hit"} 1.0' in text
    assert 'mori_umbp_route_get_total{result="miss"} 1.0' in text
    assert 'mori_umbp_route_put_total{outcome="DIRECT"} 1.0' in text  # placed by the writer (NOTE [direct put])
    assert f'mori_umbp_client_capacity_used_bytes{{node="m-peer",tier="DRAM"}} {float(PAGE)}' in text
    assert f'mori_umbp_client_capacity_total_bytes{{node="m-peer",tier="DRAM"}} {float(4 * PAGE)}' in text

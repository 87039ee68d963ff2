# SPDX-License-Identifier: MIT
"""The environment variable registry: `python -m mori.shmem env` and ConfigError on bad values."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mori._logging import parse_level
from mori.settings.shared import LOG_LEVELS
from mori.shmem.testing import run_pes

import pe_programs

# name -> (type, default) as the spec lists them.
SPEC_VARS = {
    "MORI_SHMEM_HEAP_SIZE": ("size", "4G"),
    "MORI_SHMEM_BACKEND": ("choice", "auto"),
    "MORI_SOCKET_IFNAME": ("string", ""),
    "MORI_BOOTSTRAP_TIMEOUT": ("seconds", "60"),
    "MORI_SHMEM_WAIT_TIMEOUT": ("seconds", "300"),
    "MORI_SHMEM_CHECK_SYMMETRY": ("bool", "1"),
    "MORI_LOG_LEVEL": ("choice", "WARNING"),
}


def clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MORI_")}
    env.update(overrides)
    return env


def run_env_command(env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mori.shmem", "env"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"python -m mori.shmem env failed ({proc.returncode}):\n{proc.stderr}"
    assert proc.stdout.strip(), "python -m mori.shmem env printed nothing"
    return proc.stdout


def blocks(output: str) -> dict[str, str]:
    """The text of each variable's entry: from the line that names it up to the next variable."""
    lines = output.splitlines()
    starts = []
    for i, line in enumerate(lines):
        for name in SPEC_VARS:
            # A name must be a whole word (MORI_SHMEM_WAIT_TIMEOUT vs MORI_BOOTSTRAP_TIMEOUT).
            tokens = line.replace("=", " ").replace(":", " ").replace("|", " ").replace(",", " ").split()
            if name in tokens and not any(s[1] == name for s in starts):
                starts.append((i, name))
    starts.sort()
    out = {}
    for (i, name), nxt in zip(starts, [*starts[1:], (len(lines), None)], strict=True):
        out[name] = "\n".join(lines[i : nxt[0]])
    return out


def test_env_lists_every_spec_variable_with_type_and_default() -> None:
    found = blocks(run_env_command(clean_env()))
    missing = sorted(set(SPEC_VARS) - set(found))
    assert not missing, f"variables missing from `python -m mori.shmem env`: {missing}"
    for name, (type_name, default) in SPEC_VARS.items():
        text = found[name].lower()
        assert type_name in text, f"{name}: type {type_name!r} not shown in:\n{found[name]}"
        if default:
            assert default.lower() in text, f"{name}: default {default!r} not shown in:\n{found[name]}"


def test_env_shows_effective_values_of_overrides() -> None:
    overrides = {
        "MORI_SHMEM_HEAP_SIZE": ("768M", str(768 << 20)),
        "MORI_BOOTSTRAP_TIMEOUT": ("17", "17"),
        "MORI_SHMEM_WAIT_TIMEOUT": ("123", "123"),
        "MORI_SOCKET_IFNAME": ("mori-test-if0", "mori-test-if0"),
        "MORI_LOG_LEVEL": ("DEBUG", "debug"),
    }
    found = blocks(run_env_command(clean_env(**{k: v[0] for k, v in overrides.items()})))
    defaults = blocks(run_env_command(clean_env()))
    for name, (raw, normalized) in overrides.items():
        text = found[name]
        assert raw in text or normalized.lower() in text.lower(), f"{name}={raw} not shown as effective:\n{text}"
        # And the same variable without the override does not show that value.
        assert raw not in defaults[name], f"{name}: {raw!r} shown even without the override:\n{defaults[name]}"


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("MORI_SHMEM_HEAP_SIZE", "12Q"),
        ("MORI_SHMEM_HEAP_SIZE", "-64M"),
        ("MORI_BOOTSTRAP_TIMEOUT", "soon"),
        ("MORI_SHMEM_CHECK_SYMMETRY", "maybe"),
        ("MORI_SHMEM_BACKEND", "quantum"),
        ("MORI_SHMEM_MODE", "isolation"),
        ("MORI_SHMEM_HEAP_TYPE", "fancy"),
        ("MORI_SHMEM_DEVICE", "first"),
        ("MORI_SHMEM_DEVICE_SPIN_TIMEOUT", "forever"),
    ],
)
def test_bad_value_makes_init_raise_config_error(name: str, bad: str) -> None:
    (err,) = run_pes(pe_programs.init_expecting_config_error, 1, env={name: bad}, timeout=60)
    assert err is not None, f"init succeeded with {name}={bad!r}"
    assert err["type"] == "ConfigError", err
    assert "ValueError" in err["mro"] and "MoriShmemError" in err["mro"], err
    assert name in err["message"], f"the message should name the variable: {err['message']}"
    assert bad in err["message"], f"the message should quote the value: {err['message']}"


@pytest.mark.parametrize("level", LOG_LEVELS)
def test_every_log_level_the_root_package_accepts_sets_the_native_threshold(level: str, tmp_path: Path) -> None:
    """MORI_LOG_LEVEL is read by the Python loggers and by the native library: every name works in both,
    and the native init's INFO line shows exactly at the levels that let INFO through in Python."""
    (result,) = run_pes(
        pe_programs.native_init_log, 1, str(tmp_path), env={"MORI_LOG_LEVEL": level.lower()}, timeout=60
    )
    assert result["error"] is None, f"MORI_LOG_LEVEL={level.lower()} refused by init: {result['error']}"
    shown = any("initialized" in line for line in result["log"])
    assert shown == (parse_level("MORI_LOG_LEVEL", level) <= logging.INFO), (level, result["log"])


def test_heap_size_env_is_honoured() -> None:
    results = run_pes(pe_programs.heap_size_from_env, 2, env={"MORI_SHMEM_HEAP_SIZE": "32M"}, timeout=60)
    assert [r["size"] for r in results] == [32 << 20, 32 << 20]
    assert [r["backend"] for r in results] == ["cpu", "cpu"]


def test_heap_size_accepts_decimal_units() -> None:
    (result,) = run_pes(pe_programs.heap_size_from_env, 1, env={"MORI_SHMEM_HEAP_SIZE": "0.03125GiB"}, timeout=60)
    assert result["size"] == 32 << 20


def test_cuda_backend_without_a_gpu_is_a_clear_error(gpu_available) -> None:
    if gpu_available:
        pytest.skip("a GPU is present here: the cuda backend initialises (test_cuda_backend covers it)")
    errors = run_pes(pe_programs.init_expecting_config_error, 2, env={"MORI_SHMEM_BACKEND": "cuda"}, timeout=60)
    for err in errors:
        assert err is not None and err["type"] == "UnsupportedError", err
        assert "cuda backend is unavailable" in err["message"], err["message"]


def test_device_calls_on_the_cpu_backend_name_the_backend() -> None:
    for out in run_pes(pe_programs.device_calls_on_cpu_backend, 2, env={"MORI_SHMEM_BACKEND": "cpu"}, timeout=60):
        for call, err in out.items():
            assert err is not None and err["type"] == "UnsupportedError", (call, err)
            assert "cpu backend" in err["message"] and "MORI_SHMEM_BACKEND=cuda" in err["message"], err["message"]


def test_settings_without_effect_are_logged_once() -> None:
    """MORI's heap type, malloc flags and (with no ucx conduit) MORI_RDMA_DEVICES are accepted, have
    no effect here, and say so once each at INFO (docs/user-guide/compatibility.md lists them)."""
    env = {"MORI_SHMEM_HEAP_TYPE": "normal", "MORI_RDMA_DEVICES": "mlx5_0"}
    (lines,) = run_pes(pe_programs.settings_without_effect, 1, env=env, timeout=60)
    for setting, value in (
        ("MORI_SHMEM_HEAP_TYPE", "'normal'"),
        ("MORI_RDMA_DEVICES", "'mlx5_0'"),
        ("shmem_ext_malloc_with_flags(flags)", "1"),
    ):
        matching = [line for line in lines if line.startswith(f"{setting}={value} is accepted")]
        assert len(matching) == 1, (setting, lines)
    assert len(lines) == 3, lines


def test_default_settings_log_nothing() -> None:
    (lines,) = run_pes(pe_programs.settings_without_effect, 1, env={"MORI_RDMA_DEVICES": None}, timeout=60)
    assert [line for line in lines if "MORI_SHMEM_HEAP_TYPE" in line or "MORI_RDMA" in line] == [], lines

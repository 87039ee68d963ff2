# SPDX-License-Identifier: MIT
"""The NVSHMEM benchmark peer without a GPU: its build (where nvcc and NVSHMEM are installed) and
the process handling of ``run`` (fake binaries: failing, hanging, succeeding ranks)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mori.shmem.bench import nvshmem


def _script(tmp_path: Path, name: str, body: str) -> Path:
    """An executable shell script standing in for the peer binary. It gets the peer's arguments:
    $1 uid file, $2 rank, $3 nranks, $4 mode, then options, and last the JSON output path."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_module_imports_no_torch_or_cuda_bindings():
    # Whatever mori.shmem itself imports, importing the peer module adds no torch or CUDA bindings.
    code = (
        "import sys; import mori.shmem; before = set(sys.modules); import mori.shmem.bench.nvshmem; "
        "new = set(sys.modules) - before; "
        "bad = sorted(m for m in new if m.split('.')[0] in ('torch', 'cuda', 'cupy', 'triton')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(240)
def test_build_compiles_an_executable(tmp_path):
    install, reason = nvshmem.locate_nvshmem()
    if install is None:
        pytest.skip(f"NVSHMEM not installed: {reason}")
    if nvshmem.find_nvcc() is None:
        pytest.skip("nvcc not found")
    binary = nvshmem.build(install, tmp_path / "cache")
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert binary.parent == tmp_path / "cache"
    # Cached by content: a second build returns the same file without compiling.
    started = time.monotonic()
    assert nvshmem.build(install, tmp_path / "cache") == binary
    assert time.monotonic() - started < 10
    # Bad usage is caught before CUDA is touched, so this runs without a GPU.
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "usage: nvshmem_peer" in proc.stderr


def test_build_without_install_is_unavailable(tmp_path):
    with pytest.raises(nvshmem.PeerUnavailable):
        nvshmem.build(None, tmp_path)


def test_build_with_missing_nvcc_is_unavailable(tmp_path):
    install = nvshmem.NvshmemInstall(
        root=tmp_path,
        include_dir=tmp_path / "include",
        lib_dir=tmp_path / "lib",
        host_library=tmp_path / "lib" / "libnvshmem_host.so.3",
        device_library=tmp_path / "lib" / "libnvshmem_device.a",
        version="0.0.0",
        source="test",
    )
    with pytest.raises(nvshmem.PeerUnavailable, match="nvcc"):
        nvshmem.build(install, tmp_path / "cache", nvcc=tmp_path / "no-such-nvcc")


def test_run_missing_binary_is_unavailable(tmp_path):
    with pytest.raises(nvshmem.PeerUnavailable):
        nvshmem.run(tmp_path / "missing", 2, "bw", [], timeout_s=5)


def test_run_nonzero_exit_raises_peer_failed_naming_the_rank():
    with pytest.raises(nvshmem.PeerFailed, match=r"rank 0") as info:
        nvshmem.run("/bin/false", 2, "bw", [], timeout_s=20)
    assert set(info.value.failed_ranks) == {0, 1}
    assert not info.value.timed_out


def test_run_one_failing_rank_kills_the_others(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = _script(
        tmp_path,
        "one_fails.sh",
        f'echo $$ > "{pid_dir}/$2"\nif [ "$2" = 1 ]; then echo "rank one is broken" >&2; exit 7; fi\nexec sleep 60\n',
    )
    started = time.monotonic()
    with pytest.raises(nvshmem.PeerFailed, match=r"rank 1: exit code 7") as info:
        nvshmem.run(script, 3, "lat", ["--iters", "10"], timeout_s=30)
    assert time.monotonic() - started < 15
    assert info.value.failed_ranks == (1,)
    assert "rank one is broken" in str(info.value)
    assert "rank one is broken" in info.value.stderr[1]
    for rank in (0, 2):
        assert not _alive(int((pid_dir / str(rank)).read_text()))


def test_run_hanging_ranks_are_killed_at_the_timeout(tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = _script(tmp_path, "hangs.sh", f'echo $$ > "{pid_dir}/$2"\nexec sleep 60\n')
    started = time.monotonic()
    with pytest.raises(nvshmem.PeerFailed, match="timed out") as info:
        nvshmem.run(script, 2, "bw", [], timeout_s=1.0)
    assert time.monotonic() - started < 10
    assert info.value.timed_out
    assert set(info.value.failed_ranks) == {0, 1}
    for rank in (0, 1):
        assert not _alive(int((pid_dir / str(rank)).read_text()))


def test_run_returns_every_ranks_json_in_order(tmp_path):
    script = _script(
        tmp_path,
        "ok.sh",
        'for last; do :; done\nprintf \'{"peer": "fake", "rank": %s, "nranks": %s, "mode": "%s", "rows": []}\' '
        '"$2" "$3" "$4" > "$last"\n',
    )
    results = nvshmem.run(script, 3, "bw", ["--sizes", "8"], timeout_s=20)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["nranks"] == 3 and r["mode"] == "bw" for r in results)


def test_run_without_json_raises_peer_failed(tmp_path):
    script = _script(tmp_path, "silent.sh", "exit 0\n")
    with pytest.raises(nvshmem.PeerFailed, match="no valid JSON"):
        nvshmem.run(script, 1, "bw", [], timeout_s=20)


def test_run_passes_a_shared_uid_file_and_env(tmp_path):
    script = _script(
        tmp_path,
        "env.sh",
        'for last; do :; done\nprintf \'{"uid": "%s", "flag": "%s"}\' "$1" "$PEER_TEST_FLAG" > "$last"\n',
    )
    results = nvshmem.run(script, 2, "lat", [], timeout_s=20, env={"PEER_TEST_FLAG": "yes"})
    assert results[0]["uid"] == results[1]["uid"]
    assert all(r["flag"] == "yes" for r in results)
    # The temporary directory holding the uid file is gone afterwards.
    assert not Path(results[0]["uid"]).parent.exists()


def test_find_nvshmem_honours_nvshmem_home(tmp_path, monkeypatch):
    monkeypatch.setenv("NVSHMEM_HOME", str(tmp_path))
    assert nvshmem.find_nvshmem() is None
    (tmp_path / "include" / "non_abi").mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    for name in ("include/nvshmem.h", "include/nvshmemx.h", "lib/libnvshmem_device.a", "lib/libnvshmem_host.so.3"):
        (tmp_path / name).write_text("")
    (tmp_path / "include" / "non_abi" / "nvshmem_version.h").write_text(
        "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\n#define NVSHMEM_VENDOR_MINOR_VERSION 4\n"
        "#define NVSHMEM_VENDOR_PATCH_VERSION 5\n"
    )
    install = nvshmem.find_nvshmem()
    assert install is not None
    assert install.version == "3.4.5"
    assert install.host_library.name == "libnvshmem_host.so.3"

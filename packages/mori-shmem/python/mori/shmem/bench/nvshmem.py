# SPDX-License-Identifier: MIT
"""The NVSHMEM peer of mori-shmem's GPU benchmark: find NVSHMEM, build the peer, run its PEs.

``nvshmem_peer.cu`` (beside this file) is one CUDA C++ program that measures what
``mori-shmem-bench --backend cuda`` measures, with NVIDIA NVSHMEM: device-initiated put bandwidth at
thread, warp and block scope, and put-with-signal ping-pong latency. This module

- finds the ``nvidia-nvshmem-cu13`` wheel (headers, ``libnvshmem_host.so.3``,
  ``libnvshmem_device.a``): :func:`find_nvshmem`;
- compiles and links the program with nvcc (relocatable device code, as NVSHMEM requires), cached
  by content: :func:`build`;
- starts one process per PE, hands them a file for NVSHMEM's unique id, waits with a deadline and
  returns every rank's JSON: :func:`run`.

Typical use::

    install = find_nvshmem()
    binary = build(install, cache_dir)          # PeerUnavailable if NVSHMEM or nvcc is missing
    per_rank = run(binary, 2, "bw", ["--scope", "block", "--sizes", "4096,1048576"], timeout_s=300)

The PEs share GPU 0 under CUDA MPS, which the caller starts (see the benchmark docs). The program's
command line and JSON are described at the top of ``nvshmem_peer.cu``. Nothing here imports torch
or CUDA bindings.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from mori.shmem.errors import MoriShmemError
from mori.shmem.settings import setting

_log = logging.getLogger("mori.shmem.bench.nvshmem")

# Wheels that carry NVSHMEM, most wanted first.
DISTRIBUTIONS = ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12")
# The program this module builds.
SOURCE = Path(__file__).with_name("nvshmem_peer.cu")
DEFAULT_ARCH = "sm_90"
MODES = ("bw", "lat")
# Bumped when the recipe of the cache key changes.
_KEY_FORMAT = "nvshmem-peer-1"
# Toolkit locations searched after MORI_JIT_NVCC, CUDA_HOME, CUDA_PATH and PATH.
_DEFAULT_CUDA_HOMES = ("/usr/local/cuda",)
# How much of a failing rank's stderr goes into the exception message.
_STDERR_TAIL_CHARS = 4000
# After the first rank fails, how long the others get to exit by themselves (their own messages
# say more than a kill) before they are killed.
_FAILURE_GRACE_S = 1.0
_POLL_S = 0.02

# What the program's exit codes mean (see nvshmem_peer.cu).
_EXIT_MEANINGS = {
    1: "CUDA/NVSHMEM/IO failure",
    2: "bad usage",
    3: "no unique id file (did rank 0 start?)",
    4: "a device-side wait timed out (peer gone or MPS off?)",
    5: "data check failed",
    6: "watchdog expired",
    255: "NVSHMEM initialisation failed",
}


class PeerUnavailable(MoriShmemError, RuntimeError):
    """The NVSHMEM peer cannot run here: no NVSHMEM wheel, no nvcc, or its build failed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PeerFailed(MoriShmemError, RuntimeError):
    """A run of the NVSHMEM peer failed: a rank exited non-zero, timed out, or wrote no valid JSON."""

    def __init__(
        self,
        message: str,
        *,
        failed_ranks: Sequence[int] = (),
        stderr: Mapping[int, str] | None = None,
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.failed_ranks = tuple(failed_ranks)
        self.stderr = dict(stderr or {})
        self.timed_out = timed_out


@dataclass(frozen=True)
class NvshmemInstall:
    """Where an NVSHMEM installation keeps what the peer needs."""

    root: Path
    include_dir: Path
    lib_dir: Path
    host_library: Path  # libnvshmem_host.so.3, linked by name and found at run time by rpath
    device_library: Path  # libnvshmem_device.a, linked statically (device code needs -rdc)
    version: str
    source: str  # the distribution name, or "NVSHMEM_HOME"


def _header_version(include_dir: Path) -> str | None:
    """``MAJOR.MINOR.PATCH`` from ``non_abi/nvshmem_version.h``, or None."""
    try:
        text = (include_dir / "non_abi" / "nvshmem_version.h").read_text(errors="replace")
    except OSError:
        return None
    parts = []
    for field in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"#define\s+NVSHMEM_VENDOR_{field}_VERSION\s+(\d+)", text)
        if match is None:
            return None
        parts.append(match.group(1))
    return ".".join(parts)


def _check_layout(root: Path, version: str | None, source: str) -> tuple[NvshmemInstall | None, str]:
    include_dir, lib_dir = root / "include", root / "lib"
    for needed in (include_dir / "nvshmem.h", include_dir / "nvshmemx.h", lib_dir / "libnvshmem_device.a"):
        if not needed.is_file():
            return None, f"{source} at {root} has no {needed.relative_to(root)}"
    hosts = sorted(lib_dir.glob("libnvshmem_host.so*"), key=lambda p: (p.name != "libnvshmem_host.so.3", p.name))
    if not hosts:
        return None, f"{source} at {root} has no lib/libnvshmem_host.so*"
    version = version or _header_version(include_dir) or "unknown"
    install = NvshmemInstall(
        root=root,
        include_dir=include_dir,
        lib_dir=lib_dir,
        host_library=hosts[0],
        device_library=lib_dir / "libnvshmem_device.a",
        version=version,
        source=source,
    )
    return install, ""


def locate_nvshmem() -> tuple[NvshmemInstall | None, str]:
    """The installation and an empty string, or None and why none was found.

    ``NVSHMEM_HOME`` (a directory with ``include/`` and ``lib/``) wins when set; otherwise the first
    of :data:`DISTRIBUTIONS` that is installed, found through ``importlib.metadata``.
    """
    home = os.environ.get("NVSHMEM_HOME", "").strip()
    if home:
        return _check_layout(Path(home).expanduser().resolve(), None, "NVSHMEM_HOME")
    reasons = []
    for name in DISTRIBUTIONS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            reasons.append(f"{name} is not installed")
            continue
        root = Path(str(dist.locate_file("nvidia/nvshmem"))).resolve()
        install, reason = _check_layout(root, dist.version, name)
        if install is not None:
            return install, ""
        reasons.append(reason)
    return None, "; ".join(reasons) + " (pip install nvidia-nvshmem-cu13, or set NVSHMEM_HOME)"


def find_nvshmem() -> NvshmemInstall | None:
    """The NVSHMEM installation the peer builds against, or None (the reason is logged)."""
    install, reason = locate_nvshmem()
    if install is None:
        _log.info("NVSHMEM peer unavailable: %s", reason)
    else:
        _log.debug("NVSHMEM %s from %s at %s", install.version, install.source, install.root)
    return install


def find_nvcc() -> Path | None:
    """nvcc from ``MORI_JIT_NVCC``, ``CUDA_HOME``/``CUDA_PATH``, ``PATH`` or ``/usr/local/cuda``."""
    explicit = setting("MORI_JIT_NVCC").strip()
    if explicit:
        path = Path(explicit).expanduser()
        return path if path.is_file() and os.access(path, os.X_OK) else None
    homes = [os.environ.get(var, "").strip() for var in ("CUDA_HOME", "CUDA_PATH")]
    for home in homes:
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    for home in _DEFAULT_CUDA_HOMES:
        if (Path(home) / "bin" / "nvcc").is_file():
            return Path(home) / "bin" / "nvcc"
    return None


def nvcc_version(nvcc: Path) -> str:
    """The full text of ``nvcc --version`` (it enters the cache key)."""
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerUnavailable(f"cannot run {nvcc} --version: {exc}") from exc
    if proc.returncode != 0:
        raise PeerUnavailable(f"{nvcc} --version exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc.stdout.strip()


def compile_flags(install: NvshmemInstall, arch: str = DEFAULT_ARCH) -> list[str]:
    """nvcc options before the source file: optimised, relocatable device code, NVSHMEM's headers."""
    return ["-O3", "-std=c++17", f"-arch={arch}", "-rdc=true", "-lineinfo", "-I", str(install.include_dir)]


def link_flags(install: NvshmemInstall) -> list[str]:
    """nvcc options after the source file: NVSHMEM's device library (static) and host library
    (shared, found at run time through an rpath to the wheel's lib dir, whose own ``$ORIGIN`` rpath
    then finds the bootstrap and transport plugins). No ``-lcuda``: NVSHMEM reaches the driver
    through the CUDA runtime, and the link needs nothing else."""
    return [
        "-L",
        str(install.lib_dir),
        "-lnvshmem_device",
        f"-l:{install.host_library.name}",
        "-Xlinker",
        f"-rpath,{install.lib_dir}",
    ]


def cache_key(*, source: bytes, nvcc_text: str, install: NvshmemInstall, flags: Sequence[str]) -> str:
    """sha256 over everything that decides the binary, each field length-prefixed."""
    digest = hashlib.sha256()
    fields: tuple[tuple[str, bytes], ...] = (
        ("format", _KEY_FORMAT.encode()),
        ("source", source),
        ("nvcc", nvcc_text.encode()),
        ("nvshmem", install.version.encode()),
        ("nvshmem_root", str(install.root).encode()),
        ("flags", "\0".join(flags).encode()),
    )
    for label, data in fields:
        digest.update(f"{label}:{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK) and path.stat().st_size > 0


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def build(
    install: NvshmemInstall | None,
    out_dir: str | os.PathLike[str],
    *,
    nvcc: str | os.PathLike[str] | None = None,
    arch: str = DEFAULT_ARCH,
    timeout_s: float = 900.0,
) -> Path:
    """Compile and link ``nvshmem_peer.cu`` into ``out_dir`` (once per content) and return the binary.

    The binary is named by a hash of the source, the nvcc version, the NVSHMEM version and location
    and the flags, so a cached one is reused exactly when it would come out the same. Several
    processes building at once compile once (a lock file beside the binary). Raises
    :class:`PeerUnavailable` when NVSHMEM or nvcc is missing or the build fails.
    """
    if install is None:
        _, reason = locate_nvshmem()
        raise PeerUnavailable(f"NVSHMEM not found: {reason or 'no installation given'}")
    compiler = Path(nvcc) if nvcc is not None else find_nvcc()
    if compiler is None:
        raise PeerUnavailable("nvcc not found (set MORI_JIT_NVCC or CUDA_HOME, or put nvcc on PATH)")
    try:
        source = SOURCE.read_bytes()
    except OSError as exc:
        raise PeerUnavailable(f"cannot read the peer's source {SOURCE}: {exc}") from exc
    nvcc_text = nvcc_version(compiler)
    before, after = compile_flags(install, arch), link_flags(install)
    key = cache_key(source=source, nvcc_text=nvcc_text, install=install, flags=[*before, *after])
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PeerUnavailable(f"cannot create the build directory {directory}: {exc}") from exc
    binary = directory / f"nvshmem_peer-{arch}-{key[:16]}"
    if _is_executable(binary):
        _log.debug("NVSHMEM peer cached at %s", binary)
        return binary
    with _file_lock(directory / f"{binary.name}.lock"):
        if _is_executable(binary):  # built by another process while this one waited
            return binary
        tmp = directory / f"{binary.name}.{os.getpid()}.tmp"
        command = [str(compiler), *before, str(SOURCE), "-o", str(tmp), *after]
        _log.info("building the NVSHMEM peer: %s", " ".join(command))
        started = time.monotonic()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            tmp.unlink(missing_ok=True)
            raise PeerUnavailable(f"building the NVSHMEM peer failed: {exc}") from exc
        if proc.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            output = (proc.stderr + proc.stdout).strip()[-_STDERR_TAIL_CHARS:]
            raise PeerUnavailable(
                f"building the NVSHMEM peer failed (nvcc exit {proc.returncode}): {' '.join(command)}\n{output}"
            )
        tmp.chmod(0o755)
        os.replace(tmp, binary)
        _log.info("built the NVSHMEM peer in %.1f s: %s", time.monotonic() - started, binary)
    return binary


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the rank and anything it started (its own session, so its own process group)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = text.strip()
    return text if len(text) <= _STDERR_TAIL_CHARS else "..." + text[-_STDERR_TAIL_CHARS:]


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    meaning = _EXIT_MEANINGS.get(code)
    return f"exit code {code}" + (f" ({meaning})" if meaning else "")


def run(
    binary: str | os.PathLike[str],
    nranks: int,
    mode: str,
    args: Sequence[str],
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run ``nranks`` PEs of the peer and return each rank's JSON, in rank order.

    Every rank runs ``binary <uid_file> <rank> <nranks> <mode> *args <out.json>`` in its own process
    (and session), with a fresh temporary unique-id file, ``env`` added to this process's
    environment, and stdout/stderr captured to files. If a rank exits non-zero, the others get a
    moment to exit by themselves and are then killed, and :class:`PeerFailed` names every failing
    rank with the tail of its stderr. If the ranks are not all done within ``timeout_s``, all are
    killed and :class:`PeerFailed` is raised with ``timed_out`` set. A missing or non-executable
    binary raises :class:`PeerUnavailable`.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    program = Path(binary)
    if not _is_executable(program):
        raise PeerUnavailable(f"the NVSHMEM peer binary {program} does not exist or is not executable")
    full_env = dict(os.environ)
    full_env.update(env or {})
    workdir = Path(tempfile.mkdtemp(prefix="mori-nvshmem-peer-"))
    uid_file = workdir / "nvshmem.uid"
    outs = [workdir / f"rank{rank}.json" for rank in range(nranks)]
    errs = [workdir / f"rank{rank}.stderr" for rank in range(nranks)]
    procs: list[subprocess.Popen[bytes]] = []
    handles: list[IO[bytes]] = []
    try:
        for rank in range(nranks):
            command = [str(program), str(uid_file), str(rank), str(nranks), mode, *args, str(outs[rank])]
            out_handle = (workdir / f"rank{rank}.stdout").open("wb")
            handles.append(out_handle)
            err_handle = errs[rank].open("wb")
            handles.append(err_handle)
            try:
                procs.append(
                    subprocess.Popen(
                        command,
                        stdin=subprocess.DEVNULL,
                        stdout=out_handle,
                        stderr=err_handle,
                        env=full_env,
                        start_new_session=True,
                    )
                )
            except OSError as exc:
                raise PeerUnavailable(f"cannot start {program}: {exc}") from exc
        _log.debug("started %d NVSHMEM peer ranks: %s %s %s", nranks, program, mode, " ".join(args))
        _wait_all(procs, errs, timeout_s)
        return [_read_json(rank, path, errs[rank]) for rank, path in enumerate(outs)]
    finally:
        for proc in procs:
            _kill(proc)
        for handle in handles:
            handle.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], errs: Sequence[Path], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    failed_at: float | None = None
    while True:
        codes = [proc.poll() for proc in procs]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        running = [rank for rank, code in enumerate(codes) if code is None]
        now = time.monotonic()
        if failed and failed_at is None:
            failed_at = now
        if not running:
            break
        if failed_at is not None and now - failed_at >= _FAILURE_GRACE_S:
            break
        if now >= deadline:
            for proc in procs:
                _kill(proc)
            stderr = {rank: _tail(errs[rank]) for rank in running}
            detail = "".join(f"\n--- stderr of rank {rank} ---\n{text}" for rank, text in stderr.items() if text)
            raise PeerFailed(
                f"NVSHMEM peer timed out after {timeout_s:g} s; ranks still running (killed): {running}{detail}",
                failed_ranks=running,
                stderr=stderr,
                timed_out=True,
            )
        time.sleep(_POLL_S)
    if not failed:
        return
    killed = [rank for rank, code in enumerate(codes) if code is None]
    for proc in procs:
        _kill(proc)
    stderr = {rank: _tail(errs[rank]) for rank in failed}
    lines = [f"rank {rank}: {_describe_exit(codes[rank] or 0)}" for rank in failed]
    if killed:
        lines.append(f"ranks killed after the failure: {killed}")
    detail = "".join(f"\n--- stderr of rank {rank} ---\n{text}" for rank, text in stderr.items() if text)
    raise PeerFailed(
        f"NVSHMEM peer failed: {'; '.join(lines)}{detail}",
        failed_ranks=failed,
        stderr=stderr,
    )


def _read_json(rank: int, path: Path, err: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        stderr = _tail(err)
        raise PeerFailed(
            f"NVSHMEM peer rank {rank} exited 0 but wrote no valid JSON ({exc})"
            + (f"\n--- stderr of rank {rank} ---\n{stderr}" if stderr else ""),
            failed_ranks=[rank],
            stderr={rank: stderr},
        ) from exc
    if not isinstance(data, dict):
        raise PeerFailed(f"NVSHMEM peer rank {rank} wrote JSON that is not an object", failed_ranks=[rank])
    return data

# SPDX-License-Identifier: MIT
"""Where a benchmark figure came from: versions, revision, interpreter, GPU stack and host.

Every ``mori-*-bench`` JSON carries :func:`provenance` under ``"provenance"``, so two files can be
compared knowing what produced each. Each field is ``None`` when it cannot be known here (no
checkout, no torch, no GPU); collecting it never raises.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import logging
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

_log = logging.getLogger(__name__)

#: The keys of :func:`provenance`'s dict, always all present.
KEYS = ("packages", "git_revision", "git_dirty", "python", "torch", "cuda", "gpu", "driver", "cpu", "hostname")

# git answers in milliseconds; a hung network filesystem must not hold a finished benchmark.
_GIT_TIMEOUT_S = 5.0


def mori_distributions() -> dict[str, str]:
    """Name -> version of every installed mori distribution (``mori`` and ``mori-*``)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name == "mori" or name.startswith("mori-"):
            found[name] = dist.version
    return dict(sorted(found.items()))


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _log.debug("git %s in %s: %s", " ".join(args), cwd, exc)
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_revision(cwd: Path | None = None) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files differ from it) of the checkout holding ``cwd``
    (default: the current directory); (None, None) outside a checkout or without git."""
    where = cwd or Path.cwd()
    head = _git(where, "rev-parse", "HEAD")
    if head is None:
        return None, None
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    return head, None if status is None else bool(status)


def driver_cuda_version() -> str | None:
    """The CUDA version the installed NVIDIA driver supports (``cuDriverGetVersion``), e.g. "13.0"."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def _torch_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {"torch": None, "cuda": None, "gpu": None}
    try:
        torch = sys.modules.get("torch") or importlib.import_module("torch")
    except Exception as exc:  # an absent or broken torch only means no torch fields
        _log.debug("torch for provenance: %s", exc)
        return fields
    fields["torch"] = str(torch.__version__)
    fields["cuda"] = torch.version.cuda  # the CUDA torch was built with; None for a cpu build
    try:
        if torch.cuda.is_available():
            fields["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # a driver that torch cannot talk to: still a cpu-only record
        _log.debug("torch.cuda for provenance: %s", exc)
    return fields


def cpu_model() -> str | None:
    """The host CPU's model name from /proc/cpuinfo (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def provenance(cwd: Path | None = None) -> dict[str, Any]:
    """What produced a benchmark result: the keys of :data:`KEYS`, ``None`` where unknown."""
    revision, dirty = git_revision(cwd)
    return {
        "packages": mori_distributions(),
        "git_revision": revision,
        "git_dirty": dirty,
        "python": platform.python_version(),
        **_torch_fields(),
        "driver": driver_cuda_version(),
        "cpu": cpu_model(),
        "hostname": socket.gethostname(),
    }

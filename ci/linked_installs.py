"""NOTE [linked installs]: a large pinned requirement installed once and hard-linked into each venv.

The CPU torch wheel is 900 MB installed, and pip took about 33 s of CPU on the 2-core CI machine to
unpack and byte-compile it and its dependencies (sympy, networkx, ...) into each of the five test
venvs that pin it. (Skipping the byte-compile is no way out: the machine sets
PYTHONDONTWRITEBYTECODE, so a venv's .pyc files are pip's or none, and every PE process would
compile torch again.) It is installed once, with its dependencies, into ``.nox/_linked/`` for each
Python; each venv gets hard links to the files of every distribution there that it lacks in any
version (copies where the file system cannot link). pip then finds them installed and adds the
rest. The files are the bytes pip would have written, and no session writes into them (pip
uninstall removes links, not their targets).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

#: Requirements worth linking: pinned, large, and in several venvs.
LINKED: tuple[str, ...] = ("torch==2.13.0",)


class _Session(Protocol):
    """What this module uses of a nox session."""

    def run(self, *args: str, silent: bool = ...) -> Any: ...

    def log(self, *args: Any) -> None: ...


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Held by one nox process at a time (CI runs two invocations at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _link_or_copy(src: str, dst: str) -> None:
    if os.path.exists(dst):
        return  # a folder two distributions share (__pycache__): the venv's file stays
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def _project(dist_info: Path) -> str:
    """The normalized project name of a ``<name>-<version>.dist-info`` folder."""
    return dist_info.name.split("-", 1)[0].lower().replace("_", "-").replace(".", "-")


def _top_level(dist_info: Path) -> set[str]:
    """The site-packages entries a distribution installed (its RECORD's first path parts, and
    the dist-info itself), without console scripts (``bin``, whose shebangs name the Python that
    filled the store)."""
    lines = (dist_info / "RECORD").read_text().splitlines()
    tops = {line.split(",", 1)[0].split("/", 1)[0] for line in lines if line}
    return {t for t in tops if t and t != "bin" and not t.startswith("..")} | {dist_info.name}


def link_into(session: _Session, requirements: Sequence[str], store_root: Path) -> None:
    """Hard-links each requirement of ``requirements`` that is in LINKED, with its dependencies,
    into the session's venv: every distribution of the store that the venv does not have in any
    version. The caller's pip install of ``requirements`` then finds them installed."""
    wanted = [r for r in requirements if r in LINKED]
    if not wanted:
        return
    probe = "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); print('%d.%d' % sys.version_info[:2])"
    site_text, python = str(session.run("python", "-c", probe, silent=True)).split()
    site = Path(site_text)
    for requirement in wanted:
        name, version = requirement.split("==")
        store = store_root / f"py{python}-{name}-{version}"
        with _locked(store_root / f"py{python}-{name}-{version}.lock"):
            if not (store / ".complete").exists():
                shutil.rmtree(store, ignore_errors=True)
                session.run("python", "-m", "pip", "install", "-q", "--target", str(store), requirement)
                (store / ".complete").touch()
        have = {_project(d) for d in site.glob("*.dist-info")}
        linked = []
        for dist_info in sorted(store.glob("*.dist-info")):
            if _project(dist_info) in have:
                continue  # this venv's own copy, in whatever version, stays
            for entry in _top_level(dist_info):
                src, dst = store / entry, site / entry
                if src.is_dir():
                    shutil.copytree(src, dst, copy_function=_link_or_copy, dirs_exist_ok=True)
                elif src.exists():
                    _link_or_copy(str(src), str(dst))
            linked.append(dist_info.name.removesuffix(".dist-info"))
        if linked:
            session.log(f"{requirement}: linked {', '.join(linked)} from {store}")

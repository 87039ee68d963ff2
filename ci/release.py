"""A release of one package: its sdist, a wheel per CPython built from that sdist and repaired to a
manylinux tag, the checks they must pass, and an install of each into a fresh venv. Nothing is
uploaded; the files land in ``dist/<pkg>/``.

Every build is what a user's plain ``pip wheel <sdist>`` does (build isolation), with pip told to
look in the dependencies' ``dist/<dep>/`` folders: a dependent (ep, cco, ir) thereby builds against
the released mori-shmem wheel, installed into its build environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pkggraph import ROOT
from pythons import find_python
from release_checks import (
    EXCLUDED_LIBS,
    check_audit,
    check_changelog,
    check_pins,
    check_sdist,
    check_wheel,
    meson_version,
)
from wheelhouse import distribution, package_dir

DIST = ROOT / "dist"

#: meson options a release forces, so a missing tool fails the build instead of silently shipping
#: less: mori-ir's wheel must carry its bitcode.
SETUP_ARGS: dict[str, tuple[str, ...]] = {"ir": ("-Dbitcode=enabled",)}

#: The smoke job each installed wheel runs after its import check (a script relative to the
#: repository, with its arguments), and what that script needs beyond the wheel's own dependencies.
SMOKE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "shmem": (("ci/smoke/shmem_ring.py",), ()),
    # A verified dispatch -> experts -> combine round trip against a single-process reference.
    "ep": (("packages/mori-ep/examples/dispatch_combine.py", "--pes", "2"), ("torch==2.13.0",)),
    "io": (("packages/mori-io/examples/two_process_transfer.py",), ("numpy",)),
    "ir": (("ci/smoke/ir_bitcode.py",), ()),
}

#: Run in each fresh venv: the module imports from that venv, and its version is meson.build's.
IMPORT_CHECK = "ci/smoke/import_check.py"


class Session(Protocol):
    """What this module uses of a nox session."""

    def run(self, *args: str, env: Mapping[str, str] | None = ..., silent: bool = ..., external: bool = ...) -> Any: ...

    def log(self, *args: Any) -> None: ...


class ReleaseError(RuntimeError):
    """A release artifact failed a check, or the tree is not in a state to release from."""


def dist_dir(pkg: str) -> Path:
    return DIST / pkg


def tag_name(pkg: str, version: str) -> str:
    """The git tag of a release, e.g. ``mori-shmem/v0.1.0`` (``mori/v0.1.0`` for the root)."""
    return f"{distribution(pkg)}/v{version}"


def check_tree(pkg: str, version: str, repo: Path = ROOT) -> list[str]:
    """The sdist is made from the committed tree (meson dist), so tracked edits must be committed;
    and an existing tag for this version must not predate changes to the package."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)

    rel = f"packages/{distribution(pkg)}"
    problems = []
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", rel).stdout.split("\n")
    if any(dirty):
        problems.append(f"{rel} has uncommitted changes, which the sdist would not contain: {[d for d in dirty if d]}")
    tag = tag_name(pkg, version)
    tagged = git("rev-parse", "-q", "--verify", f"refs/tags/{tag}").returncode == 0
    if tagged and git("diff", "--quiet", tag, "HEAD", "--", rel).returncode != 0:
        problems.append(f"{rel} changed since tag {tag}: bump the version in meson.build, add its changelog section")
    return problems


@dataclass(frozen=True)
class Release:
    """One package's release for the given Pythons; ``deps`` are the packages it needs (their
    ``dist/<dep>/`` folders must hold released wheels for every one of these Pythons)."""

    pkg: str
    deps: tuple[str, ...]
    pythons: tuple[str, ...]
    session: Session

    @property
    def version(self) -> str:
        return meson_version(self.pkg)

    @property
    def out(self) -> Path:
        return dist_dir(self.pkg)

    def _pip_env(self) -> dict[str, str]:
        # Through the environment, so it reaches the pip that `build` and build isolation start too.
        links = [*os.environ.get("PIP_FIND_LINKS", "").split(), *(str(dist_dir(d)) for d in self.deps)]
        return {"PIP_FIND_LINKS": " ".join(links), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def _venv(self, python: str, where: Path) -> Path:
        self.session.run(str(find_python(python)), "-m", "venv", "--clear", str(where), external=True, silent=True)
        return where / "bin" / "python"

    def build_sdist(self) -> Path:
        """``python -m build --sdist`` from the session's venv (RELEASE_TOOLS has build): an sdist
        is the same from any CPython, and its build backend still runs in an isolated env."""
        self.session.run(
            "python", "-m", "build", "--sdist", "--outdir", str(self.out), str(package_dir(self.pkg)),
            env=self._pip_env(),
        )  # fmt: skip
        sdists = sorted(self.out.glob("*.tar.gz"))
        if len(sdists) != 1:
            raise ReleaseError(f"expected one sdist in {self.out}, found {[s.name for s in sdists]}")
        return sdists[0]

    def build_wheel(self, python: str, sdist: Path, work: Path) -> Path:
        """A user's ``pip wheel <sdist>`` on ``python``, repaired to manylinux unless pure. The
        interpreter's own pip builds it where it has one: ``pip wheel`` installs nothing into it,
        and the build runs in an isolated env as a user's does."""
        builder = find_python(python)
        if subprocess.run([str(builder), "-m", "pip", "--version"], capture_output=True).returncode != 0:
            builder = self._venv(python, work / f"build-{python}")
        raw = work / f"raw-{python}"
        # --config-settings: the pip that comes with an older CPython (3.10) has no -C spelling.
        setup = [f"--config-settings=setup-args={a}" for a in SETUP_ARGS.get(self.pkg, ())]
        self.session.run(
            str(builder), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(raw), *setup, str(sdist),
            env=self._pip_env(), external=True,
        )  # fmt: skip
        (wheel,) = raw.glob("*.whl")
        if wheel.name.endswith("-py3-none-any.whl"):
            return Path(shutil.move(wheel, self.out / wheel.name))
        excludes = [arg for lib in EXCLUDED_LIBS for arg in ("--exclude", lib)]
        self.session.run("auditwheel", "repair", *excludes, "-w", str(self.out), str(wheel), silent=True)
        (repaired,) = self.out.glob(wheel.name.split("-linux_")[0] + "-*.whl")
        shown = str(self.session.run("auditwheel", "show", "--json", str(repaired), silent=True))
        report, _ = json.JSONDecoder().raw_decode(shown, shown.index("{"))  # log lines may surround it
        if problems := check_audit(report, repaired.name):
            raise ReleaseError("\n".join(problems))
        excluded = f", loads {sorted(report['external_libs'])} from elsewhere" if report["external_libs"] else ""
        self.session.log(f"{repaired.name}: auditwheel show: {report['sym_tag']}{excluded}")
        return repaired

    def install_check(self, python: str, wheel: Path, work: Path) -> None:
        """A fresh venv with only this wheel and what it declares: pip check, import, smoke job."""
        venv_dir = work / f"install-{python}"
        py = self._venv(python, venv_dir)
        smoke, smoke_deps = SMOKE.get(self.pkg, ((), ()))
        run = self.session.run
        run(str(py), "-m", "pip", "install", "-q", str(wheel), *smoke_deps, env=self._pip_env(), external=True)
        run(str(py), "-m", "pip", "check", external=True, silent=True)
        module = "mori" if self.pkg == "root" else f"mori.{self.pkg}"
        dist = distribution(self.pkg)
        found = run(
            str(py),
            "-I",
            str(ROOT / IMPORT_CHECK),
            dist,
            module,
            self.version,
            str(venv_dir),
            external=True,
            silent=True,
        )
        self.session.log(str(found).strip())
        if smoke:
            script, *args = smoke
            run(str(py), "-I", str(ROOT / script), *args, external=True)

    def wheel_for(self, python: str, wheels: Sequence[Path]) -> Path:
        tag = f"-cp{python.replace('.', '')}-"
        (wheel,) = [w for w in wheels if tag in w.name or w.name.endswith("-py3-none-any.whl")]
        return wheel

    def run(self) -> list[Path]:
        """Build, check and install-test everything; returns the files in ``dist/<pkg>/``."""
        version, started = self.version, time.monotonic()
        problems = check_changelog(self.pkg, version) + check_pins(self.pkg) + check_tree(self.pkg, version)
        if problems:
            raise ReleaseError("\n".join(problems))
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix=f"release-{self.pkg}-") as tmp:
            work = Path(tmp)
            sdist = self.build_sdist()
            wheels = [self.build_wheel(self.pythons[0], sdist, work)]
            if not wheels[0].name.endswith("-py3-none-any.whl"):  # native: one wheel per CPython
                wheels += [self.build_wheel(python, sdist, work) for python in self.pythons[1:]]
            problems = check_sdist(sdist, self.pkg, version)
            for wheel in wheels:
                problems += check_wheel(wheel, self.pkg, version, repaired=True)
            if problems:
                raise ReleaseError("\n".join(problems))
            self.session.run("twine", "check", "--strict", str(sdist), *map(str, wheels), silent=True)
            for python in self.pythons:
                self.install_check(python, self.wheel_for(python, wheels), work)
        files = [sdist, *wheels]
        self.session.log(
            f"{distribution(self.pkg)} {version}: {len(files)} files in {self.out.relative_to(ROOT)} "
            f"({time.monotonic() - started:.0f} s); tag it `git tag {tag_name(self.pkg, version)}`"
        )
        return files


def write_stamp(pkg: str, digest: str, pythons: Sequence[str], files: Sequence[Path]) -> None:
    stamp = {"hash": digest, "pythons": list(pythons), "files": [f.name for f in files]}
    (dist_dir(pkg) / "release.json").write_text(json.dumps(stamp, indent=2) + "\n")


def up_to_date(pkg: str, digest: str, pythons: Sequence[str]) -> bool:
    """The last release of ``pkg`` was built from these sources for at least these Pythons."""
    try:
        stamp = json.loads((dist_dir(pkg) / "release.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(
        stamp.get("hash") == digest
        and set(pythons) <= set(stamp.get("pythons", []))
        and all((dist_dir(pkg) / name).is_file() for name in stamp.get("files", []))
    )

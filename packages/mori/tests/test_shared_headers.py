# SPDX-License-Identifier: MIT
"""The header-only C++ every native package builds against (``mori.get_include()``): the CUDA driver
and UCX declarations checked against the real cuda.h and ucp.h, the loaders run against the
libraries this machine has, SHA-256/HMAC checked against Python's hashlib and hmac, and nothing of
them exported from a shared library that includes them."""

from __future__ import annotations

import ctypes.util
import hashlib
import hmac
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

import mori
from mori.testing.native import compile_declaration_check, cuda_include

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
NATIVE = PACKAGE_ROOT / "tests" / "native"
HEADERS = ("cuda_driver.hpp", "ucx_api.hpp", "hmac_sha256.hpp", "c_api_guard.hpp")


def _compiler() -> str:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    return compiler


def _build(tmp_path: Path, source: str, *flags: str) -> Path:
    """Compiles tests/native/<source> against mori.get_include() (warnings are errors)."""
    out = tmp_path / Path(source).stem
    result = subprocess.run(
        [_compiler(), "-std=c++17", "-Wall", "-Wextra", "-Wpedantic", "-Werror", f"-I{mori.get_include()}",
         str(NATIVE / source), "-o", str(out), *flags, "-ldl"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def _ucx_wheel_lib() -> Path | None:
    """The libucx wheel's lib folder (libucx-cu12, installed for the tests), or None."""
    spec = importlib.util.find_spec("libucx")  # located, not imported
    if spec is not None and spec.origin and (Path(spec.origin).parent / "include" / "ucp" / "api" / "ucp.h").is_file():
        return Path(spec.origin).parent / "lib"
    return None


def test_get_include_holds_the_headers() -> None:
    include = Path(mori.get_include())
    assert include.is_absolute()
    assert include == Path(mori.__file__).resolve().parent / "include"
    for header in HEADERS:
        assert (include / "mori" / header).is_file(), header


def test_cuda_declarations_match_cuda_h() -> None:
    include = cuda_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cuda.h) on this machine")
    compile_declaration_check(PACKAGE_ROOT, "check_cuda_abi.cpp", include, f"-I{mori.get_include()}")


def test_ucp_declarations_match_ucp_h() -> None:
    lib = _ucx_wheel_lib()
    if lib is None:
        pytest.skip("the libucx wheel (pip install libucx-cu12) and its ucp.h are not installed")
    include = lib.parent / "include"
    compile_declaration_check(PACKAGE_ROOT, "check_ucx_abi.cpp", include, f"-I{mori.get_include()}", "-Wall", "-Werror")


def test_c_api_guard_turns_each_exception_into_its_status(tmp_path: Path) -> None:
    program = _build(tmp_path, "c_api_guard.cpp")
    done = subprocess.run([str(program)], capture_output=True, text=True, timeout=60, check=True)
    # The program's codes: success 0, out of memory 7, internal 9; its own error carries status 3.
    assert done.stdout.splitlines() == [
        "0 -",  # success leaves the last error as it was
        "3 size must be > 0",
        "7 out of host memory",
        "9 internal error: bad state",
    ]


@pytest.mark.parametrize("rounds", ["sha-ni where the cpu has it", "portable"])
def test_sha256_and_hmac_match_hashlib(tmp_path: Path, rounds: str) -> None:
    program = _build(tmp_path, "hmac_vectors.cpp", *(["-DMORI_SHA256_PORTABLE"] if rounds == "portable" else []))
    # Message lengths around the 55/56/64-byte padding edges and of many blocks (hashed straight
    # from the input, several at a time); keys shorter than, equal to and longer than the 64-byte
    # block (a longer key is hashed first).
    lengths = (0, 1, 55, 56, 63, 64, 65, 119, 128, 1000, 4097, 16384)
    cases = [(key, msg) for key in (b"", b"k", b"x" * 64, b"y" * 100) for n, msg in
             ((n, bytes(i % 251 for i in range(n))) for n in lengths)]  # fmt: skip
    stdin = "".join(f"{key.hex() or '-'} {msg.hex() or '-'}\n" for key, msg in cases)
    done = subprocess.run([str(program)], input=stdin, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"fill_random failed with errno {done.returncode}"
    lines = done.stdout.splitlines()
    assert len(lines) == len(cases)
    for (key, msg), line in zip(cases, lines, strict=True):
        digest, mac, same, flipped = line.split()
        assert digest == hashlib.sha256(msg).hexdigest(), (len(msg), line)
        assert mac == hmac.new(key, msg, hashlib.sha256).hexdigest(), (len(key), len(msg), line)
        assert (same, flipped) == ("1", "0")


def test_cuda_loader_says_why_it_is_unavailable(tmp_path: Path) -> None:
    program = _build(tmp_path, "loaders.cpp")
    out = subprocess.run([str(program), "cuda"], capture_output=True, text=True, timeout=60, check=True).stdout
    first, described = out.splitlines()
    if ctypes.util.find_library("cuda") is None:
        assert first.startswith("unavailable: no NVIDIA driver: dlopen(libcuda.so.1) failed: "), first
        assert described == "CUDA error 2 (no description)"
    else:  # a machine with the driver: loaded, or cuInit said why not (no usable GPU)
        assert first.startswith("loaded ") or "cuInit failed with" in first, first
        assert described.startswith("CUDA_ERROR_OUT_OF_MEMORY ("), described


def test_ucx_loader_names_what_is_missing(tmp_path: Path) -> None:
    program = _build(tmp_path, "loaders.cpp")
    empty = tmp_path / "empty"
    empty.mkdir()
    out = subprocess.run([str(program), "ucx", str(empty)], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == f"unavailable: no libucs.so or libucs.so.0 in {empty}"
    system = subprocess.run([str(program), "ucx", "-"], capture_output=True, text=True, timeout=60, check=True)
    if ctypes.util.find_library("ucp") is None:
        assert system.stdout.startswith("unavailable: no UCX found: dlopen(libucp.so.0) failed: "), system.stdout


def test_ucx_loader_opens_the_wheel_once(tmp_path: Path) -> None:
    lib = _ucx_wheel_lib()
    if lib is None:
        pytest.skip("the libucx wheel (pip install libucx-cu12) is not installed")
    program = _build(tmp_path, "loaders.cpp")
    out = subprocess.run([str(program), "ucx", str(lib)], capture_output=True, text=True, timeout=60, check=True)
    loaded, again, described = out.stdout.splitlines()
    major, minor = loaded.split()[1].split(".")
    assert (int(major), int(minor)) >= (1, 14), loaded
    assert loaded.endswith(f"{lib}/libucp opened=1"), loaded
    assert again == f"again 1 opened=0 dir={lib}", "a second load() must return the library already loaded"
    assert described == "Connection reset by remote peer (UCS_ERR_CONNECTION_RESET)"


def test_including_libraries_export_none_of_it(tmp_path: Path) -> None:
    """Inline functions are weak symbols: two packages' libraries that exported them would bind to
    one copy (one loaded table, one layout) in a process that loads both. The headers' namespace is
    hidden, so even a library built without -fvisibility=hidden keeps its copy to itself."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils)")
    for name in ("user_a", "user_b"):
        library = _build(tmp_path, "two_users.cpp", "-shared", "-fPIC", f"-DUSER_ENTRY={name}")
        library = library.rename(tmp_path / f"lib{name}.so")
        symbols = subprocess.run([nm, "-DC", "--defined-only", str(library)], capture_output=True, text=True,
                                 timeout=60, check=True).stdout  # fmt: skip
        assert f" T {name}" in symbols, symbols
        leaked = [line for line in symbols.splitlines() if "mori::" in line]
        assert leaked == [], leaked

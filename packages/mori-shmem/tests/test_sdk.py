# SPDX-License-Identifier: MIT
"""The SDK the wheel ships for dependent packages: headers, libmori_shmem.so, pkg-config file,
mori-shmem-config, and the C ABI itself (compiled with cc against the installed wheel)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import mori.shmem as shmem


def real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def pkg_config(*args: str) -> str:
    exe = shutil.which("pkg-config") or shutil.which("pkgconf")
    if exe is None:
        pytest.skip("pkg-config is not installed")
    env = dict(os.environ, PKG_CONFIG_PATH=shmem.get_pkgconfig_dir())
    proc = subprocess.run([exe, *args, "mori-shmem"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"pkg-config {' '.join(args)} mori-shmem failed: {proc.stderr}"
    return proc.stdout.strip()


def config_tool() -> str:
    candidates = [
        shutil.which("mori-shmem-config"),
        os.path.join(sysconfig.get_path("scripts"), "mori-shmem-config"),
        os.path.join(os.path.dirname(sys.executable), "mori-shmem-config"),
    ]
    for c in candidates:
        if c and os.path.isfile(c):
            return c
    pytest.fail("the mori-shmem-config console script is not installed next to the interpreter")


def run_config(*args: str) -> str:
    proc = subprocess.run([config_tool(), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"mori-shmem-config {' '.join(args)} failed: {proc.stderr}"
    return proc.stdout.strip()


def flag_paths(flags: str, prefix: str) -> list[str]:
    return [real(tok[len(prefix) :]) for tok in shlex.split(flags) if tok.startswith(prefix)]


def header_text() -> str:
    return (Path(shmem.get_include()) / "mori_shmem" / "mori_shmem.h").read_text()


# ----------------------------------------------------------------------------- Python side


def test_version_attributes() -> None:
    assert isinstance(shmem.__version__, str) and shmem.__version__
    assert shmem.__version__ == importlib.metadata.version("mori-shmem")
    assert isinstance(shmem.__abi_version__, int) and shmem.__abi_version__ >= 1


def test_mori_init_belongs_to_the_root_distribution() -> None:
    """mori/__init__.py is the root distribution's (packages/mori), which extends mori.__path__ over
    every wheel; mori-shmem must not ship one of its own, or installing it would replace the root's."""
    import mori

    shipped = {str(f) for f in importlib.metadata.files("mori-shmem") or []}
    assert "mori/__init__.py" not in shipped
    assert str(Path(shmem.__file__).parent.parent) in [str(Path(p)) for p in mori.__path__]


def test_get_include_has_the_headers() -> None:
    inc = Path(shmem.get_include())
    assert inc.is_absolute() and inc.is_dir()
    assert (inc / "mori_shmem" / "mori_shmem.h").is_file()
    version_h = (inc / "mori_shmem" / "version.h").read_text()
    m = re.search(r"#\s*define\s+MORI_SHMEM_ABI_VERSION\s+(\d+)", version_h)
    assert m, "version.h does not define MORI_SHMEM_ABI_VERSION"
    assert int(m.group(1)) == shmem.__abi_version__


def test_library_path() -> None:
    lib = Path(shmem.get_library_path())
    assert lib.is_file(), lib
    assert lib.name.startswith("libmori_shmem.so")
    assert real(lib.parent) == real(shmem.get_library_dir())


def test_the_loaded_library_is_the_shipped_one() -> None:
    """One library mapped per process: the extension uses the libmori_shmem.so of get_library_path()."""
    import mori.shmem._C  # noqa: F401

    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps")
    mapped = set()
    for line in maps.read_text().splitlines():
        if "libmori_shmem" in line:
            path = line[line.index("/") :].removesuffix(" (deleted)")
            mapped.add(real(path))
    assert mapped == {real(shmem.get_library_path())}, mapped


def test_enums_match_the_c_header() -> None:
    text = header_text()
    for member in shmem.AmoType:
        name = member.name if member.name.startswith("SIGNAL") else f"AMO_{member.name}"
        m = re.search(rf"MORI_SHMEM_{name}\s*=\s*(\d+)", text)
        assert m, f"MORI_SHMEM_{name} missing from the header"
        assert int(m.group(1)) == int(member), member
    for member in shmem.CmpOp:
        m = re.search(rf"MORI_SHMEM_CMP_{member.name}\s*=\s*(\d+)", text)
        assert m and int(m.group(1)) == int(member), member
    assert {m.name for m in shmem.CmpOp} == {"EQ", "NE", "GT", "LE", "LT", "GE"}
    assert shmem.MORI_SHMEM_INIT_WITH_MPI_COMM == 0 and shmem.MORI_SHMEM_INIT_WITH_UNIQUEID == 1


def test_pkgconfig_file() -> None:
    pcdir = Path(shmem.get_pkgconfig_dir())
    assert (pcdir / "mori-shmem.pc").is_file()
    assert pkg_config("--modversion") == shmem.__version__
    assert real(shmem.get_include()) in flag_paths(pkg_config("--cflags"), "-I")
    libs = pkg_config("--libs")
    assert real(shmem.get_library_dir()) in flag_paths(libs, "-L")
    assert "-lmori_shmem" in shlex.split(libs)


def test_pkgconfig_file_is_relocatable() -> None:
    """prefix=${pcfiledir}/..: no absolute install prefix baked in."""
    text = (Path(shmem.get_pkgconfig_dir()) / "mori-shmem.pc").read_text()
    assert "${pcfiledir}" in text, "the .pc file hard-codes its install prefix"
    assert str(Path(shmem.get_include()).parent) not in text


def test_config_tool_agrees() -> None:
    assert run_config("--version") == shmem.__version__
    assert run_config("--abi-version") == str(shmem.__abi_version__)
    assert real(run_config("--includedir")) == real(shmem.get_include())
    assert real(run_config("--libdir")) == real(shmem.get_library_dir())
    assert real(run_config("--pkgconfigdir")) == real(shmem.get_pkgconfig_dir())
    assert real(shmem.get_include()) in flag_paths(run_config("--cflags"), "-I")
    libs = run_config("--libs")
    assert real(shmem.get_library_dir()) in flag_paths(libs, "-L")
    assert "-lmori_shmem" in shlex.split(libs)
    assert flag_paths(run_config("--cflags"), "-I") == flag_paths(pkg_config("--cflags"), "-I")


def test_config_tool_rejects_unknown_option() -> None:
    proc = subprocess.run([config_tool(), "--no-such-option"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0


# ----------------------------------------------------------------------------- C programs

ABI_PROGRAM = r"""
#include <stdio.h>
#include <mori_shmem/mori_shmem.h>
int main(void) {
  printf("%d\n%s\n%d\n", mori_shmem_abi_version(), mori_shmem_version(), MORI_SHMEM_ABI_VERSION);
  return 0;
}
"""

INIT_PROGRAM = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <mori_shmem/mori_shmem.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    int rc_ = (call);                                                                 \
    if (rc_ != 0) {                                                                   \
      fprintf(stderr, "%s failed: %d: %s\n", #call, rc_, mori_shmem_last_error());    \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(void) {
  mori_shmem_uniqueid_t uid;
  mori_shmem_init_attr_t attr;
  void* p = NULL;
  void* q = NULL;
  void* big = NULL;
  mori_shmem_heap_info_t info;
  uint64_t old = 0, seen = 0;
  int rc;

  if (mori_shmem_is_initialized() != 0) { fprintf(stderr, "initialized before init\n"); return 1; }
  rc = mori_shmem_malloc(64, &p);
  if (rc != MORI_SHMEM_ERR_NOT_INITIALIZED) { fprintf(stderr, "malloc before init: %d\n", rc); return 1; }
  if (strlen(mori_shmem_last_error()) == 0) { fprintf(stderr, "no message for the failure\n"); return 1; }

  CHECK(mori_shmem_get_unique_id(&uid));
  CHECK(mori_shmem_set_attr_uniqueid_args(0, 1, &uid, &attr));
  if (attr.rank != 0 || attr.nranks != 1) { fprintf(stderr, "attr not filled\n"); return 1; }
  CHECK(mori_shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, &attr));
  if (mori_shmem_is_initialized() != 1) { fprintf(stderr, "not initialized\n"); return 1; }
  rc = mori_shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, &attr);
  if (rc != MORI_SHMEM_ERR_ALREADY_INITIALIZED) { fprintf(stderr, "second init: %d\n", rc); return 1; }
  if (mori_shmem_my_pe() != 0 || mori_shmem_n_pes() != 1) { fprintf(stderr, "pe/npes\n"); return 1; }
  if (strcmp(mori_shmem_backend(), "cpu") != 0) { fprintf(stderr, "backend %s\n", mori_shmem_backend()); return 1; }

  CHECK(mori_shmem_heap_info(&info));
  CHECK(mori_shmem_malloc(1 << 20, &p));
  if (p == NULL || ((uintptr_t)p % 256) != 0) { fprintf(stderr, "bad pointer %p\n", p); return 1; }
  if ((uintptr_t)p < info.base + info.reserved || (uintptr_t)p + (1 << 20) > info.base + info.size) {
    fprintf(stderr, "pointer outside the heap\n"); return 1;
  }
  memset(p, 0x5a, 1 << 20);
  CHECK(mori_shmem_malloc_align(4096, 100, &q));
  if (((uintptr_t)q % 4096) != 0) { fprintf(stderr, "malloc_align\n"); return 1; }
  memset(q, 0, 4096);
  CHECK(mori_shmem_atomic(q, MORI_SHMEM_AMO_FETCH_ADD, MORI_SHMEM_TYPE_UINT64, 41, 0, 0, &old));
  CHECK(mori_shmem_atomic(q, MORI_SHMEM_AMO_INC, MORI_SHMEM_TYPE_UINT64, 0, 0, 0, NULL));
  CHECK(mori_shmem_wait_until(q, MORI_SHMEM_TYPE_UINT64, MORI_SHMEM_CMP_EQ, 42, 1000, &seen));
  if (old != 0 || seen != 42 || *(uint64_t*)q != 42) { fprintf(stderr, "atomics\n"); return 1; }
  CHECK(mori_shmem_putmem((char*)q + 256, p, 1000, 0));
  CHECK(mori_shmem_quiet());
  if (((unsigned char*)q)[256 + 999] != 0x5a) { fprintf(stderr, "putmem\n"); return 1; }

  rc = mori_shmem_malloc((size_t)1 << 40, &big);
  if (rc != MORI_SHMEM_ERR_HEAP_EXHAUSTED) { fprintf(stderr, "huge malloc: %d\n", rc); return 1; }
  rc = mori_shmem_putmem(&rc, p, 4, 0);
  if (rc != MORI_SHMEM_ERR_INVALID_POINTER) { fprintf(stderr, "off-heap put: %d\n", rc); return 1; }
  rc = mori_shmem_putmem(p, p, 4, 1);
  if (rc != MORI_SHMEM_ERR_PE_OUT_OF_RANGE) { fprintf(stderr, "pe 1 of 1: %d\n", rc); return 1; }
  {
    void* r = (void*)1;
    CHECK(mori_shmem_ptr_p2p(&rc, 0, 0, &r));
    if (r != NULL) { fprintf(stderr, "ptr_p2p off heap\n"); return 1; }
    CHECK(mori_shmem_ptr_p2p(p, 0, 0, &r));
    if (r != p) { fprintf(stderr, "ptr_p2p own pe\n"); return 1; }
  }
  CHECK(mori_shmem_barrier_all());
  CHECK(mori_shmem_free(q));
  CHECK(mori_shmem_free(p));
  rc = mori_shmem_free(p);
  if (rc != MORI_SHMEM_ERR_INVALID_POINTER) { fprintf(stderr, "double free: %d\n", rc); return 1; }
  CHECK(mori_shmem_heap_info(&info));
  if (info.num_allocations != 0 || info.used != 0) { fprintf(stderr, "heap not empty\n"); return 1; }
  printf("heap_size=%llu\n", (unsigned long long)info.size);
  CHECK(mori_shmem_finalize());
  if (mori_shmem_is_initialized() != 0) { fprintf(stderr, "initialized after finalize\n"); return 1; }
  printf("OK\n");
  return 0;
}
"""


def compile_c(tmp_path: Path, source: str, name: str) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    exe = tmp_path / name
    cmd = [
        cc,
        "-std=c11",
        "-Wall",
        "-Werror",
        str(src),
        *shlex.split(pkg_config("--cflags")),
        *shlex.split(pkg_config("--libs")),
        f"-Wl,-rpath,{shmem.get_library_dir()}",
        "-o",
        str(exe),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"compile failed: {' '.join(cmd)}\n{proc.stderr}"
    return exe


@pytest.mark.timeout(180)
def test_c_program_reports_the_abi_version(tmp_path: Path) -> None:
    exe = compile_c(tmp_path, ABI_PROGRAM, "abi")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    runtime_abi, version, header_abi = proc.stdout.split("\n")[:3]
    assert int(runtime_abi) == shmem.__abi_version__
    assert int(header_abi) == shmem.__abi_version__
    assert version == shmem.__version__


@pytest.mark.timeout(180)
def test_c_program_single_pe_lifetime(tmp_path: Path) -> None:
    exe = compile_c(tmp_path, INIT_PROGRAM, "init1")
    env = dict(os.environ, MORI_SHMEM_HEAP_SIZE="64M", MORI_BOOTSTRAP_TIMEOUT="10")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"rc {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert f"heap_size={64 << 20}" in proc.stdout
    assert proc.stdout.strip().endswith("OK")

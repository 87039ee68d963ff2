"""mori-ep's link layer: built against, and bound to, the one libmori_shmem.so of mori-shmem."""

from __future__ import annotations

import importlib.metadata
import os

import pytest


def test_abi_versions_agree() -> None:
    import mori.shmem
    from mori.ep import _C

    assert _C.built_abi_version() == _C.loaded_abi_version() == mori.shmem.__abi_version__


def test_bound_library_is_mori_shmem_wheel_copy() -> None:
    import mori.shmem
    from mori.ep import _C
    from mori.ep._abi_check import mapped_library_paths

    shipped = os.path.realpath(mori.shmem.get_library_path())
    assert os.path.realpath(_C.loaded_library_path()) == shipped
    assert mapped_library_paths() == {shipped}


def test_mori_ops_alias() -> None:
    import mori.ep
    import mori.ops

    assert mori.ops.__version__ == mori.ep.__version__ == importlib.metadata.version("mori-ep")


def test_mismatch_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from mori.ep._abi_check import check_abi

    monkeypatch.delenv("MORI_SKIP_ABI_CHECK", raising=False)
    with pytest.raises(ImportError, match="built against mori-shmem ABI 1, found 2"):
        check_abi(built=1, loaded=2, python_abi=2, mapped={"/x/libmori_shmem.so"})
    with pytest.raises(ImportError, match=r"exactly one libmori_shmem\.so"):
        check_abi(built=1, loaded=1, python_abi=1, mapped={"/a/libmori_shmem.so", "/b/libmori_shmem.so"})


def test_skip_env_disables_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from mori.ep._abi_check import check_abi

    monkeypatch.setenv("MORI_SKIP_ABI_CHECK", "1")
    check_abi(built=1, loaded=2, python_abi=3, mapped=set())


def test_maps_parsing(tmp_path: os.PathLike[str]) -> None:
    from mori.ep._abi_check import mapped_library_paths

    maps = os.path.join(tmp_path, "maps")
    with open(maps, "w") as f:
        f.write(
            "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /opt/a b/libmori_shmem.so\n"
            "7f0000001000-7f0000002000 r--p 00001000 08:01 1 /opt/a b/libmori_shmem.so\n"
            "7f0000002000-7f0000003000 rw-p 00000000 00:00 0\n"
            "7f0000003000-7f0000004000 r-xp 00000000 08:01 2 /usr/lib/libc.so.6\n"
        )
    assert mapped_library_paths(maps) == {os.path.realpath("/opt/a b/libmori_shmem.so")}
    assert mapped_library_paths(os.path.join(tmp_path, "missing")) is None

"""The release checks pass on the wheelhouse's wheels and catch each defect they exist for, on
copies of those wheels with exactly that defect put in; and a changed package whose release is
already tagged is refused until its version is bumped (in a scratch git repository)."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from release import check_tree
from release_checks import OLDEST_TORCH, check_audit, check_changelog, check_pins, check_wheel, meson_version
from wheelhouse import wheel_path

Edit = Callable[[str, bytes], bytes | None]


def _copy_wheel(wheel: Path, out_dir: Path, edit: Edit, add: dict[str, bytes] | None = None) -> Path:
    """A copy of ``wheel`` (same file name) whose entries went through ``edit`` (None drops one)."""
    out_dir.mkdir(exist_ok=True)
    copy = out_dir / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(copy, "w") as dst:
        for name in src.namelist():
            data = edit(name, src.read(name))
            if data is not None:
                dst.writestr(name, data)
        for name, data in (add or {}).items():
            dst.writestr(name, data)
    return copy


def _keep(name: str, data: bytes) -> bytes:
    return data


@pytest.mark.parametrize("pkg", ["root", "shmem", "ep", "cco", "ir", "viz", "io", "umbp"])
def test_wheelhouse_wheels_pass(pkg: str) -> None:
    assert check_wheel(wheel_path(pkg), pkg, meson_version(pkg), repaired=False) == []
    assert check_changelog(pkg, meson_version(pkg)) == []


def test_a_version_other_than_meson_builds_is_reported(tmp_path: Path) -> None:
    version = meson_version("io")

    def bump(name: str, data: bytes) -> bytes:
        if name.endswith(".dist-info/METADATA"):
            return data.replace(f"\nVersion: {version}\n".encode(), b"\nVersion: 9.9.9\n")
        return data

    problems = check_wheel(_copy_wheel(wheel_path("io"), tmp_path, bump), "io", version, repaired=False)
    assert any("Version is '9.9.9'" in p and version in p for p in problems), problems


def test_a_torch_requirement_below_the_tested_oldest_is_reported(tmp_path: Path) -> None:
    def loosen(name: str, data: bytes) -> bytes:
        if name.endswith(".dist-info/METADATA"):
            return data.replace(f"torch>={OLDEST_TORCH}".encode(), b"torch>=2.4")
        return data

    version = meson_version("ep")
    assert check_wheel(wheel_path("ep"), "ep", version, repaired=False) == []
    problems = check_wheel(_copy_wheel(wheel_path("ep"), tmp_path, loosen), "ep", version, repaired=False)
    assert any("torch>=2.4" in p and OLDEST_TORCH in p for p in problems), problems


def test_a_vendored_libmori_shmem_in_a_dependent_is_reported(tmp_path: Path) -> None:
    vendored = {"mori_ep.libs/libmori_shmem.so": b"\x7fELF"}
    problems = check_wheel(
        _copy_wheel(wheel_path("ep"), tmp_path, _keep, vendored), "ep", meson_version("ep"), repaired=False
    )
    assert any("libmori_shmem.so" in p and "never vendored" in p for p in problems), problems
    assert any("grafted" in p for p in problems), problems


def test_mori_shmems_own_library_is_required_in_its_wheel(tmp_path: Path) -> None:
    def drop_library(name: str, data: bytes) -> bytes | None:
        return None if name.endswith("/libmori_shmem.so") else data

    copy = _copy_wheel(wheel_path("shmem"), tmp_path, drop_library)
    problems = check_wheel(copy, "shmem", meson_version("shmem"), repaired=False)
    assert any("libmori_shmem.so" in p for p in problems), problems


def test_a_missing_license_file_is_reported(tmp_path: Path) -> None:
    def drop_license(name: str, data: bytes) -> bytes | None:
        return None if name.endswith(".dist-info/licenses/LICENSE") else data

    problems = check_wheel(
        _copy_wheel(wheel_path("viz"), tmp_path, drop_license), "viz", meson_version("viz"), repaired=False
    )
    assert any("licenses/LICENSE" in p for p in problems), problems


def test_a_native_wheel_without_manylinux_tag_is_not_a_release() -> None:
    # The wheelhouse's development wheels are linux_x86_64: fine for tests, not for an index.
    problems = check_wheel(wheel_path("io"), "io", meson_version("io"), repaired=True)
    assert any("not manylinux" in p for p in problems), problems


def test_a_version_without_changelog_section_is_reported() -> None:
    assert check_changelog("io", "9.9.9") == [
        "mori-io/CHANGELOG.md has no '## [9.9.9]' section for the version in meson.build"
    ]


def _git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=release test", "-c", "user.email=release@test.invalid"]
    subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True)


def test_a_tagged_package_that_changed_needs_a_version_bump(tmp_path: Path) -> None:
    source = tmp_path / "packages" / "mori-io" / "meson.build"
    source.parent.mkdir(parents=True)
    source.write_text("project('mori-io', version: '0.1.0')\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "mori-io 0.1.0")
    _git(tmp_path, "tag", "mori-io/v0.1.0")
    assert check_tree("io", "0.1.0", tmp_path) == []  # rebuilding the tagged release is fine

    source.write_text("project('mori-io', version: '0.1.0')\n# a change\n")
    assert any("uncommitted changes" in p for p in check_tree("io", "0.1.0", tmp_path))

    _git(tmp_path, "commit", "-q", "-am", "a change without a version bump")
    assert any("changed since tag mori-io/v0.1.0" in p for p in check_tree("io", "0.1.0", tmp_path))
    assert check_tree("io", "0.1.1", tmp_path) == []  # once bumped, no tag of that version exists yet


def _audit(wheel: Path) -> dict[str, Any]:
    shown = subprocess.run(["auditwheel", "show", "--json", str(wheel)], capture_output=True, text=True, check=True)
    report: dict[str, Any] = json.loads(shown.stdout)
    return report


def test_audit_accepts_the_policy_auditwheel_gives_and_refuses_another_name(tmp_path: Path) -> None:
    wheel = wheel_path("io")
    report = _audit(wheel)
    assert any("does not carry" in p for p in check_audit(report, wheel.name))  # linux_x86_64
    renamed = tmp_path / wheel.name.replace("-linux_x86_64.whl", f"-{report['sym_tag']}.whl")
    shutil.copy(wheel, renamed)
    assert check_audit(_audit(renamed), renamed.name) == []


def test_audit_tolerates_only_the_excluded_libmori_shmem_in_a_dependent() -> None:
    report = _audit(wheel_path("ep"))
    assert set(report["external_libs"]) == {"libmori_shmem.so"}
    name = f"mori_ep-{meson_version('ep')}-cp311-cp311-{report['sym_tag']}.whl"
    assert check_audit(report, name) == []
    report["external_libs"] = {"libmori_shmem.so": None, "libfoo.so.1": None}
    assert check_audit(report, name) == [f"{name}: needs libraries outside the manylinux policy: ['libfoo.so.1']"]


@pytest.mark.parametrize("pkg", ["root", "shmem", "ep", "cco", "ir", "viz", "io", "umbp"])
def test_the_pins_between_packages_name_the_current_series(pkg: str) -> None:
    assert check_pins(pkg) == []


def test_a_pin_on_another_mori_shmem_series_is_reported() -> None:
    major, minor = (int(n) for n in meson_version("shmem").split(".")[:2])
    stale = f'requires = ["mori-shmem=={major}.{minor + 1}.*"]\ndependencies = ["mori>=0.0.1,<9"]\n'
    problems = check_pins("ep", stale)
    assert len(problems) == 2, problems
    assert f"pins 'mori-shmem=={major}.{minor + 1}.*'" in problems[0]
    assert f"pin 'mori-shmem=={major}.{minor}.*'" in problems[0]
    assert "pins 'mori>=0.0.1,<9'" in problems[1]


def test_a_root_pin_may_floor_at_a_patch_of_the_current_series_but_not_past_it() -> None:
    version = meson_version("root")
    major, minor, patch = (int(n) for n in version.split("."))
    ok = f'dependencies = ["mori>={major}.{minor}.{patch},<{major}.{minor + 1}"]\n'
    assert check_pins("io", ok) == []
    ahead = f'dependencies = ["mori>={major}.{minor}.{patch + 1},<{major}.{minor + 1}"]\n'
    (problem,) = check_pins("io", ahead)
    assert f"pins 'mori>={major}.{minor}.{patch + 1},<{major}.{minor + 1}'" in problem
    wide = f'dependencies = ["mori>={major}.{minor}.0,<{major + 1}"]\n'
    assert len(check_pins("io", wide)) == 1

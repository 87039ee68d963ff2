"""NOTE [linked installs]: a venv gets hard links to each stored distribution it lacks in any
version, folders two distributions share are merged without replacing the venv's files, and
console scripts stay out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import linked_installs

REQUIREMENT = linked_installs.LINKED[0]


def _distribution(root: Path, name: str, version: str, files: dict[str, str]) -> None:
    """Writes ``files`` under ``root`` and a dist-info whose RECORD lists them."""
    dist_info = root / f"{name}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    record = [f"{rel},," for rel in files] + [f"{dist_info.name}/RECORD,,"]
    (dist_info / "RECORD").write_text("\n".join(record) + "\n")


class _Session:
    def __init__(self, site: Path) -> None:
        self.site = site
        self.logged: list[str] = []

    def run(self, *args: str, silent: bool = False) -> Any:
        assert args[:2] == ("python", "-c"), f"the store is complete: nothing but the probe runs ({args})"
        return f"{self.site}\n3.11\n"

    def log(self, *args: Any) -> None:
        self.logged.append(" ".join(map(str, args)))


def test_a_venv_gets_links_to_what_it_lacks_and_keeps_its_own(tmp_path: Path) -> None:
    name, version = REQUIREMENT.split("==")
    store = tmp_path / "store" / f"py3.11-{name}-{version}"
    _distribution(
        store,
        "alpha",
        "1.0",
        {"alpha/__init__.py": "A = 1\n", "single.py": "S = 2\n", "__pycache__/single.cpython-311.pyc": "pyc"},
    )
    _distribution(store, "beta", "2.0", {"beta/__init__.py": "NEW = 1\n", "bin/beta-tool": "#!/elsewhere/python\n"})
    (store / ".complete").touch()
    site = tmp_path / "site"
    _distribution(site, "beta", "1.0", {"beta/__init__.py": "OLD = 1\n"})
    (site / "__pycache__").mkdir()
    (site / "__pycache__" / "other.cpython-311.pyc").write_text("the venv's own")
    session = _Session(site)

    linked_installs.link_into(session, ["pytest", REQUIREMENT], tmp_path / "store")

    for rel in ("alpha/__init__.py", "single.py", "__pycache__/single.cpython-311.pyc", "alpha-1.0.dist-info/RECORD"):
        assert os.stat(site / rel).st_ino == os.stat(store / rel).st_ino, rel  # a link, not a copy
    assert (site / "__pycache__" / "other.cpython-311.pyc").read_text() == "the venv's own"
    assert (site / "beta" / "__init__.py").read_text() == "OLD = 1\n"  # beta 1.0 stays, 2.0 is not linked
    assert not (site / "beta-2.0.dist-info").exists()
    assert not (site / "bin").exists()
    assert session.logged == [f"{REQUIREMENT}: linked alpha-1.0 from {store}"]

    linked_installs.link_into(session, [REQUIREMENT], tmp_path / "store")  # again: all there, nothing said
    assert len(session.logged) == 1


def test_requirements_not_linked_leave_the_venv_alone(tmp_path: Path) -> None:
    session = _Session(tmp_path / "site")
    linked_installs.link_into(session, ["pytest", "torch==0.0.1"], tmp_path / "store")
    assert not (tmp_path / "store").exists() and session.logged == []

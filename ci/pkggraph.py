"""The package graph (the PKGS table of noxfile.py) and the orders derived from it.

The table lives in noxfile.py only; scripts that must not need nox installed read it from there
with ``ast`` instead of importing the noxfile.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

Graph = Mapping[str, Sequence[str]]


def load_pkgs(noxfile: Path = ROOT / "noxfile.py") -> dict[str, list[str]]:
    """Read the literal ``PKGS = {...}`` assignment from the noxfile without executing it."""
    for node in ast.parse(noxfile.read_text()).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "PKGS" for t in targets):
            table = ast.literal_eval(value)
            return {str(k): [str(d) for d in v] for k, v in table.items()}
    raise LookupError(f"no literal PKGS table in {noxfile}")


def topo_order(pkgs: Graph) -> list[str]:
    """Packages with every dependency before its dependents (ties keep the table's order)."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(pkg: str) -> None:
        if pkg in order:
            return
        if pkg in visiting:
            raise ValueError(f"dependency cycle through {pkg!r}")
        visiting.add(pkg)
        for dep in pkgs[pkg]:
            visit(dep)
        visiting.discard(pkg)
        order.append(pkg)

    for pkg in pkgs:
        visit(pkg)
    return order


def closure(pkgs: Graph, pkg: str) -> list[str]:
    """``pkg``'s transitive dependencies, dependencies first, excluding ``pkg`` itself."""
    needed: set[str] = set()
    stack = list(pkgs[pkg])
    while stack:
        dep = stack.pop()
        if dep not in needed:
            needed.add(dep)
            stack.extend(pkgs[dep])
    return [p for p in topo_order(pkgs) if p in needed]


def dependents(pkgs: Graph, changed: set[str]) -> list[str]:
    """``changed`` plus every package that depends on one of them, transitively, in build order."""
    hit = set(changed)
    for pkg in topo_order(pkgs):
        if any(dep in hit for dep in pkgs[pkg]):
            hit.add(pkg)
    return [p for p in topo_order(pkgs) if p in hit]

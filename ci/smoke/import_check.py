"""Release install check: ``import_check.py <distribution> <module> <version> <venv>``. The module
imports from the venv (not from a source tree), and both the installed metadata and ``__version__``
report the version written in meson.build."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

if __name__ == "__main__":
    dist, module_name, version, prefix = sys.argv[1:5]
    module = importlib.import_module(module_name)
    found = (importlib.metadata.version(dist), getattr(module, "__version__", None))
    if found != (version, version):
        raise SystemExit(f"{dist}: metadata and __version__ say {found}, meson.build {version}")
    if module.__file__ is not None and not module.__file__.startswith(prefix):
        raise SystemExit(f"{module_name} imported from {module.__file__}, not from {prefix}")
    print(dist, version, "imports on", sys.version.split()[0])

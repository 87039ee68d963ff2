# SPDX-License-Identifier: MIT
"""``import mori`` then ``mori.<sub>``: MORI's lazy attribute access, with every wheel installed."""

from __future__ import annotations

import importlib.metadata
import json

import mori
from mori._subpackages import SUBPACKAGES


def test_import_mori_imports_no_subpackage(fresh_python):
    done = fresh_python(
        "import json, sys, mori; print(json.dumps(sorted(m for m in sys.modules if m.startswith('mori.'))))"
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert not [m for m in loaded if m.split(".")[1] in SUBPACKAGES], loaded


def test_attribute_access_imports_the_subpackage_as_clients_do(fresh_python):
    # vLLM's MoriAll2AllManager and MORI's test harness: `import mori` then `mori.shmem.…`, `mori.ops.…`.
    code = (
        "import mori\n"
        "assert mori.shmem.__name__ == 'mori.shmem'\n"
        "assert mori.ops.EpDispatchCombineOp is mori.ep.EpDispatchCombineOp\n"
        "assert mori.io.IOEngine.__module__.startswith('mori.io')\n"
        "assert mori.umbp.UMBPClient is not None\n"
        "assert mori.kernel_profiler.export_to_perfetto is mori.viz.export_to_perfetto\n"
        "assert mori.cco.__name__ == 'mori.cco' and mori.ir.__name__ == 'mori.ir'\n"
        "import mori.shmem.jit\n"
        "assert mori.jit is mori.shmem.jit\n"
        "print(mori.__version__)\n"
    )
    done = fresh_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == importlib.metadata.version("mori")


def test_version_is_the_distributions():
    assert mori.__version__ == importlib.metadata.version("mori")


def test_unknown_attribute_is_an_attribute_error():
    try:
        mori.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("mori.no_such_thing resolved")


def test_a_name_the_installed_wheel_lacks_says_so(fresh_python):
    # mori.ccl is MORI's CCL; mori-cco is installed here but provides mori.cco, not mori.ccl.
    done = fresh_python("import mori\ntry:\n    mori.ccl\nexcept ImportError as e:\n    print(e)\n")
    assert done.returncode == 0, done.stderr
    assert "mori-cco" in done.stdout and "mori.cco" in done.stdout, done.stdout


def test_dir_lists_every_subpackage():
    assert set(SUBPACKAGES) <= set(dir(mori))

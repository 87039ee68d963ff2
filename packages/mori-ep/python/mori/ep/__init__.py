"""mori.ep: expert-parallel dispatch/combine on the mori-shmem symmetric heap (MORI's ``mori.ops``).

Not built yet beyond its link layer: importing it proves that mori-ep's native module is bound to
the one libmori_shmem.so shipped by mori-shmem, with a matching ABI. The EP API lands later.
"""

from __future__ import annotations

# Order matters: mori.shmem (sorted first) preloads its libmori_shmem.so with RTLD_GLOBAL, so
# that _C's DT_NEEDED entry binds to that copy instead of any other one on the search path.
import mori.shmem as _shmem
from mori.ep import _C
from mori.ep._abi_check import check_abi, mapped_library_paths

__version__ = "0.1.0"

#: The public EP API; empty until it lands (mori.ops star-imports it).
__all__: list[str] = []

check_abi(
    built=_C.built_abi_version(),
    loaded=_C.loaded_abi_version(),
    python_abi=_shmem.__abi_version__,
    mapped=mapped_library_paths(),
)

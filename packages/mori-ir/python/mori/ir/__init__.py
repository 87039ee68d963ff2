# SPDX-License-Identifier: MIT
"""mori.ir: mori-shmem's device functions as LLVM bitcode, for Triton and other LLVM-based kernels.

The device library ``libmori_shmem_device.bc`` exports every entry of
:data:`MORI_DEVICE_FUNCTIONS` as ``mori_shmem_<name>`` with flat C types. Link it into a module,
load the module, call ``mori.shmem.shmem_module_init(module)``, launch::

    import mori.ir.triton as mi            # Triton frontend
    mi.install_hook()                      # shmem_module_init after every Triton compile/load
    kernel[grid](..., extern_libs=mi.get_extern_libs())

See docs/user-guide/ir.md.
"""

from __future__ import annotations

import logging

import mori.shmem as _shmem
from mori._version import distribution_version
from mori.ir._abi_check import built_abi_version, check_abi
from mori.ir.bitcode import build_bitcode, find_bitcode, get_bitcode_path
from mori.ir.errors import BitcodeBuildError, BitcodeNotFoundError, IrConfigError, IrError
from mori.ir.functions import (
    DEVICE_FUNCTIONS,
    MORI_DEVICE_FUNCTIONS,
    SIGNAL_ADD,
    SIGNAL_SET,
    DeviceFunction,
    llvm_declarations,
)

logging.getLogger("mori.ir").addHandler(logging.NullHandler())

check_abi(built_abi_version(), _shmem.__abi_version__)

__version__ = distribution_version("mori-ir")

__all__ = [
    "DEVICE_FUNCTIONS",
    "MORI_DEVICE_FUNCTIONS",
    "SIGNAL_ADD",
    "SIGNAL_SET",
    "BitcodeBuildError",
    "BitcodeNotFoundError",
    "DeviceFunction",
    "IrConfigError",
    "IrError",
    "build_bitcode",
    "find_bitcode",
    "get_bitcode_path",
    "llvm_declarations",
]

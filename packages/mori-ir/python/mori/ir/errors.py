# SPDX-License-Identifier: MIT
"""mori-ir's exceptions."""

from __future__ import annotations

from mori import errors as _root  # module, not names: the class list here stays the package's own

__all__ = ["BitcodeBuildError", "BitcodeNotFoundError", "IrConfigError", "IrError"]


class IrError(_root.MoriError, RuntimeError):
    """Base of mori-ir's errors."""


class IrConfigError(IrError, _root.SettingError):
    """A MORI_IR_* / MORI_SHMEM_BC environment variable has a bad value."""


class BitcodeNotFoundError(IrError, FileNotFoundError):
    """No device bitcode is shipped, cached or buildable here (the message says how to get one)."""


class BitcodeBuildError(IrError):
    """clang failed to build the device bitcode; the message carries its output."""

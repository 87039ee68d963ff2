# SPDX-License-Identifier: MIT
"""mori-viz's exceptions: each names the argument or field, the value and the limit it broke."""

from __future__ import annotations

from mori import errors as _root  # module, not names: the class list here stays the package's own


class VizError(_root.MoriError):
    """Base class of every mori.viz error."""


class InvalidArgumentError(VizError, ValueError):
    """An argument is out of range or of the wrong kind."""


class ConfigError(VizError, _root.SettingError):
    """A MORI_VIZ_* / MORI_ENABLE_PROFILER environment variable holds a value that cannot be used."""


class TraceFormatError(VizError, ValueError):
    """A trace buffer does not follow the layout of mori_viz/layout.h (wrong magic, size, version ...)."""


class SlotTableError(VizError, ValueError):
    """A slot table is malformed, or does not match the table a traced kernel was built with."""


class PlotUnavailableError(VizError, ImportError):
    """Drawing a PNG needs matplotlib, which is not installed (``pip install mori-viz[plot]``)."""

"""mori.viz: Kernel trace points and Perfetto export (MORI's ``mori.kernel_profiler``).

Not built yet: this distribution is a skeleton that reserves the import path. Its API lands in a
later release.
"""

__version__ = "0.1.0"

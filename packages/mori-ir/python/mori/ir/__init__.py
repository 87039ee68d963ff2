"""mori.ir: Device-side IR and JIT bindings for writing shmem kernels from Python.

Not built yet: this distribution is a skeleton that reserves the import path. Its API lands in a
later release.
"""

__version__ = "0.1.0"

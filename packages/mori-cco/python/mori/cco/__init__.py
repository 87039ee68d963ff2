"""mori.cco: Collective communication over the mori-shmem symmetric heap.

Not built yet: this distribution is a skeleton that reserves the import path. Its API lands in a
later release.
"""

__version__ = "0.1.0"

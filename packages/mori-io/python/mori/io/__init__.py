"""mori.io: Point-to-point transfer engine (MORI's ``mori.io``: ``IOEngine`` and friends).

Not built yet: this distribution is a skeleton that reserves the import path. Its API lands in a
later release.
"""

__version__ = "0.1.0"

"""mori.umbp: Tiered KV-block pool (master and pool clients) whose data plane is mori-io.

Not built yet: this distribution is a skeleton that reserves the import path. Its API lands in a
later release.
"""

__version__ = "0.1.0"

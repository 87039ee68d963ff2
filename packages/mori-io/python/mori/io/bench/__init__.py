# SPDX-License-Identifier: MIT
"""``mori-io-bench``: bandwidth and latency of mori.io's TCP backend between two processes,
next to a plain loopback socket copy (the ceiling) and, where installed, Mooncake's TCP
transport, all measured in the same run. Flags follow nixlbench where they mean the same."""

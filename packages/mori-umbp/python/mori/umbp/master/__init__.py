# SPDX-License-Identifier: MIT
"""The UMBP master: node registry, block index projection, routing, leases and eviction."""

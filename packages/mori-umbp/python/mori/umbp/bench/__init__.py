# SPDX-License-Identifier: MIT
"""``mori-umbp-bench``: replays a KV-block access trace against a pool and reports hit rate,
throughput and latency percentiles as JSON (and a PNG when matplotlib is installed)."""

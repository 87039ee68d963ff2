# SPDX-License-Identifier: MIT
"""Traces: each request is the ordered list of block keys of one prompt (a radix-tree chain, as
SGLang's HiCache hashes pages), read as a prefix and completed with puts.

A trace file is JSON Lines, one request per line: ``{"keys": ["<hash>", ...]}``. ``synthetic``
makes multi-turn sessions: a session's next turn repeats its whole history and adds new blocks,
and sessions are picked with a Zipf-like skew, so hits come from real prefix reuse.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from mori.umbp.errors import InvalidArgumentError


def load(path: Path) -> list[list[str]]:
    requests = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            keys = json.loads(line)["keys"]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError(f'{path}:{n}: expected {{"keys": [...]}}: {exc}') from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InvalidArgumentError(f"{path}:{n}: keys must be a list of strings")
        requests.append(keys)
    return requests


def synthetic(requests: int, sessions: int, blocks_per_turn: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(sessions)]
    history: list[list[str]] = [[] for _ in range(sessions)]
    out = []
    for _ in range(requests):
        s = rng.choices(range(sessions), weights)[0]
        for _ in range(blocks_per_turn):
            parent = history[s][-1] if history[s] else f"session-{seed}-{s}"
            history[s].append(hashlib.sha256(f"{parent}/{len(history[s])}".encode()).hexdigest())
        out.append(list(history[s]))
    return out


def expected_hits(requests: list[list[str]]) -> list[int]:
    """Per request, the prefix length found when nothing is ever evicted: the reference the
    replay's measured hits must equal when the pool has room for every block."""
    stored: set[str] = set()
    hits = []
    for keys in requests:
        n = 0
        while n < len(keys) and keys[n] in stored:
            n += 1
        hits.append(n)
        stored.update(keys)
    return hits

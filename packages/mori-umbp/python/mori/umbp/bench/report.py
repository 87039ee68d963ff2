# SPDX-License-Identifier: MIT
"""The benchmark's JSON summary and optional PNG."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from mori.bench_report import write_json
from mori.umbp.bench.runner import Result

log = logging.getLogger(__name__)


def _pct(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    ms = np.asarray(samples) * 1000
    return {f"p{q}": float(np.percentile(ms, q)) for q in (50, 90, 99)} | {"mean": float(ms.mean()), "n": len(ms)}


def summary(res: Result, config: dict[str, Any]) -> dict[str, Any]:
    moved = (res.blocks - res.put_failed) * res.block_bytes
    return {
        "config": config,
        "requests": res.requests,
        "blocks": res.blocks,
        "hit_blocks": res.hit_blocks,
        "hit_rate": res.hit_blocks / res.blocks if res.blocks else 0.0,
        "put_failed": res.put_failed,
        "lost_after_probe": res.lost_after_probe,
        "stored_at_end": res.stored_at_end,
        "corrupt_blocks": res.corrupt,
        "wall_s": res.wall_s,
        "requests_per_s": res.requests / res.wall_s if res.wall_s else 0.0,
        "MiB_per_s": moved / res.wall_s / (1 << 20) if res.wall_s else 0.0,
        "latency_ms": {"request": _pct(res.request_s), "batch_get": _pct(res.get_s), "batch_put": _pct(res.put_s)},
        "hits_per_request": res.hits_per_request,
    }


def write(out: dict[str, Any], res: Result, json_path: Path, png_path: Path | None) -> Path | None:
    write_json(json_path, out)
    if png_path is None:
        return None
    try:
        import matplotlib  # type: ignore[import-not-found]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    except ImportError:
        log.warning("matplotlib is not installed: no PNG (pip install matplotlib)")
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, samples in (("request", res.request_s), ("batch_get", res.get_s), ("batch_put", res.put_s)):
        if samples:
            a.plot(np.sort(np.asarray(samples) * 1000), np.linspace(0, 1, len(samples)), label=name)
    a.set(xlabel="latency (ms)", ylabel="CDF", title="latency", xscale="log")
    a.legend()
    hits = np.cumsum(res.hits_per_request) / np.maximum(1, np.cumsum([1] * len(res.hits_per_request)))
    b.plot(hits)
    b.set(xlabel="request", ylabel="mean prefix hits (blocks)", title=f"hit rate {out['hit_rate']:.1%}")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path

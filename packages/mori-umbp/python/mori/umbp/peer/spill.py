# SPDX-License-Identifier: MIT
"""The copy pipeline of "spill by copy after commit" (MORI's SsdCopyPipeline, one worker as in
PoolClient): each committed DRAM block is queued here and copied to the SSD tier in the
background, so a put never waits for the disk.

One worker thread runs the copies in commit order; a single writer also means two spills never
race on the SSD tier's index and its events reach the master in the order they happened.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class SpillWorker:
    def __init__(self, copy_one: Callable[[str], None], name: str = "umbp-ssd-spill") -> None:
        self._copy_one = copy_one
        self._queue: queue.Queue[str] = queue.Queue()
        self._done = threading.Condition()
        self._outstanding = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, key: str) -> None:
        with self._done:
            self._outstanding += 1
        self._queue.put(key)

    def drain(self, timeout_s: float) -> bool:
        """True once every submitted copy finished (landed or was given up); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._done:
            while self._outstanding:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
            return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                key = self._queue.get(timeout=0.2)  # wakes to notice stop()
            except queue.Empty:
                continue
            try:
                self._copy_one(key)
            except Exception:  # one bad block must not stop the pipeline
                log.exception("spilling %r to the SSD tier failed", key)
            finally:
                with self._done:
                    self._outstanding -= 1
                    self._done.notify_all()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

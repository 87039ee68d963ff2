# SPDX-License-Identifier: MIT
"""The peer's heartbeat loop: ships event bundles and capacities, heals gaps and master restarts.

Every interval (or sooner: a commit's flush, an eviction's kick) it sends
the unacknowledged bundles. ``request_full_sync`` or an EXPIRED answer (the master restarted
empty, or reaped this node) makes it register again if needed and reship its whole snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from mori.umbp.client.master_client import UMBPMasterClient
from mori.umbp.errors import ClosedError, MasterUnavailableError
from mori.umbp.peer.store import PeerStore

log = logging.getLogger(__name__)


class HeartbeatLoop:
    def __init__(
        self,
        master: UMBPMasterClient,
        store: PeerStore,
        register: Callable[[], int],
        interval_s: float,
        on_view: Callable[[Any], None] | None = None,
    ) -> None:
        self.master, self.store, self.register = master, store, register
        self.on_view = on_view  # takes the PoolView the periodic beats ask for (NOTE [direct put])
        self.interval_s = interval_s
        self._need_full_sync = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one heartbeat at a time: bundles must reach the master in order
        self._thread = threading.Thread(target=self._run, name="umbp-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        self._wake.set()

    def request_full_sync(self) -> None:
        """The next heartbeat reships the whole snapshot (a restarted peer's recovered SSD blocks)."""
        with self._lock:
            self._need_full_sync = True

    def flush(self, timeout_s: float, keys: Sequence[str] = ()) -> bool:
        """Runs a heartbeat now in the caller's thread; True once the master acknowledged. With
        ``keys`` (commits of the caller), no heartbeat is sent if the master already answered for
        all of them, in a heartbeat another committer sent while this one waited for it (a group
        commit: concurrent puts to one owner share heartbeats)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                if self.beat(keys=keys):
                    return True
            except MasterUnavailableError as exc:
                log.warning("flush: %s", exc)
                time.sleep(0.05)
        return False

    def beat(self, want_view: bool = False, keys: Sequence[str] = ()) -> bool:
        """One heartbeat (a full sync when due); True when the master is current. ``want_view``:
        the master answers with its pool view too, handed to ``on_view``. ``keys``: none is sent,
        and True returned, when the master answered for all of them already (see ``flush``)."""
        with self._lock:
            if keys and not self._need_full_sync and self.store.answered(keys):
                return True
            self.store.expire_slots()
            caps = self.store.capacities()
            # Commits made before this beat are in the bundles (or snapshot) it ships.
            due = self.store.unpublished()
            if self._need_full_sync:
                baseline, snapshot = self.store.full_sync()
                res = self.master.heartbeat(
                    [(baseline, snapshot)], caps, is_full_sync=True, baseline=baseline, want_pool_view=want_view
                )
            else:
                bundles, accessed = self.store.events.bundles(), self.store.take_accessed()
                res = self.master.heartbeat(bundles, caps, accessed=accessed, want_pool_view=want_view)
            if res.status != 0:  # EXPIRED: the master does not know this node
                log.warning(
                    "master %s does not know node %r: registering again",
                    self.master.master_address,
                    self.master.node_id,
                )
                self.interval_s = self.register() / 1000
                self._need_full_sync = True
                return False
            if res.request_full_sync:
                self._need_full_sync = True
                return False
            self._need_full_sync = False
            self.store.events.ack(int(res.acked_seq))
            if res.refused_keys:  # NOTE [direct put]: decided before the rest is published
                self.store.refuse(list(res.refused_keys))
            self.store.publish(due)
        if want_view and self.on_view is not None and res.HasField("pool_view"):
            self.on_view(res.pool_view)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                if not self.beat(want_view=True):
                    self.beat(want_view=True)  # heal (re-register / full sync) without waiting an interval
            except MasterUnavailableError as exc:
                log.warning("heartbeat: %s", exc)
            except ClosedError:
                return  # the client was dropped; its close() stops this loop too

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)

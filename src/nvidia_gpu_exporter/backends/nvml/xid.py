"""The XID watcher: a thread that counts XID critical-error events for the whole life of the process.

XIDs are one-shot driver events (nothing can be replayed later), so the watcher runs beside collections,
keeps counting while they fail, and keeps its counts across NVML re-initializations. It waits in short
slices so it can notice shutdown and re-init; when registration fails it retries with exponential backoff
and re-initializes NVML itself, since a lost driver session is the usual reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from nvidia_gpu_exporter.backends.nvml.api import (
    NOT_SUPPORTED,
    TIMEOUT,
    Failure,
    call,
    handle_key,
    read_string,
    return_name,
)
from nvidia_gpu_exporter.backends.nvml.session import NvmlSession
from nvidia_gpu_exporter.model.snapshot import XidRecord

log = logging.getLogger(__name__)

XID_CRITICAL_ERROR_EVENT = 0x8
UNKNOWN_UUID = "unknown"
MAX_DEVICES = 1024  # a garbage device count must not keep registration looping


class XidWatcher:
    """Registers every GPU for XID events and counts them per (GPU uuid, XID code)."""

    def __init__(
        self,
        session: NvmlSession,
        *,
        wait_milliseconds: int = 1000,
        min_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 30.0,
        reinit_timeout_seconds: float = 5.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.session = session
        self.wait_milliseconds = wait_milliseconds
        self.min_backoff_seconds = min_backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.reinit_timeout_seconds = reinit_timeout_seconds
        self.wall_clock = wall_clock
        self._counts: dict[tuple[str, int], tuple[int, float]] = {}
        self._counts_lock = threading.Lock()
        self._stop = threading.Event()
        self._event_set: Any = None
        self._uuids: dict[int, str] = {}
        self._generation = -1
        self.registrations = 0  # successful registrations, for tests and logs
        self._thread = threading.Thread(target=self._run, name="nvml-xid-watcher", daemon=True)
        session.on_teardown(self._release)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def records(self) -> tuple[XidRecord, ...]:
        with self._counts_lock:
            items = sorted(self._counts.items())
        return tuple(XidRecord(uuid, xid, count, last) for (uuid, xid), (count, last) in items)

    def record(self, uuid: str, xid: int) -> None:
        received = self.wall_clock()
        with self._counts_lock:
            count, _ = self._counts.get((uuid, xid), (0, 0.0))
            self._counts[(uuid, xid)] = (count + 1, received)
        log.warning("XID error", extra={"uuid": uuid, "xid": xid})

    # -- the thread ---------------------------------------------------------------------------------------

    def _release(self) -> None:
        """Free the event set (session teardown, with the write lock held, or our own retry path)."""
        if self._event_set is not None:
            call("nvmlEventSetFree", self._event_set)
            self._event_set = None

    def _run(self) -> None:
        backoff = self.min_backoff_seconds
        while not self._stop.is_set():
            try:
                failure = self._step()
            except Exception:  # the watcher must outlive anything NVML does
                log.exception("XID watcher step failed")
                failure = Failure(-1)
            if failure is None:
                backoff = self.min_backoff_seconds
                continue
            if failure.lifecycle:
                self.session.mark_lost()
            with self.session.lock.reading():
                self._release()
            log.warning(
                "XID watcher cannot listen for events, retrying",
                extra={"code": return_name(failure.code), "backoff_seconds": backoff},
            )
            if self._stop.wait(backoff):
                break
            backoff = min(backoff * 2, self.max_backoff_seconds)
            if self.session.needs_reinit or not self.session.initialized:
                reinit = self.session.reinit(self.session.generation, self.reinit_timeout_seconds)
                if reinit is not None:
                    log.warning("XID watcher: NVML re-initialization failed", extra={"code": return_name(reinit.code)})

    def _step(self) -> Failure | None:
        """One registration or one bounded wait, under the session's read lock."""
        with self.session.lock.reading():
            if self.session.needs_reinit or not self.session.initialized:
                return Failure(-1)
            if self._event_set is None or self._generation != self.session.generation:
                self._event_set = None  # a re-init freed it
                return self._register()
            return self._wait_once()

    def _register(self) -> Failure | None:
        event_set = call("nvmlEventSetCreate")
        if isinstance(event_set, Failure):
            return event_set
        self._event_set = event_set
        count = call("nvmlDeviceGetCount")
        if isinstance(count, Failure):
            return count
        uuids: dict[int, str] = {}
        for index in range(min(int(count), MAX_DEVICES)):
            handle = call("nvmlDeviceGetHandleByIndex", index)
            if isinstance(handle, Failure):
                if handle.lifecycle:
                    return handle
                continue
            uuid = read_string("nvmlDeviceGetUUID", 96, handle)
            registered = call("nvmlDeviceRegisterEvents", handle, XID_CRITICAL_ERROR_EVENT, event_set)
            if isinstance(registered, Failure):
                if registered.lifecycle:
                    return registered
                if registered.code != NOT_SUPPORTED:
                    log.warning(
                        "cannot watch a GPU for XID events",
                        extra={"index": index, "code": return_name(registered.code)},
                    )
                continue
            uuids[handle_key(handle)] = uuid if isinstance(uuid, str) else UNKNOWN_UUID
        self._uuids = uuids
        self._generation = self.session.generation
        self.registrations += 1
        log.debug("XID watcher registered", extra={"gpus": len(uuids)})
        return None

    def _wait_once(self) -> Failure | None:
        data = call("nvmlEventSetWait", self._event_set, self.wait_milliseconds)
        if isinstance(data, Failure):
            return None if data.code == TIMEOUT else data
        if int(data.eventType) & XID_CRITICAL_ERROR_EVENT:
            self.record(self._uuids.get(handle_key(data.device), UNKNOWN_UUID), int(data.eventData))
        return None

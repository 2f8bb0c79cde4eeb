"""The NVML session shared by the collection thread and the XID watcher: init, teardown and re-init.

NVML handles, event sets and GPM samples die with ``nvmlShutdown``, and shutting down while another thread
is inside an NVML call is a known use-after-free. So every NVML user holds the session's read side while
it calls, and (re)initialization takes the write side. Each successful init bumps ``generation``; a user
that sees a new generation drops what it held (teardown already freed it) and starts over.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from nvidia_gpu_exporter.backends.nvml.api import Failure, call, return_name

log = logging.getLogger(__name__)


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds back new readers so re-init cannot starve."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with self._condition:
            while self._writer or self._writers_waiting:
                self._condition.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._condition:
                self._readers -= 1
                if not self._readers:
                    self._condition.notify_all()

    @contextlib.contextmanager
    def writing(self, timeout: float | None = None) -> Iterator[bool]:
        """Yields whether the lock was taken (False after ``timeout`` seconds of waiting)."""
        with self._condition:
            self._writers_waiting += 1
            try:
                acquired = self._condition.wait_for(lambda: not self._writer and not self._readers, timeout)
            finally:
                self._writers_waiting -= 1
            if acquired:
                self._writer = True
            else:
                self._condition.notify_all()
        try:
            yield acquired
        finally:
            if acquired:
                with self._condition:
                    self._writer = False
                    self._condition.notify_all()


class NvmlSession:
    """Owns ``nvmlInit``/``nvmlShutdown`` and the resources that must be freed before a shutdown."""

    def __init__(self) -> None:
        self.lock = ReadWriteLock()
        self.generation = 0
        self.initialized = False
        self.needs_reinit = False
        self._teardown_hooks: list[Callable[[], None]] = []

    def on_teardown(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` (with the write lock held) before every shutdown: free event sets, GPM samples."""
        self._teardown_hooks.append(hook)

    def init(self) -> Failure | None:
        """``nvmlInit``; the caller holds the write lock (or no other thread exists yet)."""
        result = call("nvmlInit")
        if isinstance(result, Failure):
            self.initialized = False
            return result
        self.initialized = True
        self.needs_reinit = False
        self.generation += 1
        return None

    def teardown(self) -> None:
        """Free what the users hold, then ``nvmlShutdown``; the caller holds the write lock."""
        for hook in self._teardown_hooks:
            try:
                hook()
            except Exception:  # a hook must not keep NVML from being shut down
                log.exception("NVML teardown hook failed")
        if self.initialized:
            result = call("nvmlShutdown")
            if isinstance(result, Failure):
                log.debug("nvmlShutdown failed", extra={"code": return_name(result.code)})
        self.initialized = False

    def mark_lost(self) -> None:
        """A lifecycle error was seen: the next user re-initializes before calling NVML again."""
        self.needs_reinit = True

    def reinit(self, seen_generation: int, timeout: float | None = None) -> Failure | None:
        """Tear down and init again, unless another thread already did since ``seen_generation``.

        Returns the init failure (or a timeout failure when the write lock could not be had in time).
        """
        with self.lock.writing(timeout) as acquired:
            if not acquired:
                return Failure(-1)
            if self.generation != seen_generation and self.initialized and not self.needs_reinit:
                return None
            self.teardown()
            failure = self.init()
        if failure is None:
            log.info("NVML re-initialized", extra={"generation": self.generation})
        return failure

    def close(self, timeout: float) -> bool:
        """Final teardown at exit; False (and nothing shut down) when a thread is still inside NVML."""
        with self.lock.writing(timeout) as acquired:
            if acquired:
                self.teardown()
            return acquired

"""Running under the Service Control Manager: report StartPending then Running, accept Stop and Shutdown
(StopPending, cancel, wait, stopped with exit 0), and mirror the log into the Event Log.

Imported only on Windows (by ``cli.main`` through :func:`nvidia_gpu_exporter.windows.dispatch`) and by the
tests; pywin32's modules are imported when first needed, so the tests can inject fakes.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import ModuleType
from typing import Any, TextIO

from nvidia_gpu_exporter import app, logs, preflight
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.windows.eventlog import EventLogHandler
from nvidia_gpu_exporter.windows.scm import (
    DESCRIPTION,
    DISPLAY_NAME,
    ERROR_FAILED_SERVICE_CONTROLLER_CONNECT,
    SERVICE_NAME,
    winerror,
)

START_WAIT_HINT_MS = 10_000
STOP_WAIT_HINT_MS = 10_000

log = logging.getLogger("nvidia_gpu_exporter.windows.service")

ServeFunction = Callable[[Config], Coroutine[Any, Any, int]]


class ServiceExitError(RuntimeError):
    """Raised out of ``SvcRun`` so pywin32 reports the service stopped *with an error* (triggers recovery)."""


class ServiceRunner:
    """The exporter's life cycle under the SCM, independent of pywin32's classes (and so testable alone).

    ``report(state, wait_hint_ms)`` tells the SCM the state; ``run`` blocks in the service thread until the
    exporter ends; ``request_stop`` may come from the SCM's control thread at any time.
    """

    def __init__(
        self,
        arguments: Sequence[str],
        report: Callable[[str, int], None],
        *,
        serve: ServeFunction | None = None,
        event_log: logging.Handler | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.arguments = list(arguments)
        self._report = report
        self._serve = serve
        self._event_log = event_log
        self._stderr = stderr
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[int] | None = None
        self.stop_requested = False
        self.state = "start_pending"

    def _set_state(self, state: str, wait_hint_ms: int = 0) -> None:
        self.state = state
        self._report(state, wait_hint_ms)

    def _configure_logging(self, config: Config) -> None:
        stream = self._stderr if self._stderr is not None else sys.stderr
        if stream is None:  # a service has no console: sys.stderr is None there
            stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        logger = logs.configure(config.log_level, config.log_format, stream)
        if self._event_log is not None:
            logger.addHandler(self._event_log)

    def run(self) -> int:
        """Run the exporter with the baked flags; 0 after Stop/Shutdown, the exporter's code otherwise."""
        self._set_state("start_pending", START_WAIT_HINT_MS)
        try:
            config = preflight.config_to_run(self.arguments)
        except preflight.StartupError as error:
            self._configure_logging(Config())
            log.error("failed to run", extra={"err": str(error)})
            return 1
        self._configure_logging(config)
        serve = self._serve if self._serve is not None else app.serve
        loop = asyncio.new_event_loop()
        try:
            with self._lock:
                if self.stop_requested:
                    return 0
                self._loop = loop
                self._task = loop.create_task(serve(config))
            self._set_state("running")
            return self._wait(loop, self._task)
        finally:
            with self._lock:
                self._loop = None
                self._task = None
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _wait(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[int]) -> int:
        try:
            code = loop.run_until_complete(task)
        except asyncio.CancelledError:
            log.info("service stopped", extra={"service": SERVICE_NAME})
            return 0
        except preflight.StartupError as error:
            log.error("failed to run", extra={"err": str(error)})
            return 1
        if self.stop_requested:
            return 0
        if code:
            log.error("exporter exited", extra={"code": code})
        return code

    def request_stop(self) -> None:
        """Stop or Shutdown from the SCM: report StopPending and cancel the exporter (its cleanup still runs)."""
        self._set_state("stop_pending", STOP_WAIT_HINT_MS)
        with self._lock:
            self.stop_requested = True
            if self._loop is not None and self._task is not None:
                self._loop.call_soon_threadsafe(self._task.cancel)

    def interrogate(self) -> None:
        """Interrogate: report the current state again."""
        self._report(self.state, 0)


def service_class(
    arguments: Sequence[str],
    *,
    win32serviceutil: ModuleType,
    win32service: ModuleType,
    servicemanager: ModuleType,
    serve: ServeFunction | None = None,
) -> type:
    """The ``ServiceFramework`` subclass pywin32 hosts; it delegates everything to a :class:`ServiceRunner`."""
    states = {
        "start_pending": win32service.SERVICE_START_PENDING,
        "running": win32service.SERVICE_RUNNING,
        "stop_pending": win32service.SERVICE_STOP_PENDING,
    }

    class ExporterService(win32serviceutil.ServiceFramework):  # type: ignore[misc, name-defined]
        _svc_name_ = SERVICE_NAME
        _svc_display_name_ = DISPLAY_NAME
        _svc_description_ = DESCRIPTION
        exit_code = 0

        def __init__(self, args: Sequence[str]) -> None:
            super().__init__(args)
            self.runner = ServiceRunner(
                arguments,
                lambda state, hint: self.ReportServiceStatus(states[state], waitHint=hint),
                serve=serve,
                event_log=EventLogHandler(servicemanager),
            )

        def GetAcceptedControls(self) -> int:  # pywin32's method names
            accepted: int = win32service.SERVICE_ACCEPT_STOP | win32service.SERVICE_ACCEPT_SHUTDOWN
            return accepted

        def SvcRun(self) -> None:
            code = self.runner.run()
            type(self).exit_code = code
            if code:
                # pywin32 reports SERVICE_STOPPED with a service-specific error when SvcRun raises; the SCM
                # then applies the recovery actions (FailureActionsOnNonCrashFailures is set at install).
                raise ServiceExitError(f"nvidia_gpu_exporter exited with code {code}")

        def SvcStop(self) -> None:
            self.runner.request_stop()

        def SvcShutdown(self) -> None:
            self.runner.request_stop()

        def SvcInterrogate(self) -> None:
            self.runner.interrogate()

    return ExporterService


def run_if_started_by_scm(arguments: Sequence[str], *, serve: ServeFunction | None = None) -> int | None:
    """Host the service when the SCM started this process; ``None`` when it runs interactively.

    ``StartServiceCtrlDispatcher`` fails at once with ERROR_FAILED_SERVICE_CONTROLLER_CONNECT when the process
    was not started by the SCM; that is the detection pywin32 documents for executables hosting a service.
    """
    try:
        win32service = importlib.import_module("win32service")
        win32serviceutil = importlib.import_module("win32serviceutil")
        servicemanager = importlib.import_module("servicemanager")
    except ImportError:
        return None  # without pywin32 there is no service to be
    cls = service_class(
        arguments,
        win32serviceutil=win32serviceutil,
        win32service=win32service,
        servicemanager=servicemanager,
        serve=serve,
    )
    servicemanager.Initialize()
    servicemanager.PrepareToHostSingle(cls)
    try:
        servicemanager.StartServiceCtrlDispatcher()
    except win32service.error as error:
        if winerror(error) == ERROR_FAILED_SERVICE_CONTROLLER_CONNECT:
            return None
        raise
    code: int = getattr(cls, "exit_code", 0)
    return code

"""Windows service support through pywin32: ``install``, ``uninstall`` and running under the SCM.

This module is imported only on Windows (by ``cli.main``) and by the tests. Every pywin32 module
(``win32service``, ``win32serviceutil``, ``servicemanager``, ``win32evtlogutil``, ``win32con``) is imported
when first needed through :func:`importlib.import_module`, so the tests can inject recording fakes through
``sys.modules`` and this module imports cleanly where pywin32 is absent. pywin32 is the ``windows`` extra:
``pip install "nvidia-gpu-exporter[windows]"``.

Behaviour (spec §1.4):

* ``install [flags...]`` registers the service ``nvidia_gpu_exporter`` (own process, automatic start) whose
  command line is this interpreter (or frozen executable) plus the given flags, each Windows-quoted. When the
  service already exists it is reconfigured in place. Recovery: restart after 5 s, failure counter reset after
  a day, also applied to non-crash failures. A fresh install registers the Event Log source.
* ``uninstall`` stops the service (bounded polling), deletes it, waits for it to disappear and removes the
  Event Log source. A missing service is a clear error.
* Started by the Service Control Manager, the exporter reports StartPending then Running, accepts Stop and
  Shutdown (StopPending, cancel, wait, stopped with exit 0) and mirrors its log records into the Event Log.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TextIO

from . import logs
from .config import Config, ConfigError, validate
from .flags import FlagError, parse_args

SERVICE_NAME = "nvidia_gpu_exporter"
DISPLAY_NAME = "Nvidia GPU Exporter"
DESCRIPTION = "Exports Nvidia GPU metrics in Prometheus format."
SUBCOMMANDS = ("install", "uninstall")
PACKAGE = "nvidia_gpu_exporter"

RESTART_DELAY_MS = 5_000
FAILURE_RESET_SECONDS = 86_400
STOP_POLL_SECONDS = 0.3
STOP_TIMEOUT_SECONDS = 30.0
DELETE_TIMEOUT_SECONDS = 5.0
START_WAIT_HINT_MS = 10_000
STOP_WAIT_HINT_MS = 10_000

# Win32 error codes the SCM answers with (winerror.h).
ERROR_ACCESS_DENIED = 5
ERROR_SERVICE_DOES_NOT_EXIST = 1060
ERROR_SERVICE_CANNOT_ACCEPT_CTRL = 1061
ERROR_SERVICE_NOT_ACTIVE = 1062
ERROR_FAILED_SERVICE_CONTROLLER_CONNECT = 1063
ERROR_SERVICE_MARKED_FOR_DELETE = 1072

PYWIN32_HINT = 'pywin32 is required for the Windows service: pip install "nvidia-gpu-exporter[windows]"'

log = logging.getLogger("nvidia_gpu_exporter.winservice")

Sleep = Callable[[float], None]
Clock = Callable[[], float]
ServeFunction = Callable[[Config], Coroutine[Any, Any, int]]


class WinServiceError(Exception):
    """An install/uninstall step failed; the message is logged as ``failed to run``."""


class ServiceExitError(RuntimeError):
    """Raised out of ``SvcRun`` so pywin32 reports the service stopped *with an error* (triggers recovery)."""


# --------------------------------------------------------------------------------------------------------------
# pywin32 access


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise WinServiceError(PYWIN32_HINT) from error


@dataclass(frozen=True, slots=True)
class ScmApi:
    """The pywin32 modules that talk to the Service Control Manager and the Event Log registry."""

    win32service: ModuleType
    win32evtlogutil: ModuleType
    win32con: ModuleType
    servicemanager: ModuleType

    @classmethod
    def load(cls) -> ScmApi:
        return cls(
            win32service=_import("win32service"),
            win32evtlogutil=_import("win32evtlogutil"),
            win32con=_import("win32con"),
            servicemanager=_import("servicemanager"),
        )

    @property
    def error(self) -> type[Exception]:
        """``pywintypes.error``, which every win32service call raises."""
        error_type: type[Exception] = self.win32service.error
        return error_type


def winerror(error: BaseException) -> int | None:
    """The Win32 error code of a ``pywintypes.error`` (``None`` for anything else)."""
    code = getattr(error, "winerror", None)
    return code if isinstance(code, int) else None


def describe(error: BaseException) -> str:
    """``pywintypes.error`` as ``Function: message (code)``; other exceptions as their text."""
    code = winerror(error)
    if code is None:
        return str(error)
    function = getattr(error, "funcname", "") or "Win32"
    message = getattr(error, "strerror", "") or str(error)
    text = f"{function}: {message} ({code})"
    if code == ERROR_ACCESS_DENIED:
        text += "; run the command from an elevated (Administrator) prompt"
    return text


# --------------------------------------------------------------------------------------------------------------
# The service command line


def launcher(executable: str | None = None, *, frozen: bool | None = None) -> list[str]:
    """How the SCM starts this exporter: the frozen executable itself, or this Python with ``-m``."""
    executable = sys.executable if executable is None else executable
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    return [executable] if frozen else [executable, "-m", PACKAGE]


def service_command_line(flags: Sequence[str], launcher_argv: Sequence[str] | None = None) -> str:
    """The service's ``ImagePath``: launcher plus flags, each quoted with the MS C runtime rules."""
    words = list(launcher() if launcher_argv is None else launcher_argv) + list(flags)
    return subprocess.list2cmdline(words)


def check_flags(flags: Sequence[str]) -> Config:
    """Refuse to bake flags the exporter would reject at every service start."""
    try:
        parsed = parse_args(flags)
    except FlagError as error:
        raise WinServiceError(f"failed to parse the command line: {error}") from error
    if parsed.action != "run":
        raise WinServiceError(f"--help and --version cannot be baked into the service (got {parsed.action})")
    try:
        validate(parsed.config)
    except ConfigError as error:
        raise WinServiceError(str(error)) from error
    return parsed.config


# --------------------------------------------------------------------------------------------------------------
# install / uninstall


def _close(api: ScmApi, handle: object) -> None:
    with contextlib.suppress(Exception):
        api.win32service.CloseServiceHandle(handle)


def _open_service(api: ScmApi, scm: object) -> object | None:
    ws = api.win32service
    try:
        handle: object = ws.OpenService(scm, SERVICE_NAME, ws.SERVICE_ALL_ACCESS)
    except api.error as error:
        if winerror(error) == ERROR_SERVICE_DOES_NOT_EXIST:
            return None
        raise
    return handle


def _configure_recovery(api: ScmApi, handle: object) -> None:
    ws = api.win32service
    actions = {
        "ResetPeriod": FAILURE_RESET_SECONDS,
        "RebootMsg": None,
        "Command": None,
        "Actions": [(ws.SC_ACTION_RESTART, RESTART_DELAY_MS)],
    }
    ws.ChangeServiceConfig2(handle, ws.SERVICE_CONFIG_FAILURE_ACTIONS, actions)
    # Also recover when the exporter stops itself with a non-zero exit code, not only on crashes.
    ws.ChangeServiceConfig2(handle, ws.SERVICE_CONFIG_FAILURE_ACTIONS_FLAG, True)


def event_source_types(api: ScmApi) -> int:
    con = api.win32con
    types: int = con.EVENTLOG_ERROR_TYPE | con.EVENTLOG_WARNING_TYPE | con.EVENTLOG_INFORMATION_TYPE
    return types


def install(flags: Sequence[str], *, api: ScmApi | None = None, launcher_argv: Sequence[str] | None = None) -> str:
    """Register the service, or reconfigure it in place; returns ``"installed"`` or ``"reconfigured"``."""
    check_flags(flags)
    api = ScmApi.load() if api is None else api
    ws = api.win32service
    command = service_command_line(flags, launcher_argv)
    if sys.prefix != sys.base_prefix and not getattr(sys, "frozen", False):
        log.warning(
            "installing from a virtual environment: if the service fails to start (error 1053), install the "
            "exporter with pywin32 into a regular Python installation instead",
            extra={"python": sys.executable},
        )
    scm = ws.OpenSCManager(None, None, ws.SC_MANAGER_ALL_ACCESS)
    try:
        handle = _open_service(api, scm)
        existed = handle is not None
        if handle is not None:
            ws.ChangeServiceConfig(
                handle,
                ws.SERVICE_WIN32_OWN_PROCESS,
                ws.SERVICE_AUTO_START,
                ws.SERVICE_ERROR_NORMAL,
                command,
                None,
                0,
                None,
                None,
                None,
                DISPLAY_NAME,
            )
        else:
            handle = ws.CreateService(
                scm,
                SERVICE_NAME,
                DISPLAY_NAME,
                ws.SERVICE_ALL_ACCESS,
                ws.SERVICE_WIN32_OWN_PROCESS,
                ws.SERVICE_AUTO_START,
                ws.SERVICE_ERROR_NORMAL,
                command,
                None,
                0,
                None,
                None,
                None,
            )
        try:
            ws.ChangeServiceConfig2(handle, ws.SERVICE_CONFIG_DESCRIPTION, DESCRIPTION)
            try:
                _configure_recovery(api, handle)
            except api.error as error:
                log.warning("failed to set the recovery actions", extra={"err": describe(error)})
        finally:
            _close(api, handle)
    finally:
        _close(api, scm)
    if not existed:
        try:
            api.win32evtlogutil.AddSourceToRegistry(
                SERVICE_NAME, api.servicemanager.__file__, "Application", event_source_types(api)
            )
        except Exception as error:  # best effort: the service runs without its event source
            log.warning("failed to register the event log source", extra={"err": describe(error)})
    outcome = "reconfigured" if existed else "installed"
    log.info(f"service {outcome}", extra={"service": SERVICE_NAME, "command": command})
    return outcome


def _service_state(api: ScmApi, handle: object) -> int:
    state: int = api.win32service.QueryServiceStatus(handle)[1]
    return state


def stop_service(
    api: ScmApi,
    handle: object,
    *,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
    timeout: float = STOP_TIMEOUT_SECONDS,
) -> None:
    """Stop the service and wait (polling every 300 ms, bounded) until the SCM reports it stopped."""
    ws = api.win32service
    deadline = clock() + timeout
    while True:
        state = _service_state(api, handle)
        if state == ws.SERVICE_STOPPED:
            return
        if state not in (ws.SERVICE_START_PENDING, ws.SERVICE_STOP_PENDING):
            try:
                ws.ControlService(handle, ws.SERVICE_CONTROL_STOP)
            except api.error as error:
                # It stopped meanwhile, or it is between states and will answer the next poll.
                if winerror(error) not in (ERROR_SERVICE_NOT_ACTIVE, ERROR_SERVICE_CANNOT_ACCEPT_CTRL):
                    raise
        if clock() >= deadline:
            raise WinServiceError(f"service {SERVICE_NAME} did not stop within {timeout:g}s")
        sleep(STOP_POLL_SECONDS)


def _wait_until_gone(api: ScmApi, scm: object, *, sleep: Sleep, clock: Clock, timeout: float) -> bool:
    deadline = clock() + timeout
    while True:
        handle = _open_service(api, scm)
        if handle is None:
            return True
        _close(api, handle)
        if clock() >= deadline:
            return False
        sleep(STOP_POLL_SECONDS)


def uninstall(
    *,
    api: ScmApi | None = None,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
    stop_timeout: float = STOP_TIMEOUT_SECONDS,
    delete_timeout: float = DELETE_TIMEOUT_SECONDS,
) -> None:
    """Stop and delete the service, then remove its Event Log source."""
    api = ScmApi.load() if api is None else api
    ws = api.win32service
    scm = ws.OpenSCManager(None, None, ws.SC_MANAGER_ALL_ACCESS)
    try:
        handle = _open_service(api, scm)
        if handle is None:
            raise WinServiceError(f"service {SERVICE_NAME} is not installed")
        try:
            stop_service(api, handle, sleep=sleep, clock=clock, timeout=stop_timeout)
            try:
                ws.DeleteService(handle)
            except api.error as error:
                if winerror(error) != ERROR_SERVICE_MARKED_FOR_DELETE:
                    raise
        finally:
            _close(api, handle)
        if not _wait_until_gone(api, scm, sleep=sleep, clock=clock, timeout=delete_timeout):
            log.warning(
                "service is marked for deletion but still registered: another program (services.msc?) holds "
                "a handle to it; it disappears when that program closes",
                extra={"service": SERVICE_NAME},
            )
    finally:
        _close(api, scm)
    try:
        api.win32evtlogutil.RemoveSourceFromRegistry(SERVICE_NAME, "Application")
    except Exception as error:  # the service itself is gone; a stale source is harmless
        log.warning("failed to remove the event log source", extra={"err": describe(error)})
    log.info("service uninstalled", extra={"service": SERVICE_NAME})


def run_subcommand(name: str, arguments: Sequence[str]) -> int:
    """``install`` / ``uninstall`` as commands: log the outcome, return the exit status."""
    logs.configure()
    try:
        if name == "install":
            install(arguments)
        else:
            if arguments:
                raise WinServiceError(f"uninstall takes no arguments, got {' '.join(arguments)}")
            uninstall()
    except WinServiceError as error:
        log.error("failed to run", extra={"err": str(error)})
        return 1
    except Exception as error:
        if winerror(error) is None:
            raise
        log.error("failed to run", extra={"err": describe(error)})
        return 1
    return 0


# --------------------------------------------------------------------------------------------------------------
# Running under the Service Control Manager


def event_text(record: logging.LogRecord) -> str:
    """The Event Log text of a record: the message followed by `` key=value`` pairs (logfmt quoting)."""
    fields = logs.record_fields(record)[4:]  # after time, level, source and msg
    return record.getMessage() + "".join(f" {key}={_logfmt_value(value)}" for key, value in fields)


def _logfmt_value(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    if text and not any(char in text for char in ' ="\\') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)


class EventLogHandler(logging.Handler):
    """Mirror log records into the Application Event Log through pywin32's ``servicemanager``, best effort."""

    def __init__(self, servicemanager: ModuleType) -> None:
        super().__init__()
        self._servicemanager = servicemanager
        self.failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = event_text(record)
            if record.levelno >= logging.ERROR:
                self._servicemanager.LogErrorMsg(text)
            elif record.levelno >= logging.WARNING:
                self._servicemanager.LogWarningMsg(text)
            else:
                self._servicemanager.LogInfoMsg(text)
        except Exception:  # a full or unavailable Event Log must never stop the exporter
            self.failures += 1


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
            parsed = parse_args(self.arguments)
            validate(parsed.config)
        except (FlagError, ConfigError) as error:
            self._configure_logging(Config())
            log.error("failed to run", extra={"err": f"failed to parse the command line: {error}"})
            return 1
        config = parsed.config
        self._configure_logging(config)
        serve = self._serve
        if serve is None:
            from .cli import serve as cli_serve  # noqa: PLC0415 - cli imports this module lazily

            serve = cli_serve
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
        from .cli import StartupError  # noqa: PLC0415 - cli imports this module lazily

        try:
            code = loop.run_until_complete(task)
        except asyncio.CancelledError:
            log.info("service stopped", extra={"service": SERVICE_NAME})
            return 0
        except StartupError as error:
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


def dispatch(arguments: Sequence[str], *, process_argv: bool) -> int | None:
    """``cli.main``'s Windows hook: an exit status when this handled the invocation, ``None`` to run normally.

    ``process_argv`` is true when the arguments are the process's own (``main()`` without ``argv``); only
    then can the process have been started by the SCM.
    """
    if arguments and arguments[0] in SUBCOMMANDS:
        return run_subcommand(arguments[0], arguments[1:])
    if process_argv:
        return run_if_started_by_scm(arguments)
    return None

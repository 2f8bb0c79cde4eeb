"""Installing and removing the Windows service through pywin32 (``nvidia_gpu_exporter install|uninstall``).

Every pywin32 module (``win32service``, ``win32evtlogutil``, ``win32con``, ``servicemanager``) is imported when
first needed through :func:`importlib.import_module`, so the tests can inject recording fakes through
``sys.modules`` and this module imports cleanly where pywin32 is absent. pywin32 is the ``windows`` extra;
without it, the error names the command that adds it to this installation (support/extras.py).

* ``install [flags...]`` registers the service ``nvidia_gpu_exporter`` (own process, automatic start) whose
  command line is this interpreter (or frozen executable) plus the given flags, each Windows-quoted. When the
  service already exists it is reconfigured in place. Recovery: restart after 5 s, failure counter reset after
  a day, also applied to non-crash failures. A fresh install registers the Event Log source.
* ``uninstall`` stops the service (bounded polling), deletes it, waits for it to disappear and removes the
  Event Log source. A missing service is a clear error.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

from nvidia_gpu_exporter import flags, logs, preflight
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.support.extras import install_hint

SERVICE_NAME = "nvidia_gpu_exporter"
DISPLAY_NAME = "Nvidia GPU Exporter"
DESCRIPTION = "Exports Nvidia GPU metrics in Prometheus format."
SUBCOMMANDS = tuple(subcommand.name for subcommand in flags.SUBCOMMANDS if subcommand.windows_only)
PACKAGE = "nvidia_gpu_exporter"

RESTART_DELAY_MS = 5_000
FAILURE_RESET_SECONDS = 86_400
STOP_POLL_SECONDS = 0.3
STOP_TIMEOUT_SECONDS = 30.0
DELETE_TIMEOUT_SECONDS = 5.0

# Win32 error codes the SCM answers with (winerror.h).
ERROR_ACCESS_DENIED = 5
ERROR_SERVICE_DOES_NOT_EXIST = 1060
ERROR_SERVICE_CANNOT_ACCEPT_CTRL = 1061
ERROR_SERVICE_NOT_ACTIVE = 1062
ERROR_FAILED_SERVICE_CONTROLLER_CONNECT = 1063
ERROR_SERVICE_MARKED_FOR_DELETE = 1072


def pywin32_hint() -> str:
    return f"pywin32 is required for the Windows service: {install_hint('windows')}"


log = logging.getLogger("nvidia_gpu_exporter.windows.scm")

Sleep = Callable[[float], None]
Clock = Callable[[], float]


class WinServiceError(Exception):
    """An install/uninstall step failed; the message is logged as ``failed to run``."""


# --------------------------------------------------------------------------------------------------------------
# pywin32 access


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise WinServiceError(pywin32_hint()) from error


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
        return preflight.config_to_run(flags)
    except preflight.StartupError as error:
        raise WinServiceError(str(error)) from error


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
        # Type, start, error control, binary, load order group, tag, dependencies, account, password: the
        # parameters CreateService and ChangeServiceConfig share, in the same order.
        kinds = (ws.SERVICE_WIN32_OWN_PROCESS, ws.SERVICE_AUTO_START, ws.SERVICE_ERROR_NORMAL)
        shared = (*kinds, command, None, 0, None, None, None)
        if handle is not None:
            ws.ChangeServiceConfig(handle, *shared, DISPLAY_NAME)
        else:
            handle = ws.CreateService(scm, SERVICE_NAME, DISPLAY_NAME, ws.SERVICE_ALL_ACCESS, *shared)
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

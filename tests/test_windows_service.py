"""The Windows service (docs/compatibility.md, "Windows service"), on Linux: recording fakes of the pywin32
modules go into ``sys.modules``.

The fakes keep a small model of the Service Control Manager (registered services, their configuration and
state, open handles) and record every call, so the tests check what the exporter asks Windows to do.
"""

from __future__ import annotations

import io
import logging
import re
import shlex
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import installdoc
from harness import REPO, http_get
from nvidia_gpu_exporter import cli, logs, windows
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.support.extras import install_hint
from nvidia_gpu_exporter.windows import eventlog, service
from nvidia_gpu_exporter.windows import scm as winscm
from polling import wait_until

PYTHON = r"C:\Program Files\Python312\python.exe"
LAUNCHER = [PYTHON, "-m", "nvidia_gpu_exporter"]

SERVICE_STOPPED, SERVICE_START_PENDING, SERVICE_STOP_PENDING, SERVICE_RUNNING = 1, 2, 3, 4
STATE_NAMES = {1: "stopped", 2: "start_pending", 3: "stop_pending", 4: "running"}
SERVICE_CONTROL_STOP, SERVICE_CONTROL_INTERROGATE, SERVICE_CONTROL_SHUTDOWN = 1, 4, 5


class FakeWinError(Exception):
    """``pywintypes.error``: (winerror, funcname, strerror)."""

    def __init__(self, winerror: int, funcname: str, strerror: str) -> None:
        super().__init__(winerror, funcname, strerror)
        self.winerror = winerror
        self.funcname = funcname
        self.strerror = strerror


@dataclass
class FakeService:
    name: str
    display_name: str
    start_type: int
    command: str
    description: str = ""
    failure_actions: dict[str, Any] | None = None
    failure_actions_on_non_crash: bool = False
    states: list[int] = field(default_factory=lambda: [SERVICE_STOPPED])  # what the next polls answer
    stops_after_polls: int = 2  # after a Stop control: this many STOP_PENDING answers, then STOPPED
    ignores_stop: bool = False
    marked_for_delete: bool = False


@dataclass
class Scm:
    """The fake Service Control Manager and the recorder of every pywin32 call."""

    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    services: dict[str, FakeService] = field(default_factory=dict)
    open_handles: set[str] = field(default_factory=set)
    handle_targets: dict[str, str] = field(default_factory=dict)
    event_sources: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    event_messages: list[tuple[str, str]] = field(default_factory=list)
    dispatcher: Callable[[], None] | None = None
    hosted: type | None = None
    next_handle: int = 0
    delete_lingers_polls: int = 0  # OpenService still finds a deleted service for this many calls

    def record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def args_of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]

    def _handle(self, kind: str, target: str = "") -> str:
        self.next_handle += 1
        handle = f"{kind}#{self.next_handle}"
        self.open_handles.add(handle)
        self.handle_targets[handle] = target
        return handle

    # ---- win32service ----
    def OpenSCManager(self, machine: Any, database: Any, access: int) -> str:
        self.record("OpenSCManager", machine, database, access)
        return self._handle("scm")

    def OpenService(self, scm: str, name: str, access: int) -> str:
        self.record("OpenService", scm, name, access)
        service = self.services.get(name)
        if service is None:
            raise FakeWinError(1060, "OpenService", "The specified service does not exist as an installed service.")
        if service.marked_for_delete:
            if self.delete_lingers_polls <= 0:
                del self.services[name]
                raise FakeWinError(1060, "OpenService", "The specified service does not exist.")
            self.delete_lingers_polls -= 1
        return self._handle("svc", name)

    def CreateService(self, *args: Any) -> str:
        # (scm, name, display, access, type, start type, error control, binary, group, tag, deps, user, password)
        assert len(args) == 13
        self.record("CreateService", *args)
        name, display, start_type, binary = args[1], args[2], args[5], args[7]
        self.services[name] = FakeService(name, display, start_type, binary)
        return self._handle("svc", name)

    def ChangeServiceConfig(self, *args: Any) -> None:
        # (handle, type, start type, error control, binary, group, tag, deps, user, password, display name)
        assert len(args) == 11
        self.record("ChangeServiceConfig", *args)
        service = self.services[self.handle_targets[args[0]]]
        service.start_type, service.command, service.display_name = args[2], args[4], args[10]

    def ChangeServiceConfig2(self, handle: str, level: int, info: Any) -> None:
        self.record("ChangeServiceConfig2", handle, level, info)
        service = self.services[self.handle_targets[handle]]
        if level == 1:
            service.description = info
        elif level == 2:
            service.failure_actions = info
        elif level == 4:
            service.failure_actions_on_non_crash = bool(info)

    def CloseServiceHandle(self, handle: str) -> None:
        self.record("CloseServiceHandle", handle)
        self.open_handles.remove(handle)

    def QueryServiceStatus(self, handle: str) -> tuple[int, ...]:
        self.record("QueryServiceStatus", handle)
        service = self.services[self.handle_targets[handle]]
        state = service.states.pop(0) if len(service.states) > 1 else service.states[0]
        return (0x10, state, 0, 0, 0, 0, 0)

    def ControlService(self, handle: str, control: int) -> tuple[int, ...]:
        self.record("ControlService", handle, control)
        service = self.services[self.handle_targets[handle]]
        if service.states[0] == SERVICE_STOPPED:
            raise FakeWinError(1062, "ControlService", "The service has not been started.")
        if not service.ignores_stop:
            service.states = [SERVICE_STOP_PENDING] * service.stops_after_polls + [SERVICE_STOPPED]
        return (0x10, service.states[0], 0, 0, 0, 0, 0)

    def DeleteService(self, handle: str) -> None:
        self.record("DeleteService", handle)
        service = self.services[self.handle_targets[handle]]
        if service.marked_for_delete:
            raise FakeWinError(1072, "DeleteService", "The specified service has been marked for deletion.")
        service.marked_for_delete = True

    # ---- win32evtlogutil ----
    def AddSourceToRegistry(self, name: str, msg_dll: str, log_type: str, flags: int) -> None:
        self.record("AddSourceToRegistry", name, msg_dll, log_type, flags)
        self.event_sources[name] = (msg_dll, log_type, flags)

    def RemoveSourceFromRegistry(self, name: str, log_type: str) -> None:
        self.record("RemoveSourceFromRegistry", name, log_type)
        self.event_sources.pop(name, None)

    # ---- servicemanager ----
    def Initialize(self, *args: Any) -> None:
        self.record("Initialize", *args)

    def PrepareToHostSingle(self, cls: type) -> None:
        self.record("PrepareToHostSingle", cls)
        self.hosted = cls

    def StartServiceCtrlDispatcher(self) -> None:
        self.record("StartServiceCtrlDispatcher")
        if self.dispatcher is None:
            raise FakeWinError(1063, "StartServiceCtrlDispatcher", "The service process could not connect.")
        self.dispatcher()

    def RegisterServiceCtrlHandler(self, name: str, handler: Any, extended: bool) -> str:
        self.record("RegisterServiceCtrlHandler", name, extended)
        return "status-handle"

    def SetEventSourceName(self, name: str, *args: Any) -> None:
        self.record("SetEventSourceName", name, *args)

    def log_message(self, kind: str) -> Callable[[str], None]:
        def log_it(text: str) -> None:
            self.record(kind, text)
            self.event_messages.append((kind, text))

        return log_it


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def _recording_module(name: str, scm: Scm) -> types.ModuleType:
    """A pywin32 module this code must not need: any function taken from it records its call."""
    module = types.ModuleType(name)

    def __getattr__(attribute: str) -> Callable[..., None]:
        def recorded(*args: Any) -> None:
            scm.record(f"{name}.{attribute}", *args)

        return recorded

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _service_framework(scm: Scm, servicemanager: types.ModuleType) -> type:
    """pywin32's ``win32serviceutil.ServiceFramework``, reduced to what it does on the SCM's behalf."""

    class ServiceFramework:
        _svc_name_ = ""

        def __init__(self, args: Sequence[str]) -> None:
            self.ssh = servicemanager.RegisterServiceCtrlHandler(args[0], self.ServiceCtrlHandlerEx, True)
            servicemanager.SetEventSourceName(self._svc_name_)
            self.checkPoint = 0
            self.reported: list[tuple[str, int, int]] = []

        def GetAcceptedControls(self) -> int:
            return 1

        def ReportServiceStatus(self, status: int, waitHint: int = 5000, **exit_codes: int) -> None:
            accepted = 0 if status == SERVICE_START_PENDING else self.GetAcceptedControls()
            self.reported.append((STATE_NAMES[status], accepted, waitHint))
            scm.record("SetServiceStatus", STATE_NAMES[status], accepted, waitHint)

        def SvcInterrogate(self) -> None:
            self.ReportServiceStatus(SERVICE_RUNNING)

        def ServiceCtrlHandlerEx(self, control: int, event_type: int, data: Any) -> Any:
            if control == SERVICE_CONTROL_STOP:
                return self.SvcStop()  # type: ignore[attr-defined]
            if control == SERVICE_CONTROL_INTERROGATE:
                return self.SvcInterrogate()
            if control == SERVICE_CONTROL_SHUTDOWN:
                return self.SvcShutdown()  # type: ignore[attr-defined]
            return None

    return ServiceFramework


@pytest.fixture
def scm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scm]:
    """All seven pywin32 modules, faked and injected through ``sys.modules``."""
    fake = Scm()
    win32service = _module(
        "win32service",
        __file__=r"C:\Python312\Lib\site-packages\win32\win32service.pyd",
        error=FakeWinError,
        SC_MANAGER_ALL_ACCESS=0xF003F,
        SERVICE_ALL_ACCESS=0xF01FF,
        SERVICE_WIN32_OWN_PROCESS=0x10,
        SERVICE_AUTO_START=2,
        SERVICE_ERROR_NORMAL=1,
        SERVICE_CONFIG_DESCRIPTION=1,
        SERVICE_CONFIG_FAILURE_ACTIONS=2,
        SERVICE_CONFIG_FAILURE_ACTIONS_FLAG=4,
        SC_ACTION_RESTART=1,
        SERVICE_STOPPED=SERVICE_STOPPED,
        SERVICE_START_PENDING=SERVICE_START_PENDING,
        SERVICE_STOP_PENDING=SERVICE_STOP_PENDING,
        SERVICE_RUNNING=SERVICE_RUNNING,
        SERVICE_CONTROL_STOP=SERVICE_CONTROL_STOP,
        SERVICE_ACCEPT_STOP=1,
        SERVICE_ACCEPT_SHUTDOWN=4,
        OpenSCManager=fake.OpenSCManager,
        OpenService=fake.OpenService,
        CreateService=fake.CreateService,
        ChangeServiceConfig=fake.ChangeServiceConfig,
        ChangeServiceConfig2=fake.ChangeServiceConfig2,
        CloseServiceHandle=fake.CloseServiceHandle,
        QueryServiceStatus=fake.QueryServiceStatus,
        ControlService=fake.ControlService,
        DeleteService=fake.DeleteService,
    )
    servicemanager = _module(
        "servicemanager",
        __file__=r"C:\Python312\Lib\site-packages\win32\servicemanager.pyd",
        Initialize=fake.Initialize,
        PrepareToHostSingle=fake.PrepareToHostSingle,
        StartServiceCtrlDispatcher=fake.StartServiceCtrlDispatcher,
        RegisterServiceCtrlHandler=fake.RegisterServiceCtrlHandler,
        SetEventSourceName=fake.SetEventSourceName,
        LogInfoMsg=fake.log_message("LogInfoMsg"),
        LogWarningMsg=fake.log_message("LogWarningMsg"),
        LogErrorMsg=fake.log_message("LogErrorMsg"),
    )
    modules = {
        "win32service": win32service,
        "servicemanager": servicemanager,
        "win32serviceutil": _module("win32serviceutil", ServiceFramework=_service_framework(fake, servicemanager)),
        "win32evtlogutil": _module(
            "win32evtlogutil",
            AddSourceToRegistry=fake.AddSourceToRegistry,
            RemoveSourceFromRegistry=fake.RemoveSourceFromRegistry,
        ),
        "win32con": _module("win32con", EVENTLOG_ERROR_TYPE=1, EVENTLOG_WARNING_TYPE=2, EVENTLOG_INFORMATION_TYPE=4),
        "win32event": _recording_module("win32event", fake),
        "win32api": _recording_module("win32api", fake),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    yield fake
    assert not fake.open_handles, f"SCM handles left open: {fake.open_handles}"


@dataclass
class FakeTime:
    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def _log_stream() -> io.StringIO:
    stream = io.StringIO()
    logs.configure(stream=stream)
    return stream


# ---------------------------------------------------------------------------------------------------------------
# The command line baked into the service


def test_service_command_line_quotes_every_flag_with_windows_rules() -> None:
    command = winscm.service_command_line(
        [
            r"--nvidia-smi-command=C:\Program Files\NVIDIA Corporation\NVSMI\nvidia-smi.exe",
            '--web.telemetry-path=/a"b',
            "--log.level=debug",
            "trailing back\\",
            "",
        ],
        LAUNCHER,
    )
    assert command == (
        r'"C:\Program Files\Python312\python.exe" -m nvidia_gpu_exporter '
        r'"--nvidia-smi-command=C:\Program Files\NVIDIA Corporation\NVSMI\nvidia-smi.exe" '
        r'--web.telemetry-path=/a\"b --log.level=debug "trailing back\\" ""'
    )


def test_launcher_is_the_frozen_executable_or_this_python_with_dash_m() -> None:
    assert winscm.launcher(r"C:\exporter\nvidia_gpu_exporter.exe", frozen=True) == [
        r"C:\exporter\nvidia_gpu_exporter.exe"
    ]
    assert winscm.launcher(PYTHON, frozen=False) == LAUNCHER
    assert winscm.service_command_line(["--collect.interval=15s"]).endswith(
        " -m nvidia_gpu_exporter --collect.interval=15s"
    )


# ---------------------------------------------------------------------------------------------------------------
# install


def test_install_registers_an_automatic_service_with_recovery_and_event_source(scm: Scm) -> None:
    stream = _log_stream()
    flags = ["--web.listen-address=:9835", r"--nvidia-smi-command=C:\Program Files\NVIDIA\nvidia-smi.exe"]

    assert winscm.install(flags, launcher_argv=LAUNCHER) == "installed"

    (create,) = scm.args_of("CreateService")
    _, name, display, _, service_type, start_type, error_control, binary, *_ = create
    assert (name, display, service_type, start_type, error_control) == (
        "nvidia_gpu_exporter",
        "Nvidia GPU Exporter",
        0x10,  # own process
        2,  # automatic start
        1,  # normal error control
    )
    assert binary == (
        r'"C:\Program Files\Python312\python.exe" -m nvidia_gpu_exporter --web.listen-address=:9835 '
        r'"--nvidia-smi-command=C:\Program Files\NVIDIA\nvidia-smi.exe"'
    )
    service = scm.services["nvidia_gpu_exporter"]
    assert service.description == "Exports Nvidia GPU metrics in Prometheus format."
    assert service.failure_actions == {
        "ResetPeriod": 86400,
        "RebootMsg": None,
        "Command": None,
        "Actions": [(1, 5000)],  # SC_ACTION_RESTART after 5 s
    }
    assert service.failure_actions_on_non_crash is True
    assert scm.event_sources == {
        "nvidia_gpu_exporter": (r"C:\Python312\Lib\site-packages\win32\servicemanager.pyd", "Application", 7)
    }
    assert "ChangeServiceConfig" not in scm.names()
    assert 'msg="service installed"' in stream.getvalue()


def test_install_twice_reconfigures_in_place(scm: Scm) -> None:
    stream = _log_stream()
    assert winscm.install(["--collect.interval=15s"], launcher_argv=LAUNCHER) == "installed"
    calls_after_first = len(scm.calls)

    assert winscm.install(["--collect.backend=demo", "--log.level=debug"], launcher_argv=LAUNCHER) == ("reconfigured")

    second = scm.names()[calls_after_first:]
    assert "CreateService" not in second
    assert "AddSourceToRegistry" not in second  # the event source is registered once, on the fresh install
    (change,) = scm.args_of("ChangeServiceConfig")
    assert change[1:4] == (0x10, 2, 1)  # still own process, automatic start, normal error control
    assert change[4] == (
        r'"C:\Program Files\Python312\python.exe" -m nvidia_gpu_exporter --collect.backend=demo --log.level=debug'
    )
    assert change[10] == "Nvidia GPU Exporter"
    assert len(scm.services) == 1
    assert scm.services["nvidia_gpu_exporter"].command == change[4]
    # Description and recovery are applied again, so a reinstall repairs them too.
    assert [args[1] for args in scm.args_of("ChangeServiceConfig2")] == [1, 2, 4, 1, 2, 4]
    logged = stream.getvalue()
    assert logged.index('msg="service installed"') < logged.index('msg="service reconfigured"')


def test_install_refuses_flags_the_exporter_would_reject(scm: Scm) -> None:
    with pytest.raises(winscm.WinServiceError, match="unknown long flag '--no-such-flag'"):
        winscm.install(["--no-such-flag"], launcher_argv=LAUNCHER)
    with pytest.raises(winscm.WinServiceError, match=r"web\.telemetry-path"):
        winscm.install(["--web.telemetry-path=/"], launcher_argv=LAUNCHER)
    with pytest.raises(winscm.WinServiceError, match="cannot be baked"):
        winscm.install(["--version"], launcher_argv=LAUNCHER)
    assert scm.calls == []


def test_install_warns_but_succeeds_when_recovery_cannot_be_set(scm: Scm, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _log_stream()

    def refuse(handle: str, level: int, info: Any) -> None:
        scm.record("ChangeServiceConfig2", handle, level, info)
        if level != 1:
            raise FakeWinError(5, "ChangeServiceConfig2", "Access is denied.")

    monkeypatch.setattr(sys.modules["win32service"], "ChangeServiceConfig2", refuse)
    assert winscm.install([], launcher_argv=LAUNCHER) == "installed"
    (warning,) = [line for line in stream.getvalue().splitlines() if "failed to set the recovery actions" in line]
    assert "level=warn" in warning
    assert "Access is denied." in warning


def test_install_without_pywin32_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "win32service", None)
    with pytest.raises(winscm.WinServiceError) as raised:
        winscm.install([], launcher_argv=LAUNCHER)
    assert str(raised.value) == f"pywin32 is required for the Windows service: {install_hint('windows')}"


# ---------------------------------------------------------------------------------------------------------------
# uninstall


def _installed(scm: Scm, *states: int) -> FakeService:
    winscm.install([], launcher_argv=LAUNCHER)
    service = scm.services["nvidia_gpu_exporter"]
    service.states = list(states)
    scm.calls.clear()
    return service


def test_uninstall_stops_the_running_service_then_deletes_it(scm: Scm) -> None:
    _log_stream()
    _installed(scm, SERVICE_RUNNING)
    fake_time = FakeTime()

    winscm.uninstall(sleep=fake_time.sleep, clock=fake_time.clock)

    names = [name for name in scm.names() if name != "CloseServiceHandle"]
    assert names == [
        "OpenSCManager",
        "OpenService",
        "QueryServiceStatus",  # running
        "ControlService",  # stop
        "QueryServiceStatus",  # stop pending
        "QueryServiceStatus",  # stop pending
        "QueryServiceStatus",  # stopped
        "DeleteService",
        "OpenService",  # gone
        "RemoveSourceFromRegistry",
    ]
    assert scm.args_of("ControlService")[0][1] == SERVICE_CONTROL_STOP
    assert fake_time.sleeps == [0.3, 0.3, 0.3]
    assert scm.services == {}
    assert scm.event_sources == {}


def test_uninstall_of_a_missing_service_is_a_clear_error(scm: Scm) -> None:
    with pytest.raises(winscm.WinServiceError, match=r"^service nvidia_gpu_exporter is not installed$"):
        winscm.uninstall()
    assert "DeleteService" not in scm.names()
    assert "RemoveSourceFromRegistry" not in scm.names()


def test_uninstall_waits_out_pending_states_and_tolerates_races(scm: Scm, monkeypatch: pytest.MonkeyPatch) -> None:
    _log_stream()
    _installed(scm, SERVICE_START_PENDING, SERVICE_START_PENDING, SERVICE_RUNNING)
    fake_time = FakeTime()
    original_control = scm.ControlService

    def racing_control(handle: str, control: int) -> tuple[int, ...]:
        original_control(handle, control)
        raise FakeWinError(1061, "ControlService", "The service cannot accept control messages at this time.")

    monkeypatch.setattr(sys.modules["win32service"], "ControlService", racing_control)
    scm.delete_lingers_polls = 2

    winscm.uninstall(sleep=fake_time.sleep, clock=fake_time.clock)

    assert scm.names().count("ControlService") == 1  # no Stop while START_PENDING; one Stop when running
    assert scm.names().count("OpenService") == 1 + 3  # the entry lingers for two polls, then it is gone
    assert scm.services == {}


def test_uninstall_stop_polling_is_bounded(scm: Scm) -> None:
    _log_stream()
    service = _installed(scm, SERVICE_RUNNING)
    service.ignores_stop = True
    fake_time = FakeTime()

    with pytest.raises(winscm.WinServiceError, match="did not stop within 30s"):
        winscm.uninstall(sleep=fake_time.sleep, clock=fake_time.clock)

    assert fake_time.now - 1000.0 == pytest.approx(30.0, abs=0.31)
    assert all(seconds == 0.3 for seconds in fake_time.sleeps)
    assert "DeleteService" not in scm.names()


def test_uninstall_counts_marked_for_deletion_as_success_and_warns_when_it_lingers(scm: Scm) -> None:
    stream = _log_stream()
    service = _installed(scm, SERVICE_STOPPED)
    service.marked_for_delete = True  # a previous uninstall's deletion is still pending
    scm.delete_lingers_polls = 1000
    fake_time = FakeTime()

    winscm.uninstall(sleep=fake_time.sleep, clock=fake_time.clock)

    assert "marked for deletion but still registered" in stream.getvalue()
    assert 4.9 <= sum(fake_time.sleeps) <= 5.3  # waited about 5 s for the entry to disappear
    service.marked_for_delete = False  # let the fixture's handle check see a tidy SCM


# ---------------------------------------------------------------------------------------------------------------
# cli.main's hook


@pytest.mark.parametrize(
    "argv",
    [["install"], ["install", "--collect.interval=15s"], ["uninstall"]],
    ids=["install", "install with flags", "uninstall"],
)
def test_install_outside_windows_says_it_is_a_windows_only_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert sys.platform != "win32"
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert f"'{argv[0]}' is a Windows-only command" in err
    assert "systemd unit nvidia_gpu_exporter.service" in err
    assert "unexpected" not in err  # kingpin's "unexpected install" told a Linux user nothing


def test_on_windows_main_dispatches_install_and_uninstall(
    scm: Scm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(winscm, "launcher", lambda *args, **kwargs: LAUNCHER)

    assert cli.main(["install", "--collect.backend=demo"]) == 0
    assert cli.main(["install", "--collect.backend=demo", "--log.level=warn"]) == 0
    err = capsys.readouterr().err
    assert 'msg="service installed"' in err
    assert 'msg="service reconfigured"' in err
    assert scm.names().count("CreateService") == 1

    assert cli.main(["uninstall", "extra"]) == 1
    assert "uninstall takes no arguments" in capsys.readouterr().err
    assert cli.main(["uninstall"]) == 0
    assert cli.main(["uninstall"]) == 1
    err = capsys.readouterr().err
    assert 'msg="service uninstalled"' in err
    assert 'msg="failed to run" err="service nvidia_gpu_exporter is not installed"' in err


def test_access_denied_from_the_scm_is_reported_with_a_hint(
    scm: Scm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def denied(*args: Any) -> str:
        raise FakeWinError(5, "OpenSCManager", "Access is denied.")

    monkeypatch.setattr(sys.modules["win32service"], "OpenSCManager", denied)
    assert winscm.run_subcommand("install", []) == 1
    assert "OpenSCManager: Access is denied. (5); run the command from an elevated" in capsys.readouterr().err


def test_interactive_start_is_detected_and_runs_normally(scm: Scm) -> None:
    assert windows.dispatch(["--collect.backend=demo"], process_argv=True) is None
    assert scm.names() == ["Initialize", "PrepareToHostSingle", "StartServiceCtrlDispatcher"]
    scm.calls.clear()
    assert windows.dispatch(["--collect.backend=demo"], process_argv=False) is None
    assert scm.calls == []


# ---------------------------------------------------------------------------------------------------------------
# Running under the SCM


@dataclass
class HostedService:
    """The fake SCM's side of a hosted service: the instance, its thread and the outcome of ``SvcRun``."""

    instance: Any = None
    thread: threading.Thread | None = None
    error: BaseException | None = None
    started: threading.Event = field(default_factory=threading.Event)


def _host(scm: Scm) -> HostedService:
    """Make StartServiceCtrlDispatcher behave as under the SCM: instantiate the class, run SvcRun in a thread."""
    hosted = HostedService()

    def dispatcher() -> None:
        assert scm.hosted is not None
        hosted.instance = scm.hosted(["nvidia_gpu_exporter"])

        def service_main() -> None:
            try:
                hosted.instance.SvcRun()
            except BaseException as error:  # what pywin32's service_main would report
                hosted.error = error

        hosted.thread = threading.Thread(target=service_main, daemon=True)
        hosted.thread.start()
        hosted.started.set()
        hosted.thread.join(timeout=60)

    scm.dispatcher = dispatcher
    return hosted


@pytest.mark.parametrize("control", [SERVICE_CONTROL_STOP, SERVICE_CONTROL_SHUTDOWN])
def test_scm_start_serves_metrics_then_stops_cleanly(scm: Scm, control: int) -> None:
    hosted = _host(scm)
    flags = ["--collect.backend=demo", "--web.listen-address=127.0.0.1:0"]
    result: list[int | None] = []
    dispatcher_thread = threading.Thread(
        target=lambda: result.append(windows.dispatch(flags, process_argv=True)), daemon=True
    )
    dispatcher_thread.start()
    wait_until(lambda: any("Listening on" in text for _, text in scm.event_messages), "the Listening on event")
    listening = next(text for _, text in scm.event_messages if "Listening on" in text)
    address = re.search(r"address=(\S+)", listening)
    assert address is not None

    response = http_get(f"http://{address.group(1)}/metrics")
    assert response.status == 200
    assert "nvidia_smi_gpu_info{" in response.text

    instance = hosted.instance
    assert instance.reported[:2] == [("start_pending", 0, 10_000), ("running", 5, 0)]  # accepts Stop + Shutdown
    instance.ServiceCtrlHandlerEx(SERVICE_CONTROL_INTERROGATE, 0, None)
    assert instance.reported[-1] == ("running", 5, 0)  # Interrogate echoes the current state

    instance.ServiceCtrlHandlerEx(control, 0, None)
    dispatcher_thread.join(timeout=30)

    assert not dispatcher_thread.is_alive()
    assert hosted.error is None  # SvcRun returned: pywin32 reports SERVICE_STOPPED with exit code 0
    assert result == [0]
    assert instance.reported[-1] == ("stop_pending", 5, 10_000)
    assert scm.event_messages[-1] == ("LogInfoMsg", "service stopped service=nvidia_gpu_exporter")
    assert any(kind == "LogWarningMsg" and text.startswith("demo mode:") for kind, text in scm.event_messages)
    assert scm.args_of("SetEventSourceName") == [("nvidia_gpu_exporter",)]
    with pytest.raises(OSError):  # noqa: PT011 - the listener is closed: connection refused
        http_get(f"http://{address.group(1)}/metrics", timeout=2)


def test_exporter_failing_on_its_own_stops_the_service_with_an_error(scm: Scm) -> None:
    async def exits_with_seven(config: Config) -> int:
        return 7

    hosted = _host(scm)
    assert service.run_if_started_by_scm(["--collect.backend=demo"], serve=exits_with_seven) == 7
    assert isinstance(hosted.error, service.ServiceExitError)  # pywin32 then reports a service-specific error
    assert ("LogErrorMsg", "exporter exited code=7") in scm.event_messages


def test_bad_baked_flags_fail_the_service_and_reach_the_event_log(scm: Scm) -> None:
    hosted = _host(scm)
    assert service.run_if_started_by_scm(["--collect.interval=-1s"]) == 1
    assert isinstance(hosted.error, service.ServiceExitError)
    assert scm.event_messages == [
        (
            "LogErrorMsg",
            'failed to run err="collect.interval must not be negative, got -1s"',  # as the console says it
        )
    ]


def test_stop_before_the_exporter_started_ends_the_run_at_once() -> None:
    reports: list[tuple[str, int]] = []
    runner = service.ServiceRunner(
        ["--collect.backend=demo"], lambda state, hint: reports.append((state, hint)), stderr=io.StringIO()
    )
    runner.request_stop()
    assert runner.run() == 0
    assert reports == [("stop_pending", 10_000), ("start_pending", 10_000)]


# ---------------------------------------------------------------------------------------------------------------
# Event Log mirroring


def _record(level: int, message: str, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("nvidia_gpu_exporter.test", level, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_event_text_is_the_message_followed_by_key_value_pairs() -> None:
    record = _record(logging.INFO, "Listening on", address="[::]:9835", tls=False, err='bad "x"')
    assert eventlog.event_text(record) == 'Listening on address=[::]:9835 tls=False err="bad \\"x\\""'


def test_event_log_handler_maps_levels_and_never_raises(scm: Scm, monkeypatch: pytest.MonkeyPatch) -> None:
    handler = eventlog.EventLogHandler(sys.modules["servicemanager"])
    handler.emit(_record(logging.DEBUG, "debug line"))
    handler.emit(_record(logging.INFO, "info line"))
    handler.emit(_record(logging.WARNING, "warn line"))
    handler.emit(_record(logging.ERROR, "error line"))
    assert scm.event_messages == [
        ("LogInfoMsg", "debug line"),
        ("LogInfoMsg", "info line"),
        ("LogWarningMsg", "warn line"),
        ("LogErrorMsg", "error line"),
    ]

    def full(text: str) -> None:
        raise FakeWinError(1502, "ReportEvent", "The event log file is full.")

    monkeypatch.setattr(sys.modules["servicemanager"], "LogInfoMsg", full)
    handler.emit(_record(logging.INFO, "lost"))
    assert handler.failures == 1


def test_pywin32_is_a_windows_only_extra() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    extras = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    assert "windows = [\"pywin32>=306; sys_platform == 'win32'\"]" in extras.splitlines()
    dependencies = pyproject.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    assert "pywin32" not in dependencies


def test_install_md_windows_commands_work_against_the_fakes(scm: Scm, monkeypatch: pytest.MonkeyPatch) -> None:
    """INSTALL.md's ``nvidia_gpu_exporter install ...`` and ``uninstall`` lines, through ``cli.main``."""
    install_lines = [
        line for line in installdoc.block("windows-install").lines() if line.startswith("nvidia_gpu_exporter ")
    ]
    (uninstall_line,) = installdoc.block("windows-uninstall").lines()
    (install_line,) = install_lines
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(winscm, "launcher", lambda *args, **kwargs: LAUNCHER)
    _log_stream()

    words = shlex.split(install_line)  # PowerShell's single quotes, as in a POSIX shell
    assert cli.main(words[1:]) == 0
    service = scm.services["nvidia_gpu_exporter"]
    assert service.command == subprocess.list2cmdline([*LAUNCHER, *words[2:]])
    assert service.start_type == 2  # automatic
    assert cli.main(uninstall_line.split()[1:]) == 0
    assert scm.services == {}

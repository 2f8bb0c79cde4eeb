"""The fleet's targets file (backends/fleet/targets.py): strict schema, inheritance (docs/fleet.md); its reloads are
in test_fleet_wiring.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from harness import run_exporter_to_exit
from nvidia_gpu_exporter.backends import CollectionError
from nvidia_gpu_exporter.backends.exec.runner import RunResult
from nvidia_gpu_exporter.backends.fleet.targets import (
    HostKeyPolicy,
    Settings,
    TargetsError,
    load_targets,
    parse_targets,
)
from nvidia_gpu_exporter.config import Config, ConfigError, validate


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("", "the targets file is empty", id="empty-file"),
        pytest.param("targets: {}\n", "no targets", id="no-targets"),
        pytest.param("target: {a: {}}\n", 'unknown key "target"', id="unknown-top-level-key"),
        pytest.param("targets: {a: {hots: x}}\n", 'line 1: targets.a: unknown key "hots"', id="unknown-target-key"),
        pytest.param("defaults: {host: x}\ntargets: {a: }\n", 'unknown key "host"', id="host-is-per-target"),
        pytest.param("targets: {a: {port: 0}}\n", "targets.a.port: must be at least 1", id="port-too-low"),
        pytest.param("targets: {a: {port: '22'}}\n", "must be an integer", id="port-quoted"),
        pytest.param("targets: {a: {timeout: 0s}}\n", "must be positive", id="timeout-zero"),
        pytest.param("targets: {a: {timeout: 10m}}\n", "at most 300s", id="timeout-too-long"),
        pytest.param("targets: {a: {timeout: soon}}\n", "targets.a.timeout", id="timeout-not-a-duration"),
        pytest.param("targets: {a: {host_key_policy: off}}\n", "must be one of strict", id="policy-unknown"),
        pytest.param("targets: {a: {max_concurrent: 65}}\n", "must be at most 64", id="per-host-limit-too-high"),
        pytest.param('targets: {a: {command: "x\\ny"}}\n', "must be one line", id="command-multiline"),
        pytest.param("targets: {a: {user: ''}}\n", "must not be empty", id="user-empty"),
        pytest.param("targets: {'a b': {}}\n", "must be letters, digits", id="name-with-space"),
        pytest.param("targets: {a: {}, a: {}}\n", "duplicate", id="duplicate-key"),
        pytest.param(
            "groups: {g: {targets: {a: }}}\ntargets: {a: }\n", 'target "a" is defined twice', id="name-in-two-places"
        ),
        pytest.param("groups: {g: {targets: [a]}}\n", "must be a mapping of target names", id="targets-as-list"),
        pytest.param("targets: {a: {shell: bash}}\n", "must be one of posix, cmd, powershell", id="shell-unknown"),
        pytest.param(
            """targets: {a: {shell: cmd, command: '"C:\\nv\\nvidia-smi.exe"'}}\n""",
            'target "a": with shell: cmd, command is the program and cannot contain a double quote',
            id="cmd-program-quoted-by-hand",
        ),
        pytest.param(
            """defaults: {shell: cmd}\ntargets: {a: {command: 'a"b'}}\n""",
            "cannot contain a double quote",
            id="cmd-program-checked-after-inheritance",
        ),
    ],
)
def test_a_bad_targets_file_is_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(TargetsError, match=r"^t\.yml: ") as caught:
        parse_targets(text, "t.yml")
    assert problem in str(caught.value)


def test_a_target_setting_beats_its_groups_which_beats_the_defaults() -> None:
    text = json.dumps({
        "defaults": {"user": "d", "port": 2200, "timeout": "3s"},
        "groups": {"g": {"user": "g", "port": 2201, "targets": {"a": {"user": "a"}, "b": None}}},
        "targets": {"c": {"host": "10.0.0.3"}},
    })  # fmt: skip
    targets = parse_targets(text).by_name
    assert [(t.name, t.host, t.settings.user, t.settings.port) for t in targets.values()] == [
        ("a", "a", "a", 2201),
        ("b", "b", "g", 2201),
        ("c", "10.0.0.3", "d", 2200),
    ]
    assert {t.settings.timeout_seconds for t in targets.values()} == {3.0}


def test_unset_settings_take_the_documented_defaults() -> None:
    target = parse_targets("targets: {a: }\n").by_name["a"]
    assert target.settings == Settings()
    assert target.settings.host_key_policy is HostKeyPolicy.STRICT


def test_a_fifo_in_place_of_the_file_is_refused(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "targets.yml"
    os.mkfifo(fifo)
    with pytest.raises(TargetsError, match="not a regular file"):
        load_targets(str(fifo))


# -- the --fleet.* flags -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"fleet_max_concurrent": 0}, "--fleet.max-concurrent must be between 1 and 4096, got 0", id="zero"
        ),
        pytest.param(
            {"fleet_max_concurrent": 4097}, "--fleet.max-concurrent must be between 1 and 4096, got 4097", id="too-many"
        ),
        pytest.param(
            {"fleet_targets_file": "t.yml", "telemetry_path": "/probe"},
            "web.telemetry-path must not be /probe with --fleet.targets-file: the probes live there",
            id="telemetry-path-on-the-probe-route",
        ),
    ],
)
def test_fleet_flags_are_validated_at_startup(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(dataclasses.replace(Config(), **changes))  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_an_invalid_targets_file_stops_the_exporter_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "targets.yml"
    path.write_text("targets:\n  a: {prot: 22}\n", encoding="utf-8")
    code, log = run_exporter_to_exit(["--fleet.targets-file", str(path), "--collect.backend=demo"])
    assert code == 1
    assert "invalid --fleet.targets-file" in log
    assert 'line 2: targets.a: unknown key \\"prot\\"' in log


# -- field discovery per target (backends/fleet/backend.py) --------------------------------------------------


class ScriptedRunner:
    """Answers the exec pipeline's nvidia-smi runs in-process: one GPU of ``driver``; ``hang`` never answers,
    ``fail`` exits 1."""

    def __init__(self) -> None:
        self.target = parse_targets("targets: {a: {fields: 'temperature.gpu'}}\n").by_name["a"]
        self.driver = "550.54.15"
        self.mode = "answer"

    @property
    def description(self) -> str:
        return "scripted"

    async def run(self, args: Sequence[str]) -> RunResult:
        if self.mode == "hang":
            await asyncio.Event().wait()
        if self.mode == "fail":
            return RunResult("", "injected", 1)
        if args[0] == "--version":
            return RunResult("CUDA Version : 12.4\n", "", 0)
        fields = args[0].removeprefix("--query-gpu=").split(",")
        cells = [self.driver if field == "driver_version" else "1" for field in fields]
        return RunResult(", ".join(fields) + "\n" + ", ".join(cells) + "\n", "", 0)


def _driver_changes(runner: ScriptedRunner) -> None:
    runner.driver = "560.35.03"


def _fails(runner: ScriptedRunner) -> None:
    runner.mode = "fail"


def _hangs(runner: ScriptedRunner) -> None:
    runner.mode = "hang"


@pytest.mark.parametrize(
    ("event", "discoveries"),
    [
        pytest.param(_driver_changes, 2, id="a-new-driver-version-redoes-discovery"),
        pytest.param(_fails, 2, id="a-failed-collection-redoes-discovery"),
        pytest.param(_hangs, 1, id="a-timed-out-collection-keeps-the-fields"),
    ],
)
def test_field_discovery_is_cached_until_the_driver_changes_or_a_collection_fails(
    event: Callable[[ScriptedRunner], None], discoveries: int
) -> None:
    pytest.importorskip("asyncssh", reason="the fleet needs asyncssh (pip install '.[fleet]')")
    from nvidia_gpu_exporter.backends.fleet.backend import TargetBackend

    runner = ScriptedRunner()
    backend = TargetBackend(runner, compute_apps=False)  # type: ignore[arg-type]  # duck-typed SshRunner

    async def scenario() -> int:
        await backend.collect()
        await backend.collect()  # cached: no second discovery
        event(runner)
        with contextlib.suppress(CollectionError, asyncio.TimeoutError):
            await asyncio.wait_for(backend.collect(), 0.05)
        runner.mode = "answer"
        await backend.collect()
        await backend.collect()
        return backend.discoveries

    assert asyncio.run(scenario()) == discoveries


def test_the_documented_targets_file_parses_and_every_setting_is_in_its_table() -> None:
    from harness import REPO
    from nvidia_gpu_exporter.backends.fleet.command import RemoteShell
    from nvidia_gpu_exporter.backends.fleet.targets import SETTING_KEYS

    section = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8").split("\n## The targets file\n", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    gaming_pc = parse_targets(example).by_name["gaming-pc"]
    assert gaming_pc.settings.shell is RemoteShell.CMD
    assert " " in gaming_pc.settings.command  # the documented path with spaces
    table = section.split("\n## ", 1)[0]
    assert [key for key in SETTING_KEYS if f"\n| `{key}` |" not in table] == []

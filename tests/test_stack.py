"""The two "everything at once" stacks: deploy/compose/ (Docker Compose) and the Windows all-in-one installer.

Both are written by deploy/build_stack.py from one table (versions, ports, job, downloads and digests). The tests
check that the committed files are what it writes, the compose files against the compose-spec JSON schema (the copy
vendored by the check-jsonschema package), the Prometheus configs with `promtool check config` laid out as each
stack lays them out, the Alertmanager config with `amtool check-config`, the Grafana provisioning files against the
structure Grafana documents, the flags each stack gives the exporter against the exporter's own parser, and every
PowerShell script with a PowerShell grammar (tree-sitter-powershell), failing on any ERROR or MISSING node.

The schema, the grammar and promtool/amtool are optional here (skips say what is missing); .ci/steps/40-kubernetes.sh
installs all of them and fails if any test of this file was skipped.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from deploy_helpers import (
    DEPLOY,
    JOB,
    RULES_FILE,
    alertmanager,
    binary,
    get_json,
    prometheus,
    skip_reason,
    wait_target_up,
)
from harness import REPO, Exporter, load_script, start_exporter
from nvidia_gpu_exporter import __version__, preflight
from polling import wait_until
from winget_schema import SCHEMAS as WINGET_SCHEMAS

COMPOSE = DEPLOY / "compose"
INSTALL = REPO / "install"
WINDOWS = INSTALL / "windows"
SCRIPTS = sorted(INSTALL.glob("*.ps1"))
GRAFANA_DATASOURCE_TYPES = {"prometheus", "alertmanager"}
# https://grafana.com/docs/grafana/latest/administration/provisioning/: the keys of a data source and of a
# dashboard provider in provisioning files of apiVersion 1.
DATASOURCE_KEYS = {
    "name", "type", "access", "orgId", "uid", "url", "user", "database", "basicAuth", "basicAuthUser",
    "withCredentials", "isDefault", "jsonData", "secureJsonData", "version", "editable",
}  # fmt: skip
PROVIDER_KEYS = {
    "name", "orgId", "folder", "folderUid", "type", "disableDeletion", "updateIntervalSeconds", "allowUiUpdates",
    "options",
}  # fmt: skip
PROVIDER_OPTION_KEYS = {"path", "foldersFromFilesStructure"}
# The top-level keys of Scoop's app manifest schema (ScoopInstaller/Scoop schema.json, additionalProperties: false).
SCOOP_KEYS = {
    "##", "_comment", "architecture", "autoupdate", "bin", "persist", "checkver", "cookie", "depends",
    "description", "env_add_path", "env_set", "extract_dir", "extract_to", "hash", "homepage", "innosetup",
    "installer", "license", "msi", "notes", "post_install", "pre_install", "psmodule", "shortcuts", "suggest",
    "uninstaller", "url", "version",
}  # fmt: skip
SCOOP_HASH = re.compile(
    r"^([a-fA-F0-9]{64}|(sha1|sha256|sha512|md5):([a-fA-F0-9]{32}|[a-fA-F0-9]{40}|[a-fA-F0-9]{64}|[a-fA-F0-9]{128}))$"
)
DIGEST_LENGTHS = {"SHA256": 64, "SHA512": 128}


stack = load_script(DEPLOY / "build_stack.py")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def compose_file() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE / "compose.yaml")
    return data


def bind_mounts(service: str) -> Iterator[tuple[Path, str]]:
    """(host path, container path) of each bind mount of a compose service (named volumes left out)."""
    for volume in compose_file()["services"][service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            yield (COMPOSE / source).resolve(), target


def exporter_command() -> list[str]:
    """The compose file's exporter flags, each bind-mounted file named where it lies on this machine."""
    mounts = {target: str(source) for source, target in bind_mounts("nvidia_gpu_exporter")}
    flags = []
    for flag in compose_file()["services"]["nvidia_gpu_exporter"]["command"]:
        name, equals, value = flag.partition("=")
        flags.append(f"{name}={mounts[value]}" if equals and value in mounts else flag)
    return flags


# --------------------------------------------------------------------------------------------------------------
# Generated from one place


def test_committed_files_are_what_build_stack_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "build_stack.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"run python deploy/build_stack.py:\n{result.stderr}"


def test_the_stack_pins_the_exporter_version_of_the_package() -> None:
    assert stack.windows_data()["Package"] == f"nvidia-gpu-exporter[windows]=={__version__}"


# --------------------------------------------------------------------------------------------------------------
# Docker Compose


def compose_schema() -> dict[str, Any]:
    pytest.importorskip("check_jsonschema", reason=skip_reason("check-jsonschema (it vendors the compose-spec schema)"))
    from importlib.resources import files

    schema: dict[str, Any] = json.loads(
        files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text(encoding="utf-8")
    )
    return schema


def schema_errors(document: Any) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema", reason=skip_reason("jsonschema"))
    validator = jsonschema.Draft202012Validator(compose_schema())
    return [f"{'/'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(document)]


@pytest.mark.parametrize("name", ["compose.yaml", "compose.gpu.yaml"])
def test_compose_file_follows_the_compose_spec_schema(name: str) -> None:
    assert schema_errors(load_yaml(COMPOSE / name)) == []


def _misspelled_key(document: dict[str, Any]) -> None:
    document["services"]["grafana"]["volume"] = document["services"]["grafana"].pop("volumes")


def _port_as_mapping(document: dict[str, Any]) -> None:
    document["services"]["prometheus"]["ports"] = {"9090": 9090}


@pytest.mark.parametrize(
    "break_it", [_misspelled_key, _port_as_mapping], ids=["unknown-service-key", "ports-not-a-list"]
)
def test_compose_schema_check_rejects_a_broken_file(break_it: Any) -> None:
    document = copy.deepcopy(compose_file())
    break_it(document)
    assert schema_errors(document) != []


def test_compose_bind_mounts_and_build_context_exist() -> None:
    data = compose_file()
    missing = [
        str(source) for service in data["services"] for source, _target in bind_mounts(service) if not source.exists()
    ]
    build = data["services"]["nvidia_gpu_exporter"]["build"]
    context = (COMPOSE / build["context"]).resolve()
    assert (missing, (context / build["dockerfile"]).is_file()) == ([], True)


def test_compose_publishes_every_port_on_loopback_only() -> None:
    ports = [port for service in compose_file()["services"].values() for port in service.get("ports", [])]
    assert ports
    assert [port for port in ports if not port.startswith("127.0.0.1:")] == []


def test_gpu_override_changes_only_the_exporter() -> None:
    override = load_yaml(COMPOSE / "compose.gpu.yaml")
    exporter = override["services"]["nvidia_gpu_exporter"]
    assert (list(override), list(override["services"]), exporter["deploy"]["resources"]["reservations"]) == (
        ["services"],
        ["nvidia_gpu_exporter"],
        {"devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu", "utility"]}]},
    )


@pytest.mark.parametrize(
    ("flags", "backend"),
    [
        (compose_file()["services"]["nvidia_gpu_exporter"]["command"], "demo"),
        (load_yaml(COMPOSE / "compose.gpu.yaml")["services"]["nvidia_gpu_exporter"]["command"], "exec"),
        (stack.windows_data()["ExporterFlags"], "exec"),
    ],
    ids=["compose-demo", "compose-gpu", "windows"],
)
def test_the_exporter_accepts_the_flags_each_stack_gives_it(flags: list[str], backend: str) -> None:
    assert preflight.config_to_run(flags).backend.value == backend


@pytest.fixture(scope="module")
def compose_demo() -> Iterator[tuple[Exporter, str]]:
    """The compose file's exporter, started once for the checks of what it serves, with its first full scrape (it
    collects in the background: the first scrape may come before the first collection). It collects every second
    instead of the stack's 15 s, so a check waiting for a later collection waits seconds."""
    interval = "--collect.interval="
    handle = start_exporter([f"{interval}1s" if flag.startswith(interval) else flag for flag in exporter_command()])
    try:
        text = wait_until(handle.scrape, "a collection", until=lambda scrape: "nvidia_smi_gpu_info{" in scrape)
        yield handle, text
    finally:
        handle.stop()


def test_the_compose_demo_turns_every_simulated_fault_on(compose_demo: tuple[Exporter, str]) -> None:
    """The default demo is healthy; the stack's demo config turns the faults on, so its alerts fire (docs/stack.md)."""
    handle, text = compose_demo
    (said,) = handle.logged('msg="demo scenarios on: simulating faults"')
    for scenario in stack.DEMO_SCENARIOS:
        assert scenario in said
    assert re.search(r'^nvidia_smi_xid_errors_total\{uuid="[^"]+",xid="79"\} 2$', text, flags=re.MULTILINE)
    assert len(re.findall(r"^nvidia_smi_gpu_info\{", text, flags=re.MULTILINE)) == 2
    assert re.search(r"^nvidia_smi_gpus_expected 3$", text, flags=re.MULTILINE)  # one GPU lost from the bus
    assert len(re.findall(r"^nvidia_smi_mig_info\{", text, flags=re.MULTILINE)) == 3  # GI 2 (two CIs), GI 7


def test_the_compose_demo_serves_every_family_the_cost_dashboard_reads(compose_demo: tuple[Exporter, str]) -> None:
    """The stack ships the cost dashboard: its demo is its own Kubernetes node (docs/demo.md, "Pods"), so the
    dashboard's per-pod families have data without a cluster."""
    board = (DEPLOY / "grafana" / "nvidia-gpu-cost.json").read_text(encoding="utf-8")
    read = set(re.findall(r"\bnvidia_smi_\w+", board))
    assert read

    def unserved() -> set[str]:  # a collection may have no process of a pod whose jobs come and go
        return read - set(re.findall(r"^(nvidia_smi_\w+)[{ ]", compose_demo[0].scrape(), flags=re.MULTILINE))

    wait_until(unserved, "the cost dashboard's families", until=lambda missing: not missing, interval=0.5)


# --------------------------------------------------------------------------------------------------------------
# Prometheus and Alertmanager


def run_tool(tool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True, timeout=60, check=False)


def lay_out_compose_prometheus(root: Path) -> Path:
    """The Prometheus container's files, each bind mount of compose.yaml copied to its container path."""
    for source, target in bind_mounts("prometheus"):
        destination = root / target.lstrip("/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(source.read_bytes())
    return root / "etc" / "prometheus" / "prometheus.yml"


def lay_out_windows_prometheus(root: Path) -> Path:
    """The installer's layout: prometheus.yml with rules\\ beside it (install/windows-all-in-one.ps1)."""
    (root / "rules").mkdir()
    for rule in stack.windows_data()["Rules"]:
        (root / "rules" / rule).write_bytes((DEPLOY / "prometheus" / rule).read_bytes())
    config = root / "prometheus.yml"
    config.write_bytes((WINDOWS / "prometheus.yml").read_bytes())
    return config


@pytest.mark.parametrize(
    "lay_out", [lay_out_compose_prometheus, lay_out_windows_prometheus], ids=["compose", "windows"]
)
def test_promtool_checks_the_prometheus_config_with_our_rules(lay_out: Any, tmp_path: Path) -> None:
    promtool = binary("promtool")
    config = lay_out(tmp_path)
    result = run_tool(promtool, "check", "config", config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout + result.stderr


def test_promtool_fails_when_the_rules_file_is_missing(tmp_path: Path) -> None:
    promtool = binary("promtool")
    config = lay_out_windows_prometheus(tmp_path)
    (tmp_path / "rules" / RULES_FILE.name).unlink()
    assert run_tool(promtool, "check", "config", config).returncode != 0


@pytest.mark.parametrize("name", ["compose", "windows"])
def test_prometheus_scrapes_the_exporter_under_the_job_the_rules_expect(name: str) -> None:
    path = COMPOSE / "prometheus" / "prometheus.yml" if name == "compose" else WINDOWS / "prometheus.yml"
    jobs = {job["job_name"]: job["static_configs"][0]["targets"] for job in load_yaml(path)["scrape_configs"]}
    assert f'job="{JOB}"' in RULES_FILE.read_text(encoding="utf-8")
    assert jobs[JOB] == [
        f"nvidia_gpu_exporter:{stack.EXPORTER_PORT}" if name == "compose" else f"127.0.0.1:{stack.EXPORTER_PORT}"
    ]


def test_amtool_checks_the_alertmanager_config() -> None:
    amtool = binary("amtool")
    result = run_tool(amtool, "check-config", COMPOSE / "alertmanager" / "alertmanager.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_amtool_rejects_a_route_to_an_unknown_receiver(tmp_path: Path) -> None:
    amtool = binary("amtool")
    config = load_yaml(COMPOSE / "alertmanager" / "alertmanager.yml")
    config["route"]["receiver"] = "nobody"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert run_tool(amtool, "check-config", path).returncode != 0


def test_prometheus_sends_alerts_to_the_compose_alertmanager() -> None:
    alerting = load_yaml(COMPOSE / "prometheus" / "prometheus.yml")["alerting"]
    assert alerting == {
        "alertmanagers": [{"static_configs": [{"targets": [f"alertmanager:{stack.ALERTMANAGER_PORT}"]}]}]
    }
    assert "alertmanager" in compose_file()["services"]


def test_the_compose_configs_wire_the_exporter_prometheus_and_alertmanager_together(tmp_path: Path) -> None:
    """The stack's own Prometheus and Alertmanager configs, run for real, targets moved to loopback ports: the
    rules load, the exporter's target is up under the rules' job, and Prometheus finds the Alertmanager."""
    binary("prometheus")
    config = load_yaml(COMPOSE / "prometheus" / "prometheus.yml")
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["scrape_configs"] = [job for job in config["scrape_configs"] if job["job_name"] == JOB]
    rules = {f"rules/{RULES_FILE.name}": RULES_FILE.read_text(encoding="utf-8")}
    (tmp_path / "prometheus" / "rules").mkdir(parents=True)
    handle = start_exporter(exporter_command())
    try:
        config["scrape_configs"][0]["static_configs"] = [{"targets": [handle.address]}]
        with alertmanager(load_yaml(COMPOSE / "alertmanager" / "alertmanager.yml"), tmp_path / "alertmanager") as am:
            config["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{am.port}"]}]
            with prometheus(config, tmp_path / "prometheus", rules) as prom:
                groups = get_json(prom.url + "/api/v1/rules")["data"]["groups"]
                expected = load_yaml(RULES_FILE)["groups"]
                assert [(group["name"], len(group["rules"])) for group in groups] == [
                    (group["name"], len(group["rules"])) for group in expected
                ]
                wait_target_up(prom, JOB)
                wait_until(
                    lambda: any(
                        f"127.0.0.1:{am.port}" in manager["url"]
                        for manager in get_json(prom.url + "/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
                    ),
                    "Prometheus to find the Alertmanager",
                    timeout=60,
                    interval=0.2,
                )
    finally:
        handle.stop()


# --------------------------------------------------------------------------------------------------------------
# Grafana provisioning


PROVISIONING = {
    "compose": COMPOSE / "grafana" / "provisioning",
    "windows": WINDOWS / "grafana",
}


def datasource_problems(document: Any) -> list[str]:
    problems = []
    if document.get("apiVersion") != 1:
        problems.append("apiVersion must be 1")
    sources = document.get("datasources")
    if not isinstance(sources, list) or not sources:
        return [*problems, "datasources must be a non-empty list"]
    for source in sources:
        problems += [f"unknown key {key}" for key in sorted(set(source) - DATASOURCE_KEYS)]
        problems += [f"missing {key}" for key in ("name", "type", "url") if not source.get(key)]
        if source.get("type") not in GRAFANA_DATASOURCE_TYPES:
            problems.append(f"type {source.get('type')!r}")
        if source.get("access", "proxy") not in {"proxy", "direct"}:
            problems.append(f"access {source.get('access')!r}")
    if sum(bool(source.get("isDefault")) for source in sources) > 1:
        problems.append("more than one isDefault")
    return problems


def provider_problems(document: Any) -> list[str]:
    problems = []
    if document.get("apiVersion") != 1:
        problems.append("apiVersion must be 1")
    providers = document.get("providers")
    if not isinstance(providers, list) or not providers:
        return [*problems, "providers must be a non-empty list"]
    for provider in providers:
        problems += [f"unknown key {key}" for key in sorted(set(provider) - PROVIDER_KEYS)]
        options = provider.get("options", {})
        problems += [f"unknown option {key}" for key in sorted(set(options) - PROVIDER_OPTION_KEYS)]
        if not provider.get("name") or provider.get("type") != "file" or not options.get("path"):
            problems.append("a file provider needs name, type: file and options.path")
    return problems


@pytest.mark.parametrize("name", sorted(PROVISIONING))
def test_grafana_datasource_file_has_grafanas_format(name: str) -> None:
    assert datasource_problems(load_yaml(PROVISIONING[name] / "datasources" / "prometheus.yaml")) == []


@pytest.mark.parametrize("name", sorted(PROVISIONING))
def test_grafana_dashboard_provider_file_has_grafanas_format(name: str) -> None:
    assert provider_problems(load_yaml(PROVISIONING[name] / "dashboards" / "nvidia-gpu-exporter.yaml")) == []


@pytest.mark.parametrize(
    ("check", "document"),
    [
        (datasource_problems, {"apiVersion": 1, "datasources": [{"name": "P", "type": "prometheus", "uri": "x"}]}),
        (datasource_problems, {"apiVersion": 2, "datasources": [{"name": "P", "type": "prometheus", "url": "x"}]}),
        (provider_problems, {"apiVersion": 1, "providers": [{"name": "d", "type": "file", "options": {}}]}),
    ],
    ids=["datasource-misspelled-url", "datasource-wrong-api-version", "provider-without-path"],
)
def test_grafana_format_check_rejects_a_broken_file(check: Any, document: dict[str, Any]) -> None:
    assert check(document) != []


def test_compose_grafana_mounts_every_dashboard_under_the_provider_path() -> None:
    """Every dashboard deploy/grafana/ ships, the cost dashboard included, not only those build_stack.py lists."""
    provider = load_yaml(PROVISIONING["compose"] / "dashboards" / "nvidia-gpu-exporter.yaml")["providers"][0]
    mounted = {Path(target).name: source for source, target in bind_mounts("grafana")
               if Path(target).parent.as_posix() == provider["options"]["path"]}  # fmt: skip
    assert mounted == {board.name: board for board in sorted((DEPLOY / "grafana").glob("*.json"))}


def test_compose_grafana_mounts_the_provisioning_folders() -> None:
    targets = {target: source for source, target in bind_mounts("grafana")}
    assert targets["/etc/grafana/provisioning/datasources"] == PROVISIONING["compose"] / "datasources"
    assert targets["/etc/grafana/provisioning/dashboards"] == PROVISIONING["compose"] / "dashboards"


@pytest.mark.parametrize("board", stack.COMPOSE_DASHBOARDS, ids=lambda board: board.name)
def test_dashboards_pick_the_provisioned_datasource_type(board: Path) -> None:
    variables = json.loads(board.read_text(encoding="utf-8"))["templating"]["list"]
    datasource = next(variable for variable in variables if variable["type"] == "datasource")
    assert datasource["query"] == stack.grafana_datasources("http://x")["datasources"][0]["type"]


# --------------------------------------------------------------------------------------------------------------
# Windows: the scripts, their data and the WinSW services


def powershell_parser() -> Any:
    reason = skip_reason("tree-sitter and tree-sitter-powershell (the PowerShell grammar)")
    tree_sitter = pytest.importorskip("tree_sitter", reason=reason)
    grammar = pytest.importorskip("tree_sitter_powershell", reason=reason)
    return tree_sitter.Parser(tree_sitter.Language(grammar.language()))


def powershell_errors(source: bytes) -> list[str]:
    parser = powershell_parser()
    errors: list[str] = []
    stack_nodes = [parser.parse(source).root_node]
    while stack_nodes:
        node = stack_nodes.pop()
        if node.is_error or node.is_missing:
            line, column = node.start_point
            errors.append(
                f"line {line + 1}, column {column + 1}: {'missing' if node.is_missing else 'error'} {node.type}"
            )
        stack_nodes.extend(node.children)
    return errors


def test_there_are_powershell_scripts_to_parse() -> None:
    assert [script.name for script in SCRIPTS] == ["windows-all-in-one.ps1", "windows-uninstall.ps1"]


@pytest.mark.parametrize("script", [*SCRIPTS, WINDOWS / "stack.psd1"], ids=lambda path: path.name)
def test_powershell_file_parses(script: Path) -> None:
    assert powershell_errors(script.read_bytes()) == []


def docs_powershell_blocks() -> list[str]:
    """The ```powershell blocks of docs/windows.md and INSTALL.md: what a reader pastes, so it must parse as the
    scripts do (and an unquoted ``--flag.name=value``, which PowerShell splits at the ".", does not)."""
    blocks: list[str] = []
    for page in (REPO / "docs" / "windows.md", REPO / "INSTALL.md"):
        text = page.read_text(encoding="utf-8")
        blocks += re.findall(r"^```powershell\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    return blocks


def test_docs_windows_has_powershell_blocks() -> None:
    assert any("winget install --manifest" in block for block in docs_powershell_blocks())


@pytest.mark.parametrize("block", docs_powershell_blocks(), ids=lambda block: block.splitlines()[0][:40])
def test_powershell_block_of_the_windows_docs_parses(block: str) -> None:
    assert powershell_errors(block.encode()) == []
    assert powershell_pitfalls(block.encode()) == []


@pytest.mark.parametrize(
    "source",
    ["function f { if ($x) { 'a' }", "$x = @(1, 2", "Write-Host ('a' + )"],
    ids=["unclosed-brace", "unclosed-array", "missing-operand"],
)
def test_powershell_parse_check_rejects_broken_code(source: str) -> None:
    assert powershell_errors(source.encode()) != []


# PowerShell's automatic variables that a script must not assign (read-only ones throw, the others break the
# script silently): about_Automatic_Variables.
AUTOMATIC_VARIABLES = {
    "_", "args", "error", "executioncontext", "home", "host", "input", "iscoreclr", "islinux", "ismacos",
    "iswindows", "myinvocation", "pid", "profile", "pscommandpath", "pshome", "psitem", "psscriptroot",
    "psversiontable", "shellid", "this",
}  # fmt: skip
# "$name:" in an expandable string is a drive-qualified variable (like $env:X) missing its name: a parse error
# in PowerShell that the grammar accepts. "${name}:" or "$($name):" is meant.
_DRIVE_WITHOUT_NAME = re.compile(r"(?<![`$])\$[A-Za-z_]\w*:(?![\w{])")


def powershell_pitfalls(source: bytes) -> list[str]:
    """What PowerShell refuses or mis-runs although the grammar parses it."""
    parser = powershell_parser()
    problems: list[str] = []
    nodes = [parser.parse(source).root_node]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        line = node.start_point[0] + 1
        targets = []
        if node.type == "left_assignment_expression":
            targets = [node]
        elif node.type in {"foreach_statement", "script_parameter"}:
            targets = [child for child in node.children if child.type == "variable"][:1]
        for target in targets:
            name = (target.text or b"").decode().strip().lstrip("$").lower()
            if name in AUTOMATIC_VARIABLES:
                problems.append(f"line {line}: assigns the automatic variable ${name}")
        if node.type == "expandable_string_literal":
            for match in _DRIVE_WITHOUT_NAME.finditer((node.text or b"").decode()):
                problems.append(f"line {line}: {match.group()} needs ${{}} around the variable name")
    return problems


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_powershell_script_avoids_what_powershell_refuses(script: Path) -> None:
    assert powershell_pitfalls(script.read_bytes()) == []


@pytest.mark.parametrize(
    "source",
    ["$home = Join-Path $a 'b'", "foreach ($input in $items) { }", 'throw "$path: not found"'],
    ids=["assigns-home", "loops-over-input", "drive-without-name"],
)
def test_powershell_pitfall_check_finds_each_pitfall(source: str) -> None:
    assert len(powershell_pitfalls(source.encode())) == 1


@pytest.mark.parametrize(
    "source",
    ["$grafanaHome = 1", 'Write-Host "${path}: $env:TEMP $($x): done"'],
    ids=["ordinary-variable", "delimited-names"],
)
def test_powershell_pitfall_check_accepts_correct_code(source: str) -> None:
    assert powershell_pitfalls(source.encode()) == []


def guarded_commands(source: bytes, name: str, mentioning: str = "") -> list[tuple[int, set[str]]]:
    """Each call of the command ``name`` (whose arguments mention ``mentioning``): its line, and what it runs under:
    the conditions of the `if` branches around it (not their `else`) and ``function NAME`` of its function."""
    calls = []
    nodes = [powershell_parser().parse(source).root_node]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        command_name = node.child_by_field_name("command_name") if node.type == "command" else None
        if command_name is None or (command_name.text or b"").decode().lower() != name.lower():
            continue
        if mentioning.encode() not in (node.text or b""):
            continue
        guards = set()
        child, parent = node, node.parent
        while parent is not None:
            if parent.type == "if_statement" and child.type == "statement_block":
                guards.add((parent.child_by_field_name("condition").text or b"").decode())
            if parent.type == "function_statement":
                function = next(item for item in parent.children if item.type == "function_name")
                guards.add(f"function {(function.text or b'').decode()}")
            child, parent = parent, parent.parent
        calls.append((node.start_point[0] + 1, guards))
    return calls


# What a script may do only when asked: (script, command, an argument it mentions, the guard it must run under).
GUARDED = [
    ("windows-uninstall.ps1", "Remove-Item", "$DataDir", "$RemoveData"),
    ("windows-all-in-one.ps1", "New-NetFirewallRule", "", "function Set-FirewallRules"),
    ("windows-all-in-one.ps1", "Set-FirewallRules", "", "$OpenFirewall"),
]


@pytest.mark.parametrize(
    ("script", "command", "mentioning", "guard"),
    GUARDED,
    ids=["uninstall-keeps-data-unless-asked", "firewall-rules-in-one-function", "firewall-only-when-asked"],
)
def test_scripts_do_only_when_asked(script: str, command: str, mentioning: str, guard: str) -> None:
    calls = guarded_commands((INSTALL / script).read_bytes(), command, mentioning)
    assert calls
    assert [line for line, guards in calls if guard not in guards] == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("if ($RemoveData) { Remove-Item $DataDir }", [{"$RemoveData"}]),
        ("if ($RemoveData) { } else { Remove-Item $DataDir }", [set()]),
        ("Remove-Item $DataDir", [set()]),
        ("function F { if ($A) { if ($B) { Remove-Item $DataDir } } }", [{"$A", "$B", "function F"}]),
        ("Remove-Item $Other", []),
    ],
    ids=["guarded", "in-the-else-branch", "unguarded", "nested", "other-argument"],
)
def test_guarded_commands_sees_the_conditions_around_a_call(source: str, expected: list[set[str]]) -> None:
    assert [guards for _line, guards in guarded_commands(source.encode(), "remove-item", "$DataDir")] == expected


def _lookup(data: dict[str, Any], path: list[str]) -> bool:
    value: Any = data
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_every_stack_value_a_script_reads_exists(script: Path) -> None:
    """`$Stack.Downloads.Winsw.Digest` and the like name keys of stack.psd1, written by build_stack.py."""
    references = set(re.findall(r"\$Stack((?:\.\w+)+)", script.read_text(encoding="utf-8")))
    assert references
    data = stack.windows_data()
    assert [ref for ref in sorted(references) if not _lookup(data, ref.lstrip(".").split("."))] == []


@pytest.mark.parametrize(
    "path", [*SCRIPTS, *(path for path in sorted(WINDOWS.rglob("*")) if path.is_file())], ids=lambda path: path.name
)
def test_windows_files_are_ascii(path: Path) -> None:
    """Windows PowerShell 5.1 reads a script, and Get-Content a template, without a BOM in the ANSI code page."""
    text = path.read_bytes()
    assert [(number, line) for number, line in enumerate(text.splitlines(), 1) if not line.isascii()] == []


def test_the_installer_fills_in_every_placeholder_of_the_templates() -> None:
    script = (INSTALL / "windows-all-in-one.ps1").read_text(encoding="utf-8")
    used = {
        token for path in WINDOWS.rglob("*") if path.is_file() for token in re.findall(r"@[A-Z_]+@", path.read_text())
    }
    assert used == set(stack.TOKENS)
    assert ".Replace($Stack.InstallToken, $InstallDir).Replace($Stack.DataToken, $DataDir)" in script


@pytest.mark.parametrize(
    "name", ["grafana/dashboards/nvidia-gpu-exporter.yaml", "grafana/datasources/prometheus.yaml", "prometheus.yml"]
)
def test_yaml_templates_stay_valid_with_windows_folders_filled_in(name: str) -> None:
    """The installer's plain text replacement: a folder with spaces and backslashes must stay one YAML string."""
    install, data = r"C:\Program Files\nvidia-gpu-exporter", r"C:\ProgramData\nvidia-gpu-exporter"
    text = (WINDOWS / name).read_text(encoding="utf-8")
    filled = yaml.safe_load(text.replace(stack.INSTALL_TOKEN, install).replace(stack.DATA_TOKEN, data))
    expected = yaml.safe_load(text)
    if name.startswith("grafana/dashboards"):
        expected["providers"][0]["options"]["path"] = install + r"\grafana\dashboards"
    assert filled == expected


@pytest.mark.parametrize("item", stack.DOWNLOADS, ids=lambda item: item.name)
def test_each_download_is_pinned_by_version_and_digest(item: Any) -> None:
    version = {"prometheus": stack.PROMETHEUS_VERSION, "grafana": stack.GRAFANA_VERSION, "winsw": stack.WINSW_VERSION}
    assert item.url.startswith("https://")
    assert f"/v{version[item.name]}/" in item.url or f"-{version[item.name]}." in item.url
    assert re.fullmatch(f"[0-9a-f]{{{DIGEST_LENGTHS[item.algorithm]}}}", item.digest)
    assert item.folder == "" or item.file.startswith(item.folder)


@pytest.mark.parametrize("service", [stack.PROMETHEUS_SERVICE, stack.GRAFANA_SERVICE])
def test_winsw_service_definition_names_its_service_and_a_pinned_executable(service: str) -> None:
    root = ET.parse(WINDOWS / f"{service}.xml").getroot()
    folders = [item.folder for item in stack.DOWNLOADS if item.folder]
    executable = root.findtext("executable") or ""
    assert (root.tag, root.findtext("id"), root.findtext("startmode")) == ("service", service, "Automatic")
    assert any(executable.startswith(f"%BASE%\\{folder}\\") for folder in folders), executable


# --------------------------------------------------------------------------------------------------------------
# Scoop


def scoop_problems(manifest: dict[str, Any]) -> list[str]:
    problems = [f"unknown key {key}" for key in sorted(set(manifest) - SCOOP_KEYS)]
    if not re.fullmatch(r"[\w\-.+_]+", str(manifest.get("version", ""))):
        problems.append("version")
    if not SCOOP_HASH.match(str(manifest.get("hash", ""))):
        problems.append("hash")
    url = str(manifest.get("url", ""))
    if not url.startswith("https://") or "$" in url:
        problems.append("url")
    if not {"file", "script"} & set(manifest.get("uninstaller", {})):
        problems.append("uninstaller needs file or script")
    problems += [
        f"installer key {key}" for key in set(manifest.get("installer", {})) - {"args", "file", "script", "keep"}
    ]
    return problems


def fake_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / f"nvidia_gpu_exporter-{__version__}-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    return wheel


def test_scoop_manifest_of_a_release_follows_scoops_schema(tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path)
    manifest = stack.scoop_manifest("example/nvidia-gpu-exporter", wheel)
    assert scoop_problems(manifest) == []
    assert (manifest["hash"], manifest["url"]) == (
        hashlib.sha256(wheel.read_bytes()).hexdigest(),
        f"https://github.com/example/nvidia-gpu-exporter/releases/download/v{__version__}/{wheel.name}",
    )


def test_scoop_schema_check_rejects_a_manifest_without_a_digest(tmp_path: Path) -> None:
    manifest = stack.scoop_manifest("example/nvidia-gpu-exporter", fake_wheel(tmp_path))
    manifest["hash"] = ""
    assert scoop_problems(manifest) == ["hash"]


@pytest.mark.parametrize(
    ("repository", "wheel", "message"),
    [
        ("owner", f"nvidia_gpu_exporter-{__version__}-py3-none-any.whl", "repository must be OWNER/NAME"),
        ("a/b", "other-1.0-py3-none-any.whl", "not a wheel of nvidia-gpu-exporter"),
    ],
    ids=["repository-without-owner", "not-our-wheel"],
)
def test_scoop_manifest_refuses_bad_inputs(repository: str, wheel: str, message: str, tmp_path: Path) -> None:
    (tmp_path / wheel).write_bytes(b"x")
    with pytest.raises(ValueError, match=message):
        stack.scoop_manifest(repository, tmp_path / wheel)


def build_stack_without_pyyaml(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``deploy/build_stack.py args`` where importing PyYAML fails, as in the release build's environment."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "yaml.py").write_text("raise ImportError('no PyYAML here')\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(DEPLOY / "build_stack.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(shadow), "PATH": "/usr/bin:/bin"},
    )


def test_scoop_manifest_command_runs_without_pyyaml(tmp_path: Path) -> None:
    # The release build's environment (packaging/build-tools.txt) has no PyYAML; the manifest needs none.
    wheel = fake_wheel(tmp_path)
    result = build_stack_without_pyyaml(tmp_path, "--scoop-manifest", "a/b", str(wheel))
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["hash"] == hashlib.sha256(wheel.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# winget


WINGET_REPOSITORY = "Example-Org/nvidia_gpu_exporter"
WINGET_ID = "example-org.nvidia_gpu_exporter"  # lower case: the file names follow from $REPO


def fake_windows_zip(tmp_path: Path) -> Path:
    archive = tmp_path / f"nvidia_gpu_exporter-{__version__}-windows-amd64.zip"
    archive.write_bytes(b"not really a zip")
    return archive


def winget_set(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return stack.winget_manifests(WINGET_REPOSITORY, fake_windows_zip(tmp_path))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (f"{WINGET_ID}.yaml", "version"),
        (f"{WINGET_ID}.locale.en-US.yaml", "defaultLocale"),
        (f"{WINGET_ID}.installer.yaml", "installer"),
    ],
    ids=["version", "defaultLocale", "installer"],
)
def test_each_winget_manifest_follows_its_schema_as_the_yaml_it_is_written_as(
    name: str, kind: str, tmp_path: Path
) -> None:
    manifest = winget_set(tmp_path)[name]
    text = stack.winget_yaml(manifest)
    assert text.startswith(f"# yaml-language-server: $schema=https://aka.ms/winget-manifest.{kind}.1.10.0.schema")
    loaded = yaml.safe_load(text)
    assert loaded == manifest  # the hand-written YAML reads back as the manifest
    jsonschema.Draft7Validator(WINGET_SCHEMAS[kind]).validate(loaded)
    assert (loaded["ManifestType"], loaded["ManifestVersion"]) == (kind, "1.10.0")


@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [
        ("installer", "InstallerType", "Zip"),
        ("installer", "Installers", []),
        ("defaultLocale", "Publisher", "x"),
        ("version", "PackageIdentifier", "NoDot"),
        ("version", "UnknownField", "x"),
    ],
    ids=["installer-type-case", "no-installer", "short-publisher", "identifier-without-dot", "unknown-field"],
)
def test_the_winget_schemas_reject_a_broken_manifest(kind: str, field: str, value: object, tmp_path: Path) -> None:
    manifest = next(item for item in winget_set(tmp_path).values() if item["ManifestType"] == kind)
    manifest[field] = value
    assert not jsonschema.Draft7Validator(WINGET_SCHEMAS[kind]).is_valid(manifest)


def test_the_winget_installer_is_the_release_zip_with_its_sha256_as_a_machine_wide_portable(tmp_path: Path) -> None:
    archive = fake_windows_zip(tmp_path)
    installer = stack.winget_manifests(WINGET_REPOSITORY, archive)[f"{WINGET_ID}.installer.yaml"]
    assert installer["Installers"] == [
        {
            "Architecture": "x64",
            "InstallerUrl": f"https://github.com/{WINGET_REPOSITORY}/releases/download/v{__version__}/{archive.name}",
            "InstallerSha256": hashlib.sha256(archive.read_bytes()).hexdigest().upper(),
        }
    ]
    assert (installer["InstallerType"], installer["NestedInstallerType"]) == ("zip", "portable")
    # The one-folder build: winget puts its folder on PATH, so the executable finds _internal beside it.
    assert installer["NestedInstallerFiles"] == [{"RelativeFilePath": "nvidia_gpu_exporter.exe"}]
    assert installer["ArchiveBinariesDependOnPath"] is True
    assert installer["Scope"] == "machine"  # a LocalSystem service must not run from a user-writable folder


def test_the_winget_manifests_name_the_repository_and_one_version(tmp_path: Path) -> None:
    manifests = winget_set(tmp_path)
    assert {(item["PackageIdentifier"], item["PackageVersion"]) for item in manifests.values()} == {
        (WINGET_ID, __version__)
    }
    locale = manifests[f"{WINGET_ID}.locale.en-US.yaml"]
    assert (locale["Publisher"], locale["PackageUrl"]) == ("Example-Org", f"https://github.com/{WINGET_REPOSITORY}")
    # Quoted: PowerShell would split an unquoted --web.listen-address=... at its first ".".
    assert "nvidia_gpu_exporter install '--web.listen-address=:9835' '--collect" in locale["InstallationNotes"]


@pytest.mark.parametrize(
    ("repository", "archive", "message"),
    [
        ("owner", f"nvidia_gpu_exporter-{__version__}-windows-amd64.zip", "repository must be OWNER/NAME"),
        ("a/" + "n" * 33, f"nvidia_gpu_exporter-{__version__}-windows-amd64.zip", "makes no winget identifier"),
        ("ab/x..y", f"nvidia_gpu_exporter-{__version__}-windows-amd64.zip", "makes no winget identifier"),
        ("a/b", f"nvidia_gpu_exporter-{__version__}-windows-amd64.zip", "publisher name of 2 characters"),
        ("ab/cd", f"nvidia_gpu_exporter-{__version__}-py3-none-any.whl", "not a Windows zip"),
    ],
    ids=["repository-without-owner", "part-over-32", "empty-part", "one-letter-owner", "not-the-zip"],
)
def test_winget_manifests_refuse_bad_inputs(repository: str, archive: str, message: str, tmp_path: Path) -> None:
    (tmp_path / archive).write_bytes(b"x")
    with pytest.raises(ValueError, match=message):
        stack.winget_manifests(repository, tmp_path / archive)


def test_winget_manifests_command_writes_the_three_files_without_pyyaml(tmp_path: Path) -> None:
    # The Windows build job's Python has no PyYAML either.
    archive = fake_windows_zip(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = build_stack_without_pyyaml(tmp_path, "--winget-manifests", WINGET_REPOSITORY, str(archive), str(out))
    assert (result.returncode, result.stderr) == (0, "")
    names = sorted(path.name for path in out.iterdir())
    assert names == sorted(result.stdout.split()) == sorted(winget_set(tmp_path))
    for name, manifest in winget_set(tmp_path).items():
        assert (out / name).read_bytes() == stack.winget_yaml(manifest).encode("utf-8")  # LF, as on Linux

"""dcgm-exporter's YAML ``--config-file``, versions 1 and 2 (docs/dcgm.md, "The YAML config file"): each key that
maps onto this exporter sets what dcgm-exporter's would, each other is warned about with its line, what
dcgm-exporter refuses is refused naming the file and line, and flags > environment > file > defaults."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from async_helpers import WAIT_SECONDS, bounded, run
from conftest import StartExporter
from exposition_reader import names_in
from fakes import FakeBackend
from nvidia_gpu_exporter.app import web_settings
from nvidia_gpu_exporter.collector import Collector
from nvidia_gpu_exporter.config import Config, Profile
from nvidia_gpu_exporter.exposition.dcgm_config_file import DcgmConfigError, parse_dcgm_config, read_dcgm_config_file
from nvidia_gpu_exporter.exposition.metrics import Exposition
from nvidia_gpu_exporter.flags import FlagError, parse_args
from nvidia_gpu_exporter.httpserver.server import bind_socket
from nvidia_gpu_exporter.model.snapshot import GpuTable, Readings
from nvidia_gpu_exporter.web.metrics import MetricsEndpoint
from nvidia_gpu_exporter.web.server import WebServer, build_app
from polling import wait_until
from test_web_app import FIELDS, READINGS

SECOND = 1_000_000_000
PATH = "/etc/dcgm-exporter/config.yaml"
FILE = {"dcgm_collectors": "/c.csv", "dcgm_inline_counters": ()}

# -- what each key sets ----------------------------------------------------------------------------------------

SETS: list[tuple[str, dict[str, Any]]] = [
    ("version: 1\nmetrics:\n  file: /c.csv\n", FILE),
    ("version: 1\ncollection:\n  interval: 30s\n", {"collect_interval_ns": 30 * SECOND}),
    ("version: 1\ncollection:\n  interval: 1500ms\n", {"collect_interval_ns": 1500 * 1_000_000}),
    ("version: 2\nmetrics:\n  file: /c.csv\n  enableExporterMetrics: true\n", {**FILE, "exporter_metrics": True}),
    ("version: 2\nmetrics:\n  file: /c.csv\n  enableExporterMetrics: false\n", {**FILE, "exporter_metrics": False}),
    (
        "version: 2\ncollections:\n  - name: scrape\n    every: 5s\n    metrics:\n      include: ['*']\n",
        {"collect_interval_ns": 5 * SECOND},
    ),
    ("version: 2\nserver:\n  maxConcurrentScrapes: 16\n", {"max_requests": 16}),
    ("version: 2\nsources:\n  dcgm:\n    detectBindUnbind:\n      enabled: false\n", {}),
]


@pytest.mark.parametrize(("text", "expected"), SETS, ids=[text.replace("\n", " ") for text, _ in SETS])
def test_a_key_that_maps_sets_what_dcgm_exporter_would_without_a_warning(text: str, expected: dict[str, Any]) -> None:
    settings = parse_dcgm_config(text, PATH)
    assert settings.fields == expected
    assert settings.ignored == ()


def test_inline_fields_become_the_counters_with_their_lines() -> None:
    text = (
        "version: 2\nmetrics:\n  fields:\n"
        "    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature (in C).\n"
        "    - name: DCGM_FI_DEV_POWER_USAGE\n      prometheusType: gauge\n      help: Power draw (in W).\n"
    )
    counters = parse_dcgm_config(text, PATH).fields["dcgm_inline_counters"]
    assert [(c.name, c.metric_type, c.help, c.line, c.source) for c in counters] == [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", 4, PATH),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", 7, PATH),
    ]


WARNED: list[tuple[str, str, int]] = [
    (
        "version: 1\ncollection:\n  watchGroups:\n    - name: fast\n      interval: 5s\n"
        "      fields: [DCGM_FI_DEV_GPU_TEMP]\n",
        "collection.watchGroups[0] (fast)",
        4,
    ),
    (
        "version: 2\ncollections:\n  - name: fast\n    every: 5s\n    metrics:\n"
        "      include: [DCGM_FI_DEV_GPU_TEMP]\n",
        "collections[0] (fast)",
        3,
    ),
    (
        "version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 10m\n      maxKeepSamples: 0\n",
        "sources.dcgm.watch",
        4,
    ),
    (
        "version: 2\nsources:\n  dcgm:\n    detectBindUnbind:\n      enabled: true\n      pollInterval: 1s\n",
        "sources.dcgm.detectBindUnbind",
        4,
    ),
    (
        "version: 2\ncollections:\n  - name: scrape\n    every: 30s\n    metrics:\n      include: ['*']\n"
        "    sources:\n      dcgm:\n        watch:\n          maxKeepSamples: 2\n",
        "collections[0].sources.dcgm.watch",
        9,  # the key's line
    ),
    ("version: 2\nlabels:\n  static: []\n", "labels", 2),  # outside the schema as documented
    ("version: 2\nserver:\n  healthAddress: ':9401'\n", "server.healthAddress", 3),
]


@pytest.mark.parametrize(("text", "key", "line"), WARNED, ids=[key for _, key, _ in WARNED])
def test_a_key_without_a_counterpart_is_reported_once_with_its_line(text: str, key: str, line: int) -> None:
    ignored = parse_dcgm_config(text, PATH).ignored
    assert len(ignored) == 1, ignored
    assert ignored[0][:2] == (key, line)
    assert len(ignored[0][2]) > 20  # it says why


# -- what dcgm-exporter refuses -------------------------------------------------------------------------------

REFUSED: list[tuple[str, str]] = [
    ("metrics:\n  file: /c.csv\n", f"{PATH}: line 1: version: required"),
    ("version: 3\n", f"{PATH}: line 1: version: must be 1 or 2, got 3"),
    ("version: two\n", f'{PATH}: line 1: version: must be an integer, got "two"'),
    ("version: 1\nversion: 2\n", f'{PATH}: line 2: top level: duplicate key "version" (first at line 1)'),
    ("version: 1\nmetrics:\n  file: /a\n  file: /b\n", f'{PATH}: line 4: metrics: duplicate key "file"'),
    ("version: 1\n---\nversion: 1\n", f"{PATH}: line 2, column 1: invalid YAML: but found another document"),
    ("", f"{PATH}: no YAML document: version must be 1 or 2"),
    ("- version: 1\n", f"{PATH}: line 1: top level: must be a mapping, got a list"),
    ("version: 1\nmetrics: [\n", f"{PATH}: line 3, column 1: invalid YAML"),
    ("version: 1\nmetrics:\n  file: /c.csv\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n", "exactly one of file or"),
    ("version: 1\nmetrics: {}\n", f"{PATH}: line 2: metrics: must specify exactly one of file or fields"),
    ("version: 1\ncollection:\n  interval: 0s\n", f"{PATH}: line 3: collection.interval: must be greater than 0"),
    ("version: 1\ncollection:\n  interval: -5s\n", "line 3: collection.interval: must be greater than 0"),
    ("version: 1\ncollection:\n  interval: 1500us\n", "collection.interval: must be expressed in whole milliseconds"),
    ("version: 1\ncollection:\n  interval: soon\n", 'line 3: collection.interval: time: invalid duration "soon"'),
    (
        "version: 1\ncollections:\n  - name: scrape\n",
        f"{PATH}: line 3: collections: version 1 accepts only the singular collection block",
    ),
    ("version: 2\ncollection:\n  interval: 30s\n", "line 3: collection: version 2 uses collections; the two schemas"),
    ("version: 2\ncollections:\n  - every: 5s\n", f"{PATH}: line 3: collections[0].name: required"),
    ("version: 2\ncollections:\n  - name: a\n    every: 5s\n", f"{PATH}: line 3: collections[0].metrics: required"),
    (
        "version: 2\ncollections:\n  - name: a\n    every: 5s\n    metrics:\n      include: []\n",
        f"{PATH}: line 6: collections[0].metrics.include: must list at least one field pattern",
    ),
    (
        "version: 2\ncollections:\n  - name: a\n    every: 5s\n    metrics: {include: ['*']}\n"
        "  - name: a\n    every: 5s\n    metrics: {include: ['*']}\n",
        f"{PATH}: line 6: collections[1]: name 'a' is duplicated",
    ),
    (
        "version: 2\nserver:\n  maxConcurrentScrapes: 0\n",
        "line 3: server.maxConcurrentScrapes: must be at least 1, got 0",
    ),
    (
        "version: 2\nmetrics:\n  fields:\n    - name: GPU_TEMP\n      prometheusType: gauge\n      help: t\n",
        f"{PATH}:4: 'GPU_TEMP' is not a DCGM field name",
    ),
    (
        "version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: int\n      help: t\n",
        f"{PATH}:4: unknown Prometheus type 'int'",
    ),
    (
        "version: 2\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n",
        f"{PATH}: line 4: metrics.fields[0].help: required",
    ),
    (
        "version: 2\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: a}\n"
        "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: b}\n",
        f"{PATH}: line 5: metrics.fields[1]: name 'DCGM_FI_DEV_GPU_TEMP' duplicates metrics.fields[0]",
    ),
    ("version: 2\nmetrics:\n  enableExporterMetrics: maybe\n  file: /c\n", "enableExporterMetrics: must be true or"),
]


@pytest.mark.parametrize(("text", "message"), REFUSED, ids=[text.replace("\n", " ") or "empty" for text, _ in REFUSED])
def test_what_dcgm_exporter_refuses_is_refused_naming_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(DcgmConfigError, match=re.escape(message)):
        parse_dcgm_config(text, PATH)


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(DcgmConfigError, match=re.escape(f"cannot read the config file {tmp_path / 'absent.yaml'}")):
        read_dcgm_config_file(str(tmp_path / "absent.yaml"))
    large = tmp_path / "large.yaml"
    large.write_text("version: 1\n" + "#" * 70_000 + "\n", encoding="utf-8")
    with pytest.raises(DcgmConfigError, match="larger than 65536 bytes"):
        read_dcgm_config_file(str(large))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"version: 1\n\xff\n")
    with pytest.raises(DcgmConfigError, match=re.escape(f"{binary}:2: not UTF-8 text")):
        read_dcgm_config_file(str(binary))


# -- precedence: flags > environment > file > defaults ---------------------------------------------------------


@pytest.fixture
def config_file(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(
        "version: 1\nmetrics:\n  fields:\n"
        "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: GPU temperature (in C).}\n"
        "collection:\n  interval: 15s\n",
        encoding="utf-8",
    )
    return str(path)


@pytest.mark.parametrize(
    ("argv", "env", "interval_s"),
    [
        ([], {}, 15),  # the file beats the default (30 s)
        ([], {"DCGM_EXPORTER_INTERVAL": "20000"}, 20),  # the environment beats the file
        (["-c", "5000"], {"DCGM_EXPORTER_INTERVAL": "20000"}, 5),  # a flag beats both
    ],
    ids=["file", "environment", "flag"],
)
def test_flags_beat_the_environment_which_beats_the_file(
    config_file: str, argv: list[str], env: dict[str, str], interval_s: int
) -> None:
    config = parse_args(["--config-file", config_file, *argv], env).config
    assert config.collect_interval_ns == interval_s * SECOND


def test_an_explicit_counters_file_replaces_the_files_metric_source(config_file: str) -> None:
    config = parse_args(["--config-file", config_file, "-f", "/mine.csv"], {}).config
    assert config.dcgm_collectors == "/mine.csv"
    assert config.dcgm_inline_counters == ()
    assert parse_args([], {"DCGM_EXPORTER_CONFIG_FILE": config_file}).config.dcgm_inline_counters


def test_the_variable_alone_starts_the_dcgm_exporter_way_and_reports_each_ignored_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: 2\nsources:\n  dcgm:\n    watch:\n      maxKeepAge: 10m\n", encoding="utf-8")
    parsed = parse_args([], {"DCGM_EXPORTER_CONFIG_FILE": str(path)})
    assert parsed.dcgm_exporter
    assert [notice.option for notice in parsed.notices] == [f"{path}:4 sources.dcgm.watch"]


def test_a_bad_file_stops_the_start_naming_the_option_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: 1\ncollection:\n  interval: 0s\n", encoding="utf-8")
    message = f"invalid DCGM_EXPORTER_CONFIG_FILE: {path}: line 3: collection.interval: must be greater than 0"
    with pytest.raises(FlagError, match=re.escape(message)):
        parse_args([], {"DCGM_EXPORTER_CONFIG_FILE": str(path)})
    with pytest.raises(FlagError, match=re.escape(f"invalid --config-file: {path}: line 3")):
        parse_args([f"--config-file={path}"], {})


# -- served: the file's inline fields, /health with --health-require-gpus ---------------------------------------


def test_inline_fields_are_served_without_the_exporters_own_metrics(
    exporter: StartExporter, config_file: str, tmp_path: Path
) -> None:
    demo = tmp_path / "demo.yaml"
    demo.write_text("gpus: 1\n", encoding="utf-8")
    handle = exporter("--collect.backend=demo", f"--demo-config={demo}", "--config-file", config_file)
    text = wait_until(handle.scrape, "a DCGM scrape", until=lambda text: "DCGM_FI_" in text)
    names = names_in(text)
    assert "DCGM_FI_DEV_GPU_TEMP" in names
    assert not [name for name in names if name.startswith("DCGM_FI_") and name != "DCGM_FI_DEV_GPU_TEMP"]
    assert not [name for name in names if name.startswith(("process_", "promhttp_"))]  # dcgm-exporter's default
    # names dcgm-exporter never serves, which the operator's alerts on the cap and on reloads read
    assert {"nvidia_gpu_exporter_http_connections", "nvidia_gpu_exporter_build_info"} <= names


@contextlib.asynccontextmanager
async def serving(backend: FakeBackend, config: Config) -> AsyncIterator[str]:
    """The real web server on 127.0.0.1:0 in front of a collector of ``backend``; yields its URL."""
    settings = web_settings(config)
    collector = Collector(backend, timeout_seconds=None, interval_seconds=0.0)
    endpoint = MetricsEndpoint(collector, Exposition(backend.fields, backend.status_family), settings)
    server = WebServer(build_app(endpoint, settings), settings)
    await server.start([bind_socket("127.0.0.1:0")])
    collector.start()
    try:
        yield f"http://{server.addresses[0]}"
    finally:
        await collector.aclose()
        await server.stop()


async def health(url: str, *, scrape_first: bool) -> tuple[int, str, str | None]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_SECONDS)) as session:
        if scrape_first:  # one collection has finished
            async with session.get(url + "/metrics") as response:
                await response.read()
        async with session.get(url + "/health") as response:
            return response.status, await response.text(), response.headers.get("X-GPU-Collectors")


NO_GPU = Readings(GpuTable(()), None, "12.4")


@pytest.mark.parametrize(
    ("require", "readings", "scrape_first", "expected"),
    [
        (True, NO_GPU, True, (503, "no GPU collector registered", "0")),
        (True, READINGS, True, (200, "OK", None)),
        (False, NO_GPU, True, (200, "OK", None)),  # off by default, as dcgm-exporter's
        (True, NO_GPU, False, (200, "OK", None)),  # nothing collected yet: not known to see none
    ],
    ids=["required, none seen", "required, GPUs seen", "not required", "required, before a collection"],
)
def test_health_require_gpus_answers_503_once_a_collection_saw_no_gpu(
    require: bool, readings: Readings, scrape_first: bool, expected: tuple[int, str, str | None]
) -> None:
    config = Config(metrics_profile=Profile.DCGM, dcgm_health_require_gpus=require)
    backend = FakeBackend(gated=not scrape_first, fields=FIELDS, readings=readings)

    async def main() -> None:
        async with serving(backend, config) as url:
            assert await bounded(health(url, scrape_first=scrape_first)) == expected
        backend.gate.set()

    run(main)

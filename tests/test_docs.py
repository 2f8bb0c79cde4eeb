"""The docs under ``docs/`` describe what the code does: every family the exporter serves, every flag and
default, the naming and value examples, and every reference the code and docs make to a docs section."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import docblocks
from harness import FIXTURE_CAPTURES, MIG_FIXTURE, REPO, Exporter, fake_smi_command, start_exporter
from k8s_fakes import CGROUP_LAYOUTS, GPU0, LOAD_PIDS, make_proc, require_grpc
from nvidia_gpu_exporter.exposition.families import PREFIX, PROCESS_USAGE_SUCCESS, RESERVED_NAMES
from nvidia_gpu_exporter.exposition.jobs import job_families
from nvidia_gpu_exporter.exposition.naming import UNIT_TABLE, derive_name
from nvidia_gpu_exporter.exposition.podusage import pod_families
from nvidia_gpu_exporter.exposition.processusage import usage_families
from nvidia_gpu_exporter.exposition.text import format_value
from nvidia_gpu_exporter.flags import FLAGS, Kind, usage
from nvidia_gpu_exporter.kubernetes.slurm import process_jobs
from nvidia_gpu_exporter.model.fields import value_kind
from nvidia_gpu_exporter.model.gpuseconds import GpuSecondsLedger
from nvidia_gpu_exporter.model.podusage import PodEnergyLedger, pod_shares
from nvidia_gpu_exporter.model.processusage import DEFAULT_MAX_PROCESSES, cap_usage
from nvidia_gpu_exporter.model.snapshot import ProcessUsage, ProcessUsageRow
from nvidia_gpu_exporter.model.uuids import normalize_uuid
from nvidia_gpu_exporter.model.values import transform_value

DOCS = REPO / "docs"
METRICS = DOCS / "metrics.md"
COMPATIBILITY = DOCS / "compatibility.md"
FAMILY_HEADER = ("Family", "Type", "Unit", "Labels", "Served by", "HELP")
FIELD_HEADER = ("Query field", "Header nvidia-smi returns", "Metric", "Multiplier", "nvml", "demo")
FLAG_HEADER = ("Flag", "Default", "In the Go exporter")
# Built from parts so that this file does not trip its own check.
OUTSIDE_REFERENCES = (chr(0xA7), "shared" + "/spec", "anchor" + "-behavior")
SCANNED = ("src", "tests", "benchmarks", "docs", "deploy", "packaging")


# -- reading the docs -----------------------------------------------------------------------------------------


def tables(text: str) -> Iterator[tuple[tuple[str, ...], list[tuple[str, ...]]]]:
    """Every Markdown table of ``text``: its header cells and its rows of cells (indented tables too)."""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        if lines[index].strip().startswith("|") and index + 1 < len(lines) and "---" in lines[index + 1]:
            header = cells(lines[index])
            rows = []
            index += 2
            while index < len(lines) and lines[index].strip().startswith("|"):
                rows.append(cells(lines[index]))
                index += 1
            yield header, rows
        index += 1


def cells(line: str) -> tuple[str, ...]:
    return tuple(cell.strip() for cell in line.strip().strip("|").split("|"))


def rows_of(text: str, header: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [row for found, rows in tables(text) if found == header for row in rows]


def code(cell: str) -> str:
    """The text of a cell that is one code span (`` `x` `` -> ``x``)."""
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"not a code span: {cell!r}"
    return match.group(1)


def code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def section(text: str, heading: str) -> str:
    """The body of the section with this heading, up to the next heading of the same or a higher level."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, flags=re.MULTILINE)
    assert match, f"no section {heading!r}"
    level = len(match.group(1))
    rest = text[match.end() :]
    end = re.search(rf"^#{{1,{level}}} ", rest, flags=re.MULTILINE)
    return rest[: end.start()] if end else rest


def headings(path: Path) -> set[str]:
    return set(re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub renders it."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


METRICS_TEXT = METRICS.read_text(encoding="utf-8")
COMPATIBILITY_TEXT = COMPATIBILITY.read_text(encoding="utf-8")
DOCUMENTED_FAMILIES = {code(row[0]): row for row in rows_of(METRICS_TEXT, FAMILY_HEADER)}
FIELD_ROWS = rows_of(METRICS_TEXT, FIELD_HEADER)


# -- reading a scrape -----------------------------------------------------------------------------------------


SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? \S+")
LABEL_NAME = re.compile(r'[{,]([a-zA-Z_][a-zA-Z0-9_]*)="')


@dataclass
class ServedFamily:
    type: str
    help: str
    labels: set[str]


def served_families(text: str) -> dict[str, ServedFamily]:
    families: dict[str, ServedFamily] = {}
    for line in text.split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            families[name] = ServedFamily("", help_text, set())
        elif line.startswith("# TYPE "):
            name, _, metric_type = line[len("# TYPE ") :].partition(" ")
            families[name].type = metric_type
        elif line:
            match = SAMPLE.fullmatch(line)
            assert match, line
            families[match.group(1)].labels |= set(LABEL_NAME.findall(match.group(2) or ""))
    return families


def undocumented(served: dict[str, ServedFamily], backend: str = "") -> list[str]:
    """What ``docs/metrics.md`` gets wrong about these served families (empty when it is all right).

    ``backend`` names the field reference column (``nvml``, ``demo``) that must say ``yes`` for every
    query-field family served; exec serves whatever the driver lists, so it has no column.
    """
    column = FIELD_HEADER.index(backend) if backend else None
    problems: list[str] = []
    fields = {code(row[2]): row for row in FIELD_ROWS}
    for name, family in sorted(served.items()):
        row = DOCUMENTED_FAMILIES.get(name)
        if row is not None:
            if row[1] != family.type:
                problems.append(f"{name}: documented as {row[1]}, served as {family.type}")
            if code(row[5]) != family.help:
                problems.append(f"{name}: documented HELP {code(row[5])!r}, served {family.help!r}")
            missing = sorted(family.labels - set(code_spans(row[3])))
            if missing:
                problems.append(f"{name}: labels {missing} are not in the documented labels {row[3]!r}")
        elif name in fields:
            if code(fields[name][1]) != family.help:
                problems.append(f"{name}: documented header {fields[name][1]}, served HELP {family.help!r}")
            if family.type != "gauge":
                problems.append(f"{name}: query-field families are gauges, served as {family.type}")
            if column is not None and fields[name][column] != "yes":
                problems.append(f"{name}: served by {backend}, but its {backend} column says {fields[name][column]!r}")
        else:
            problems.append(f"{name}: served but not in docs/metrics.md")
    return problems


def scrapes(handle: Exporter, count: int) -> dict[str, ServedFamily]:
    served: dict[str, ServedFamily] = {}
    for _ in range(count):
        for name, family in served_families(handle.scrape()).items():
            served.setdefault(name, family).labels |= family.labels
    return served


# -- every served family is documented ------------------------------------------------------------------------

SERVING: dict[str, tuple[tuple[str, ...], str]] = {
    # The demo with every option; the second scrape adds the MIG activity families.
    "demo backend with every option": (
        (
            "--collect.backend=demo",
            "--collect.compute-apps",
            "--collect.compute-apps-mig",
            "--collect.pcie-throughput",
            "--collect.process-usage",
            "--collect.process-usage-max-processes=1",
        ),
        "demo",
    ),
    # The exec backend: its own status family and the fixture capture's fields.
    "exec backend on the MIG fixture capture": (
        (
            "--nvidia-smi-command",
            fake_smi_command(MIG_FIXTURE, "--state", "load"),
            "--collect.compute-apps",
            "--collect.process-usage",
        ),
        "",
    ),
}


@pytest.mark.parametrize(("args", "backend"), SERVING.values(), ids=SERVING.keys())
def test_every_served_family_is_documented_with_its_type_help_and_labels(args: tuple[str, ...], backend: str) -> None:
    handle = start_exporter(args)
    try:
        served = scrapes(handle, 2)
    finally:
        handle.stop()
    assert undocumented(served, backend) == []


def assert_served_and_documented(args: Sequence[str], expected: set[str], backend: str = "") -> None:
    """One scrape of an exporter started with ``args`` serves the ``expected`` families, and docs/metrics.md
    documents everything it serves (``backend``: as :func:`undocumented`)."""
    handle = start_exporter(args)
    try:
        served = scrapes(handle, 1)
    finally:
        handle.stop()
    assert expected <= set(served), sorted(expected - set(served))
    assert undocumented(served, backend) == []


def process_pods_args(tmp_path: Path, *flags: str) -> tuple[str, ...]:
    """A loaded MIG GPU whose first compute app runs in a pod's cgroup under a /proc made in ``tmp_path``, its
    compute apps attributed to pods, and ``flags``."""
    proc = make_proc(tmp_path, {LOAD_PIDS[0]: CGROUP_LAYOUTS[1][1]})
    return (
        "--nvidia-smi-command",
        fake_smi_command(MIG_FIXTURE, "--state", "load"),
        "--collect.compute-apps",
        "--kubernetes.process-pods",
        f"--kubernetes.proc-root={proc}",
        *flags,
    )


def test_kubernetes_attribution_families_are_documented(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    require_grpc()
    kubelet = request.getfixturevalue("kubelet")
    kubelet.set([("ml", "train", "trainer", "nvidia.com/gpu", [GPU0])])
    assert_served_and_documented(
        process_pods_args(tmp_path, "--kubernetes.pod-resources", f"--kubernetes.pod-resources-socket={kubelet.path}"),
        {"nvidia_smi_gpu_pod_info", "nvidia_smi_compute_app_pod_info", "nvidia_smi_kubernetes_attribution_up"},
    )


def test_per_pod_share_families_are_documented(tmp_path: Path) -> None:
    """Served only with process usage and process pods together (no kubelet needed: the pod comes from the cgroup)."""
    assert_served_and_documented(
        process_pods_args(tmp_path, "--collect.process-usage"),
        {"nvidia_smi_pod_gpu_share_ratio", "nvidia_smi_pod_power_draw_watts"},
    )


def test_web_config_reload_families_are_documented(tmp_path: Path) -> None:
    """Served only with ``--web.config.file``, which the runs above do not give."""
    web_config = tmp_path / "web.yml"
    web_config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", encoding="utf-8")
    assert_served_and_documented(
        ("--collect.backend=demo", f"--web.config.file={web_config}"),
        {
            "nvidia_gpu_exporter_web_config_last_reload_successful",
            "nvidia_gpu_exporter_web_config_last_reload_success_timestamp_seconds",
        },
        "demo",
    )


def test_every_reserved_name_has_a_documented_family() -> None:
    assert sorted(RESERVED_NAMES - set(DOCUMENTED_FAMILIES)) == []


def test_reserved_names_list_matches_the_code() -> None:
    listed = section(METRICS_TEXT, "Reserved names and collisions").split("\n- ")[1]
    suffixes = {span for span in code_spans(listed) if span != PREFIX}
    assert suffixes == {name.removeprefix(PREFIX) for name in RESERVED_NAMES}


# -- the naming rule and its examples -------------------------------------------------------------------------


def test_unit_table_matches_the_code() -> None:
    documented = rows_of(section(METRICS_TEXT, "Metric names"), ("Header ends with", "Name suffix", "Multiplier"))
    assert [(code(row[0]), code(row[1]), float(row[2])) for row in documented] == list(UNIT_TABLE)


def test_naming_examples_follow_the_rule() -> None:
    examples = rows_of(section(METRICS_TEXT, "Metric names"), ("Header", "Metric", "Multiplier"))
    assert examples
    for header, metric, multiplier in examples:
        derived = derive_name(code(header.split(" (")[0]))
        assert (derived.name, derived.multiplier) == (code(metric), float(multiplier)), header


def test_field_reference_rows_follow_the_naming_rule() -> None:
    assert len(FIELD_ROWS) > 100
    for query, header, metric, multiplier, _, _ in FIELD_ROWS:
        derived = derive_name(code(header))
        assert (derived.name, derived.multiplier) == (code(metric), float(multiplier)), query


def test_field_reference_nvml_column_is_the_catalog() -> None:
    from nvidia_gpu_exporter.backends.nvml.catalog import CATALOG, RFIELDS

    served = {code(row[0]): code(row[1]) for row in FIELD_ROWS if row[4] == "yes"}
    assert served == {field: RFIELDS[field] for field in CATALOG}


# -- value examples -------------------------------------------------------------------------------------------


def test_value_transformation_examples_hold() -> None:
    from nvidia_gpu_exporter.backends.nvml.catalog import RFIELDS

    examples = rows_of(section(COMPATIBILITY_TEXT, "Value transformation"), ("Field", "Cell", "Value"))
    assert len(examples) > 10
    for field_cell, cell_cell, value_cell in examples:
        field = "" if field_cell == "any" else code(field_cell)
        multiplier = derive_name(RFIELDS[field]).multiplier if field else 1.0
        raws = code_spans(cell_cell)
        expected = code_spans(value_cell) if value_cell.startswith("`") else [None] * len(raws)
        for raw, want in zip(raws, expected, strict=True):
            value = transform_value(raw, value_kind(field), multiplier, field)
            assert (None if value is None else format_value(value)) == want, (field, raw)


# -- flags ----------------------------------------------------------------------------------------------------


def help_defaults() -> dict[str, str]:
    """Each flag's default as ``--help`` prints it (booleans default to false)."""
    text = usage()
    defaults = {}
    for flag in FLAGS:
        match = re.search(rf"--(?:\[no-\])?{re.escape(flag.name)}[=\n].*?\n\s+.*?(?:\(default: \"(.*)\"\))?\n", text)
        assert match, flag.name
        defaults[flag.name] = "false" if flag.kind is Kind.BOOL else (match.group(1) or "")
    return defaults


def test_every_flag_is_documented_with_its_default() -> None:
    documented = {code(row[0]).removeprefix("--"): row[1] for row in rows_of(COMPATIBILITY_TEXT, FLAG_HEADER)}
    expected = {name: f"`{default}`" if default else "" for name, default in help_defaults().items()}
    assert documented == expected


# -- examples in the docs work --------------------------------------------------------------------------------


def yaml_examples(page: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_demo_config_example_starts_the_demo(tmp_path: Path) -> None:
    (example,) = yaml_examples(DOCS / "demo.md")
    config = tmp_path / "demo.yaml"
    config.write_text(example, encoding="utf-8")
    handle = start_exporter(("--collect.backend=demo", f"--demo-config={config}"))
    try:
        text = handle.scrape()
    finally:
        handle.stop()
    assert text.count("nvidia_smi_gpu_info{") == 4
    assert 'nvidia_smi_xid_errors_total{uuid="' in text
    assert text.count("nvidia_smi_mig_info{") == 2


def test_fake_config_example_is_answered(tmp_path: Path) -> None:
    (example,) = yaml_examples(DOCS / "fake-nvidia-smi.md")
    config = tmp_path / "fake.yaml"
    config.write_text(example, encoding="utf-8")
    capture = FIXTURE_CAPTURES / "fixture-windows-1gpu.txt"  # a one-GPU capture: `gpus:` replicates it
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "nvidia_gpu_exporter.fakesmi", "--config", str(config), "--capture", str(capture)),
            *("--query-gpu=uuid,serial,temperature.gpu", "--format=csv"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    rows = completed.stdout.strip().split("\n")[1:]
    assert rows[0].startswith("GPU-11111111-2222-4333-8444-555555555555, ")
    assert rows[1].endswith(", 1650000000001, 91")


# -- references -----------------------------------------------------------------------------------------------


def text_files(*roots: str) -> Iterator[Path]:
    for root in roots:
        for path in sorted((REPO / root).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".so", ".png"):
                yield path
    yield from sorted(REPO.glob("*.md"))


@pytest.mark.parametrize("needle", OUTSIDE_REFERENCES, ids=["section sign", "spec folder", "spec file"])
def test_nothing_refers_to_a_description_outside_the_repository(needle: str) -> None:
    found = [str(path.relative_to(REPO)) for path in text_files(*SCANNED) if needle.encode() in path.read_bytes()]
    assert found == []


# ``docs/<page>.md, "<Heading>"`` in code and tests; ``<page>.md, "<Heading>"`` or a link followed by
# ``, "<Heading>"`` in the docs themselves, where a heading may wrap across lines (and across comment lines);
# and the same for the pages at the repository root (INSTALL.md and the others), from anywhere.
DOC_REFERENCE = re.compile(r"(docs/)?([A-Za-z-]+\.md)\)?,? \"([^\"]+)\"")
REFERRING = ("src", "tests", "benchmarks", "docs", "deploy", "packaging", ".ci")
REFERRING_SUFFIXES = (".py", ".md", ".sh", ".txt", ".yaml", ".yml", ".tpl")


def names_a_heading(heading: str, page: Path) -> bool:
    """A heading of the page, or the start of one before its ``: detail`` or `` (issue N)``."""
    return any(found == heading or found.startswith((f"{heading}: ", f"{heading} (")) for found in headings(page))


def test_every_reference_to_a_docs_section_names_an_existing_heading() -> None:
    broken = []
    for path in sorted({*text_files(*REFERRING), *docblocks.pages()}):
        if path.suffix not in REFERRING_SUFFIXES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for prefix, page, wrapped in DOC_REFERENCE.findall(text):
            heading = " ".join(word for word in wrapped.split() if word != "#")
            in_docs = prefix or (path.parent == DOCS and (DOCS / page).is_file())
            target = DOCS / page if in_docs else REPO / page
            if (in_docs or target.is_file()) and not (target.is_file() and names_a_heading(heading, target)):
                broken.append(f"{path.relative_to(REPO)}: {prefix}{page} {heading!r}")
    assert broken == []


def test_every_link_in_the_docs_resolves() -> None:
    broken = []
    for page in docblocks.pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://")):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in {slug(h) for h in headings(linked)}:
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


# -- per-process usage: the series a GPU adds, as "Series per GPU" says ----------------------------------------


def usage_series_per_gpu(processes: int, cap: int) -> int:
    """The per-process usage series one GPU adds when each of its processes has every value."""
    gpu = "GPU-00000000-0000-4000-8000-000000000000"
    rows = tuple(ProcessUsageRow(gpu, str(pid), f"p{pid}", 1.0, 1.0, 1.0, 1.0, 1.0) for pid in range(1, processes + 1))
    usage, _ = cap_usage(ProcessUsage(True, rows), cap)
    families = usage_families(usage, [normalize_uuid(gpu)])
    return sum(len(family.samples) for family in families if family.name != PROCESS_USAGE_SUCCESS.name)


def test_the_series_per_gpu_the_docs_give_are_what_the_exposition_renders() -> None:
    text = " ".join(section(METRICS_TEXT, "Series per GPU").split())
    default = re.search(r"With the default cap a GPU adds at most (\d+) per-process usage series", text)
    only_sums = re.search(r"`--collect\.process-usage-max-processes=0` makes it (\d+)\.", text)
    assert default is not None
    assert only_sums is not None
    assert int(default.group(1)) == usage_series_per_gpu(1000, DEFAULT_MAX_PROCESSES) == 5 * (16 + 1) + 1
    assert int(only_sums.group(1)) == usage_series_per_gpu(1000, 0)
    assert usage_series_per_gpu(3, DEFAULT_MAX_PROCESSES) == 5 * 3 + 1  # fewer processes than the cap: no sum


def pod_series_per_gpu(pods: int, cap: int) -> int:
    """The per-pod series one GPU adds when each of its pods has every value (energy read twice)."""
    gpu = "GPU-00000000-0000-4000-8000-000000000000"
    uuid = normalize_uuid(gpu)
    rows = tuple(ProcessUsageRow(gpu, str(pid), f"p{pid}", 1.0, 1.0, 1.0, 1.0, 1.0) for pid in range(1, pods + 1))
    shares = pod_shares(
        ProcessUsage(True, rows), {str(pid): f"pod-{pid}" for pid in range(1, pods + 1)}, {}, {uuid: 1.0}, cap
    )
    ledger, seconds = PodEnergyLedger(), GpuSecondsLedger()
    seconds.use(ledger.account(shares, {uuid: 1.0}).pods, 1.0)
    accounted = ledger.account(shares, {uuid: 2.0})
    families = pod_families(replace(accounted, pods=seconds.use(accounted.pods, 2.0)), {uuid})
    return sum(len(family.samples) for family in families)


def test_the_pod_series_per_gpu_the_docs_give_are_what_the_exposition_renders() -> None:
    text = " ".join(section(METRICS_TEXT, "Series per GPU").split())
    found = re.search(
        r"The per-pod shares add at most (\d+) series per GPU with the default cap, and (\d+) with a cap", text
    )
    assert found is not None
    assert int(found.group(1)) == pod_series_per_gpu(1000, DEFAULT_MAX_PROCESSES) == 6 * 16 + 1
    assert int(found.group(2)) == pod_series_per_gpu(1000, 0)
    assert pod_series_per_gpu(3, DEFAULT_MAX_PROCESSES) == 6 * 3 + 1  # fewer pods than the cap


def slurm_series_per_gpu(tmp_path: Path, processes: int, cap: int) -> int:
    """The Slurm job series one GPU adds with per-process usage alone, each process in a job of its own."""
    gpu = "GPU-00000000-0000-4000-8000-000000000000"
    rows = tuple(ProcessUsageRow(gpu, str(pid), f"p{pid}", 1.0, 1.0, 1.0, 1.0, 1.0) for pid in range(1, processes + 1))
    proc = tmp_path / f"proc-{processes}-{cap}"
    for pid in range(1, processes + 1):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{pid}/step_0\n")
    usage, _ = cap_usage(ProcessUsage(True, rows), cap)  # the collector looks up the kept rows, as here
    jobs = process_jobs(proc, ((row.gpu_uuid, row.pid) for row in usage.rows))
    return sum(len(family.samples) for family in job_families(jobs, {normalize_uuid(gpu)}))


def test_the_slurm_series_per_gpu_the_docs_give_are_what_the_exposition_renders(tmp_path: Path) -> None:
    text = " ".join(section(METRICS_TEXT, "Series per GPU").split())
    found = re.search(
        r"`--slurm\.jobs` with `--collect\.process-usage` alone adds at most (\d+) series per GPU with the default "
        r"cap \(each kept process in a job of its own\), and (\d+) with a cap of 0",
        text,
    )
    assert found is not None
    assert int(found.group(1)) == slurm_series_per_gpu(tmp_path, 40, DEFAULT_MAX_PROCESSES) == 2 * 16
    assert int(found.group(2)) == slurm_series_per_gpu(tmp_path, 40, 0)


def test_the_connection_caps_figures_in_the_docs_are_the_codes() -> None:
    """docs/compatibility.md's descriptors kept in reserve, listen queue and accept batch, as httpserver/ sets them."""
    from nvidia_gpu_exporter.httpserver.connections import ACCEPT_BATCH, FD_RESERVE
    from nvidia_gpu_exporter.httpserver.listener import LISTEN_BACKLOG

    text = " ".join(COMPATIBILITY_TEXT.split())
    assert f"minus {FD_RESERVE} descriptors" in text
    assert f"The listen queue is {LISTEN_BACKLOG:,} deep" in text
    assert f"accepts at most {ACCEPT_BATCH} connections per turn" in text

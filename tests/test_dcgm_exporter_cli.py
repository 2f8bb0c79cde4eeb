"""dcgm-exporter's command line and environment, accepted as they are (docs/dcgm.md, "Swapping the image"):
each option either behaves as dcgm-exporter's or is warned about once, never refused."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import StartExporter
from exposition_reader import checked, names_in
from harness import FIXTURES, MIG_FIXTURE, fake_smi_command, start_listening
from nvidia_gpu_exporter import flags
from nvidia_gpu_exporter.config import DEFAULT_LISTEN_ADDRESS, Backend, Config, Profile
from nvidia_gpu_exporter.exposition.dcgm_defaults import Generation
from nvidia_gpu_exporter.exposition.dcgm_generations import current_name, facts_of, oldest_name
from nvidia_gpu_exporter.flags import DCGM_OPTIONS, FlagError, parse_args
from polling import wait_until

DAEMONSETS = yaml.safe_load((FIXTURES / "dcgm-exporter" / "daemonsets.yaml").read_text())
CONFIG_V2 = str(FIXTURES / "dcgm-exporter" / "config-v2.yaml")
CONFIG_V2_SETS = {"dcgm_collectors": "/tmp/c.csv", "max_requests": 8, "exporter_metrics": True}
SECOND = 1_000_000_000
RESOURCES = "nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-*"


def dcgm(argv: list[str], env: dict[str, str] | None = None) -> Any:
    return parse_args(argv, env or {})


# -- the two DaemonSets, parsed --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dcgm-exporter-chart", "gpu-operator"])
def test_the_daemonsets_args_and_env_give_the_dcgm_profile_on_9400(name: str) -> None:
    spec = DAEMONSETS[name]
    parsed = dcgm(spec["args"], spec["env"])
    config = parsed.config
    assert parsed.dcgm_exporter
    assert config.metrics_profile is Profile.DCGM
    assert config.listen_addresses == (f":{spec['port']}",)
    assert config.collect_interval_ns == 30 * SECOND  # dcgm-exporter's -c default, 30000 ms
    # dcgm-exporter's image files are not in ours (nor mounted here): the built-in default set instead, said once,
    # with the path kept for the generation its releases serve
    assert config.dcgm_collectors == ""
    assert config.dcgm_image_collectors.startswith("/etc/dcgm-exporter/")
    assert any("/etc/dcgm-exporter/" in notice.why for notice in parsed.notices), parsed.notices


def test_the_4_8_3_chart_reads_its_counters_file_mounted_at_dcgm_exporters_default_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Chart 4.6.0-4.8.3 passes no -f and mounts its ConfigMap at dcgm-exporter's default path, which is read."""
    spec = DAEMONSETS["dcgm-exporter-chart-4.8.3"]
    ((default, content),) = spec["mounts"].items()
    assert default == flags.DCGM_DEFAULT_COLLECTORS
    assert not spec["args"]
    local = tmp_path / "default-counters.csv"
    local.write_text(content, encoding="utf-8")
    monkeypatch.setattr(flags, "DCGM_DEFAULT_COLLECTORS", str(local))  # a test cannot write /etc/dcgm-exporter/
    parsed = dcgm(spec["args"], spec["env"])
    assert (parsed.config.metrics_profile, parsed.config.listen_addresses) == (Profile.DCGM, (":9400",))
    assert parsed.config.dcgm_collectors == str(local)
    assert [notice for notice in parsed.notices if notice.option == "--collectors"] == []


def test_without_any_dcgm_exporter_option_nothing_changes_and_no_environment_is_read() -> None:
    env = {"DCGM_EXPORTER_LISTEN": ":9400", "DCGM_EXPORTER_KUBERNETES": "true"}
    assert parse_args([]).config == Config()
    assert parse_args(["--collect.backend=demo"], {"NODE_NAME": "a", "NVIDIA_RESOURCE_NAMES": "x"}).config == Config(
        backend=Backend.DEMO
    )
    plain = parse_args([], None)
    assert plain.config.listen_addresses == (DEFAULT_LISTEN_ADDRESS,)
    assert not plain.dcgm_exporter
    assert parse_args([], env).dcgm_exporter  # with the environment passed, its DCGM_* variables count


def test_the_dcgm_exporter_program_name_alone_gives_dcgm_exporters_defaults() -> None:
    parsed = parse_args([], {}, dcgm_exporter=True)
    assert parsed.dcgm_exporter
    assert not parsed.notices
    assert parsed.config.metrics_profile is Profile.DCGM
    assert parsed.config.listen_addresses == (":9400",)


def test_f_beside_our_own_profile_flag_is_only_our_short_flag() -> None:
    config = parse_args(["--metrics.profile=dcgm", "-f", "/c.csv"], {}).config
    assert config == Config(metrics_profile=Profile.DCGM, dcgm_collectors="/c.csv")
    assert parse_args(["-f", "/c.csv"], {}).config.listen_addresses == (":9400",)


def test_a_value_of_our_own_flags_is_never_read_as_a_dcgm_exporter_flag() -> None:
    config = parse_args(["-f-k", "--web.telemetry-path=-a"], {}).config
    assert config.dcgm_collectors == "-k"
    assert config.telemetry_path == "-a"
    assert not config.kubernetes_pod_resources


def test_our_own_flags_win_over_dcgm_exporters() -> None:
    config = dcgm(["-a", ":9500", "--web.listen-address=127.0.0.1:0", "--metrics.profile=both"]).config
    assert config.listen_addresses == ("127.0.0.1:0",)
    assert config.metrics_profile is Profile.BOTH


def test_a_flag_beats_its_environment_variable_as_in_urfave_cli() -> None:
    config = dcgm(["--address=:1234", "-c", "1000"], {"DCGM_EXPORTER_LISTEN": ":9400", "DCGM_EXPORTER_INTERVAL": "5"})
    assert config.config.listen_addresses == (":1234",)
    assert config.config.collect_interval_ns == SECOND


# -- every option: implemented (what it sets) or warned (why) ---------------------------------------------------

IMPLEMENTED: list[tuple[list[str], dict[str, str], dict[str, Any]]] = [
    (["-k"], {"KUBERNETES_ENABLE_DRA": "true"}, {"kubernetes_dra_claims": True}),
    (["-k", "--kubernetes-enable-dra"], {}, {"kubernetes_dra_claims": True}),
    (["-f", "/tmp/c.csv"], {}, {"dcgm_collectors": "/tmp/c.csv"}),
    (["-f=/tmp/c.csv"], {}, {"dcgm_collectors": "/tmp/c.csv"}),
    (["--collectors", "/tmp/c.csv"], {}, {"dcgm_collectors": "/tmp/c.csv"}),
    (["-collectors=/tmp/c.csv"], {}, {"dcgm_collectors": "/tmp/c.csv"}),
    ([], {"DCGM_EXPORTER_COLLECTORS": "/tmp/c.csv"}, {"dcgm_collectors": "/tmp/c.csv"}),
    (["-a", "[::]:9401"], {}, {"listen_addresses": ("[::]:9401",)}),
    (["--address=:9401"], {}, {"listen_addresses": (":9401",)}),
    ([], {"DCGM_EXPORTER_LISTEN": "127.0.0.1:9401"}, {"listen_addresses": ("127.0.0.1:9401",)}),
    (["-c", "1500"], {}, {"collect_interval_ns": 1_500_000_000}),
    (["--collect-interval=0x3e8"], {}, {"collect_interval_ns": SECOND}),  # Go's ParseInt base 0
    ([], {"DCGM_EXPORTER_INTERVAL": "60000"}, {"collect_interval_ns": 60 * SECOND}),
    (["-k"], {}, {"kubernetes_pod_resources": True, "kubernetes_pod_labels": True}),
    (
        ["--kubernetes-virtual-gpus"],
        {},
        {"compute_apps": True, "process_usage": True, "kubernetes_process_pods": True},
    ),
    (["-k"], {"KUBERNETES_VIRTUAL_GPUS": "true"}, {"kubernetes_process_pods": True, "process_usage": True}),
    (["--kubernetes-virtual-gpus=false"], {}, {"kubernetes_process_pods": False, "process_usage": False}),
    (["--kubernetes=false"], {}, {"kubernetes_pod_resources": False, "kubernetes_pod_labels": False}),
    ([], {"DCGM_EXPORTER_KUBERNETES": "false"}, {"kubernetes_pod_resources": False}),
    (["--kubernetes-gpu-id-type=device-name"], {}, {}),
    ([], {"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "uid"}, {}),
    (["--pod-resources-kubelet-socket=/k.sock"], {}, {"kubernetes_pod_resources_socket": "/k.sock"}),
    ([], {"DCGM_POD_RESOURCES_KUBELET_SOCKET": "/k.sock"}, {"kubernetes_pod_resources_socket": "/k.sock"}),
    (
        ["-k", "--nvidia-resource-names=nvidia.com/a100,nvidia.com/a10"],
        {},
        {
            "kubernetes_resource_names": "nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-*,"
            + "nvidia.com/a100,nvidia.com/a10"
        },
    ),
    (["-k"], {"NVIDIA_RESOURCE_NAMES": "nvidia.com/a10"}, {"kubernetes_resource_names": RESOURCES + ",nvidia.com/a10"}),
    (["--web-config-file=/w.yml"], {}, {"web_config_file": "/w.yml"}),
    ([], {"DCGM_EXPORTER_WEB_CONFIG_FILE": "/w.yml"}, {"web_config_file": "/w.yml"}),
    (["--web-systemd-socket"], {}, {"systemd_socket": True}),
    ([], {"DCGM_EXPORTER_SYSTEMD_SOCKET": "true"}, {"systemd_socket": True}),
    (["--log-format=json"], {}, {"log_format": "json"}),
    ([], {"DCGM_EXPORTER_LOG_FORMAT": "text"}, {"log_format": "logfmt"}),
    (["--debug"], {}, {"log_level": "debug"}),
    ([], {"DCGM_EXPORTER_DEBUG": "true"}, {"log_level": "debug"}),
    (["--enable-pprof", "--web-config-file=/w.yml"], {}, {"enable_pprof": True, "enable_pprof_unauthenticated": False}),
    ([], {"DCGM_EXPORTER_ENABLE_PPROF": "1", "DCGM_EXPORTER_WEB_CONFIG_FILE": "/w.yml"}, {"enable_pprof": True}),
    (["--web-read-timeout=2s"], {}, {"read_timeout_ns": 2 * SECOND}),
    ([], {"DCGM_EXPORTER_WEB_READ_TIMEOUT": "1m30s"}, {"read_timeout_ns": 90 * SECOND}),
    (["--web-write-timeout", "45s"], {}, {"write_timeout_ns": 45 * SECOND}),
    ([], {"DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "500ms"}, {"write_timeout_ns": SECOND // 2}),
    (["--max-concurrent-scrapes=16"], {}, {"max_requests": 16}),
    ([], {"DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES": "3"}, {"max_requests": 3}),
    (["-a", ":9400"], {}, {"exporter_metrics": False}),  # dcgm-exporter's own metrics are opt-in
    (["--enable-exporter-metrics"], {}, {"exporter_metrics": True}),
    ([], {"DCGM_EXPORTER_ENABLE_EXPORTER_METRICS": "true"}, {"exporter_metrics": True}),
    (["--health-require-gpus"], {}, {"dcgm_health_require_gpus": True}),
    ([], {"DCGM_EXPORTER_HEALTH_REQUIRE_GPUS": "true"}, {"dcgm_health_require_gpus": True}),
    (["--container-labels=false", "--container-runtime-socket="], {}, {}),
    (["--config-file", CONFIG_V2], {}, {**CONFIG_V2_SETS, "collect_interval_ns": 15 * SECOND}),
    ([], {"DCGM_EXPORTER_CONFIG_FILE": CONFIG_V2}, CONFIG_V2_SETS),
    (["-n"], {}, {"dcgm_hostname_label": False}),
    (["--no-hostname"], {}, {"dcgm_hostname_label": False}),
    ([], {"DCGM_EXPORTER_NO_HOSTNAME": "true"}, {"dcgm_hostname_label": False}),
    (["-o"], {}, {"dcgm_old_namespace": True}),
    (["--use-old-namespace=false"], {}, {"dcgm_old_namespace": False}),
    ([], {"DCGM_EXPORTER_USE_OLD_NAMESPACE": "true"}, {"dcgm_old_namespace": True}),
    (["-rbmn"], {}, {"dcgm_model_name_dashes": True}),
    ([], {"DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME": "true"}, {"dcgm_model_name_dashes": True}),
    (["-x", "60000"], {}, {"dcgm_xid_count_window_ms": 60_000}),
    ([], {"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "1"}, {"dcgm_xid_count_window_ms": 1}),
    (["--clock-events-count-window-size=0x10"], {}, {"dcgm_clock_events_count_window_ms": 16}),
    ([], {"DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "1"}, {"dcgm_clock_events_count_window_ms": 1}),
    (["-a", ":9400"], {}, {"dcgm_xid_count_window_ms": 300_000, "dcgm_clock_events_count_window_ms": 300_000}),
    # values that ask for nothing this exporter does not do already
    (["-d", "f", "-s", "f", "-p", "f", "-m", "none", "--dcgm-log-level=NONE", "-o=false"], {}, {}),
]


@pytest.mark.parametrize(
    ("argv", "env", "expected"), IMPLEMENTED, ids=[" ".join(a) or str(e) for a, e, _ in IMPLEMENTED]
)
def test_an_implemented_option_sets_what_dcgm_exporter_would_without_a_warning(
    argv: list[str], env: dict[str, str], expected: dict[str, Any]
) -> None:
    parsed = dcgm(argv, env)
    assert parsed.dcgm_exporter
    assert parsed.config.metrics_profile is Profile.DCGM
    assert not [notice for notice in parsed.notices if "kubernetes" not in notice.why], parsed.notices
    for attribute, value in expected.items():
        if attribute.startswith(("kubernetes_pod", "kubernetes_dra")) and parsed.notices:  # no grpc: -k is warned
            continue
        assert getattr(parsed.config, attribute) == value, attribute


WARNED: list[tuple[list[str], dict[str, str], str]] = [
    (["-p", "g"], {}, "--cpu-devices"),
    ([], {"DCGM_EXPORTER_CPU_DEVICES_STR": "g:0"}, "DCGM_EXPORTER_CPU_DEVICES_STR"),
    (["-m", "gpu-operator:metrics"], {}, "--configmap-data"),
    ([], {"DCGM_EXPORTER_CONFIGMAP_DATA": "ns:cm"}, "DCGM_EXPORTER_CONFIGMAP_DATA"),
    (["-r", "host:5555"], {}, "--remote-hostengine-info"),
    ([], {"DCGM_REMOTE_HOSTENGINE_INFO": "localhost:5555"}, "DCGM_REMOTE_HOSTENGINE_INFO"),
    (["--kubernetes-enable-pod-labels"], {}, "--kubernetes-enable-pod-labels"),
    ([], {"DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true"}, "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"),
    (["--kubernetes-enable-pod-uid"], {}, "--kubernetes-enable-pod-uid"),
    ([], {"DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "true"}, "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"),
    (["--kubernetes-gpu-id-type=serial"], {}, "--kubernetes-gpu-id-type"),
    (["--kubernetes-pod-label-allowlist-regex=^app$"], {}, "--kubernetes-pod-label-allowlist-regex"),
    ([], {"DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": "a,b"}, "ALLOWLIST_REGEX"),
    (["-d", "g:0,1"], {}, "--devices"),
    ([], {"DCGM_EXPORTER_DEVICES_STR": "i"}, "DCGM_EXPORTER_DEVICES_STR"),
    (["-s", "g"], {}, "--switch-devices"),
    ([], {"DCGM_EXPORTER_OTHER_DEVICES_STR": "g"}, "DCGM_EXPORTER_OTHER_DEVICES_STR"),
    (["--fake-gpus"], {}, "--fake-gpus"),
    ([], {"DCGM_EXPORTER_USE_FAKE_GPUS": "true"}, "DCGM_EXPORTER_USE_FAKE_GPUS"),
    (["--enable-dcgm-log"], {}, "--enable-dcgm-log"),
    ([], {"DCGM_EXPORTER_ENABLE_DCGM_LOG": "true"}, "DCGM_EXPORTER_ENABLE_DCGM_LOG"),
    (["--dcgm-log-level=DEBUG"], {}, "--dcgm-log-level"),
    ([], {"DCGM_EXPORTER_DCGM_LOG_LEVEL": "WARN"}, "DCGM_EXPORTER_DCGM_LOG_LEVEL"),
    (["--hpc-job-mapping-dir=/run/jobs"], {}, "--hpc-job-mapping-dir"),
    ([], {"DCGM_HPC_JOB_MAPPING_DIR": "/run/jobs"}, "DCGM_HPC_JOB_MAPPING_DIR"),
    (["--dump-enabled"], {}, "--dump-enabled"),
    ([], {"DCGM_EXPORTER_DUMP_ENABLED": "true"}, "DCGM_EXPORTER_DUMP_ENABLED"),
    (["--dump-directory=/tmp/d"], {}, "--dump-directory"),
    ([], {"DCGM_EXPORTER_DUMP_DIRECTORY": "/tmp/d"}, "DCGM_EXPORTER_DUMP_DIRECTORY"),
    (["--dump-retention=2"], {}, "--dump-retention"),
    ([], {"DCGM_EXPORTER_DUMP_RETENTION": "2"}, "DCGM_EXPORTER_DUMP_RETENTION"),
    (["--dump-compression=false"], {}, "--dump-compression"),
    ([], {"DCGM_EXPORTER_DUMP_COMPRESSION": "false"}, "DCGM_EXPORTER_DUMP_COMPRESSION"),
    (["--kubernetes-enable-dra"], {}, "--kubernetes-enable-dra"),
    (["--disable-startup-validate"], {}, "--disable-startup-validate"),
    (["-k"], {"DISABLE_STARTUP_VALIDATE": "true"}, "DISABLE_STARTUP_VALIDATE"),
    (["--enable-gpu-bind-unbind-watch"], {}, "--enable-gpu-bind-unbind-watch"),
    ([], {"DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH": "true"}, "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH"),
    (["--gpu-bind-unbind-poll-interval=5s"], {}, "--gpu-bind-unbind-poll-interval"),
    ([], {"DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL": "2s"}, "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL"),
    (["--container-labels"], {}, "--container-labels"),
    ([], {"DCGM_EXPORTER_CONTAINER_LABELS": "true"}, "DCGM_EXPORTER_CONTAINER_LABELS"),
    (["--container-runtime-socket=/run/containerd/containerd.sock"], {}, "--container-runtime-socket"),
    ([], {"DCGM_CONTAINER_RUNTIME_SOCKET": "/run/crio/crio.sock"}, "DCGM_CONTAINER_RUNTIME_SOCKET"),
    (["--watch-max-keep-age=10m"], {}, "--watch-max-keep-age"),
    ([], {"DCGM_EXPORTER_WATCH_MAX_KEEP_AGE": "0s"}, "DCGM_EXPORTER_WATCH_MAX_KEEP_AGE"),
    (["--watch-max-keep-samples=0"], {}, "--watch-max-keep-samples"),
    ([], {"DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES": "2"}, "DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES"),
    # a duration dcgm-exporter cannot read: it logs it and keeps its default, so this warns and keeps its own
    (["--web-read-timeout=soon"], {}, "--web-read-timeout"),
    ([], {"DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "10"}, "DCGM_EXPORTER_WEB_WRITE_TIMEOUT"),
]


@pytest.mark.parametrize(("argv", "env", "named"), WARNED, ids=[" ".join(a) or str(e) for a, e, _ in WARNED])
def test_an_option_we_cannot_honour_is_accepted_with_one_warning_naming_it(
    argv: list[str], env: dict[str, str], named: str
) -> None:
    parsed = dcgm(argv, env)
    assert parsed.dcgm_exporter
    assert parsed.config.metrics_profile is Profile.DCGM
    mine = [notice for notice in parsed.notices if named in notice.option]
    assert len(mine) == 1, parsed.notices
    assert len(mine[0].why) > 20  # it says why


def test_every_option_of_dcgm_exporter_is_in_one_of_the_tables() -> None:
    covered = {word for argv, _, _ in IMPLEMENTED + WARNED for word in argv} | {
        variable for _, env, _ in IMPLEMENTED + WARNED for variable in env
    }
    text = " ".join(covered)
    for option in DCGM_OPTIONS:
        assert option.env in text, option.name
        assert f"-{option.name}" in text or any(f"-{alias}" in text for alias in option.aliases), option.name


def test_the_docs_option_table_lists_every_option_with_its_variable() -> None:
    """docs/dcgm.md's table under "Swapping the image" mirrors DCGM_OPTIONS: each row names flags and variables."""
    text = (FIXTURES.parent.parent / "docs" / "dcgm.md").read_text(encoding="utf-8")
    section = text.split("\n## Swapping the image\n", 1)[1].split("\n### The YAML config file\n", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `-")]
    for option in DCGM_OPTIONS:
        names = [f"`--{option.name}`", *(f"`-{alias}`" for alias in option.aliases)]
        mine = [row for row in rows if any(name in row.split(" | ")[0] for name in names)]
        assert len(mine) == 1, option.name
        assert f"`{option.env}`" in mine[0], option.name
    assert len(rows) == len({row.split(" | ")[0] for row in rows})


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-c", "soon"], {}, 'invalid value "soon" for flag -c: parse error'),
        ([], {"DCGM_EXPORTER_INTERVAL": "soon"}, 'could not parse "soon" as int value from DCGM_EXPORTER_INTERVAL'),
        ([], {"DCGM_EXPORTER_KUBERNETES": "yes"}, 'could not parse "yes" as bool value from DCGM_EXPORTER_KUBERNETES'),
        (["-a"], {}, "flag needs an argument: -a"),
        (["--log-format=xml"], {}, "invalid --log-format 'xml': text or json"),
        (["--max-concurrent-scrapes=0"], {}, "invalid max-concurrent-scrapes parameter value: 0, must be greater"),
        ([], {"DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES": "-1"}, "invalid max-concurrent-scrapes parameter value: -1"),
        (["--enable-pprof"], {}, "enable-pprof requires web-config-file"),
        ([], {"DCGM_EXPORTER_ENABLE_PPROF": "true"}, "enable-pprof requires web-config-file"),
    ],
)
def test_a_value_dcgm_exporter_itself_refuses_is_refused_naming_its_source(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        dcgm(argv, env)


def test_a_duration_dcgm_exporter_cannot_read_keeps_the_default() -> None:
    assert dcgm(["--web-read-timeout=soon"]).config.read_timeout_ns == Config().read_timeout_ns


def test_pprof_with_our_own_web_config_flag_is_served_behind_it() -> None:
    config = dcgm(["--enable-pprof", "--web.config.file=/w.yml"]).config
    assert config.enable_pprof
    assert not config.enable_pprof_unauthenticated


def test_short_v_is_version_as_in_dcgm_exporter() -> None:
    assert dcgm(["-v"]).action.value == "version"


# -- the swap, end to end ---------------------------------------------------------------------------------------


def mounted(spec: dict[str, Any], tmp_path: Path) -> tuple[list[str], dict[str, str], str]:
    """The DaemonSet's args and env with each file the pod mounts written under ``tmp_path`` and named there in
    its place (a test cannot write /etc/dcgm-exporter/); and the file mounted at dcgm-exporter's default path
    where nothing names it ("" if none)."""
    args, env, default = list(spec["args"]), dict(spec["env"]), ""
    for index, (path, content) in enumerate(spec["mounts"].items()):
        local = tmp_path / f"{index}-{Path(path).name}"
        local.write_text(content, encoding="utf-8")
        if path not in args and path not in env.values():
            assert path == flags.DCGM_DEFAULT_COLLECTORS, path
            default = str(local)
        args = [str(local) if arg == path else arg for arg in args]
        env = {key: str(local) if value == path else value for key, value in env.items()}
    return args, env, default


# The exporter as it ships, but for dcgm-exporter's default counters path, which it reads from argv[1] (the
# file the test wrote in place of /etc/dcgm-exporter/default-counters.csv).
AT_DEFAULT_PATH = (
    "import sys; from nvidia_gpu_exporter import cli, flags; "
    "flags.DCGM_DEFAULT_COLLECTORS = sys.argv.pop(1); sys.exit(cli.main())"
)


# Default counters the fake nvidia-smi of the MIG capture gives on the exec backend (energy, replays, NVLink and
# profiling need NVML or DCGM), by their oldest names: 4.9 renamed each, so the names served say the generation.
NVIDIA_SMI_DEFAULTS = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_XID_ERRORS",
)


@pytest.mark.parametrize("name", ["dcgm-exporter-chart", "dcgm-exporter-chart-4.8.3", "gpu-operator"])
def test_the_daemonsets_args_and_env_serve_dcgm_fields_and_health(
    exporter: StartExporter, name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Only the image swapped: the DaemonSet's args and env as they render, its mounts in place (the harness adds
    a loopback listen address on port 0 in place of :9400, which a test must not bind, and the fake nvidia-smi).
    It serves the generation of the release that renders it, whatever this exporter's default."""
    spec = DAEMONSETS[name]
    generation = Generation(spec["generation"])
    args, env, default = mounted(spec, tmp_path)
    smi = ("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE))
    if default:
        argv = [sys.executable, "-c", AT_DEFAULT_PATH, default, "--web.listen-address=127.0.0.1:0", *smi, *args]
        handle = start_listening(argv, env)
        request.addfinalizer(handle.stop)
    else:
        handle = exporter(*smi, *args, env=env)
    # collected in the background every 30 s as dcgm-exporter does: the first collection follows the listener
    text = wait_until(handle.scrape, "a DCGM scrape", until=lambda text: "DCGM_FI_" in text)
    checked(text)
    names = names_in(text)
    assert {current_name(field, generation) for field in NVIDIA_SMI_DEFAULTS} <= names, " ".join(sorted(names))
    for served in names:  # nothing under another generation's name
        assert current_name(oldest_name(served), generation) == served, served
    assert not any(name.startswith("nvidia_smi_") for name in names)
    assert f"generation={generation.value} why=" in handle.log
    assert f'{facts_of(generation).hostname_label}="node-a"' in text
    health = handle.get("/health")
    assert health.status == 200
    assert handle.log.count("dcgm-exporter") >= 1
    assert "failed to run" not in handle.log


def test_a_dcgm_exporter_warning_is_logged_once_at_startup(exporter: StartExporter, tmp_path: Path) -> None:
    handle = exporter(
        "--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), "-r", "host:5555", env={"DCGM_EXPORTER_LISTEN": ":9400"}
    )
    wait_until(handle.scrape, "a DCGM scrape", until=lambda text: "DCGM_FI_" in text)
    warnings = [line for line in handle.log.splitlines() if "--remote-hostengine-info" in line]
    assert len(warnings) == 1, handle.log
    assert "level=warn" in warnings[0]


def test_no_hostname_and_dashed_model_names_as_dcgm_exporter_writes_them(exporter: StartExporter) -> None:
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), "-n", "-rbmn", env={"NODE_NAME": "a"})
    text = wait_until(handle.scrape, "a DCGM scrape", until=lambda text: "DCGM_FI_" in text)
    assert "hostname=" not in text
    assert 'device="nvidia1",modelName="NVIDIA-A100-SXM4-80GB",DCGM_FI_SYSTEM_DRIVER_VERSION="550.54.15"}' in text

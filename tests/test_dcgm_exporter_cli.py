"""dcgm-exporter's command line and environment, accepted as they are (docs/dcgm.md, "Swapping the image"):
each option either behaves as dcgm-exporter's or is warned about once, never refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import StartExporter
from exposition_reader import checked, names_in
from harness import FIXTURES, MIG_FIXTURE, fake_smi_command
from nvidia_gpu_exporter.config import DEFAULT_LISTEN_ADDRESS, Backend, Config, Profile
from nvidia_gpu_exporter.flags import DCGM_OPTIONS, FlagError, parse_args
from polling import wait_until

DAEMONSETS = yaml.safe_load((FIXTURES / "dcgm-exporter" / "daemonsets.yaml").read_text())
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
    # dcgm-exporter's image files are not in ours: the built-in default set instead, said once
    assert config.dcgm_collectors == ""
    assert any("/etc/dcgm-exporter/" in notice.why for notice in parsed.notices), parsed.notices


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
    (["--enable-pprof"], {}, {"enable_pprof": True, "enable_pprof_unauthenticated": True}),
    ([], {"DCGM_EXPORTER_ENABLE_PPROF": "1"}, {"enable_pprof": True}),
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


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-c", "soon"], {}, 'invalid value "soon" for flag -c: parse error'),
        ([], {"DCGM_EXPORTER_INTERVAL": "soon"}, 'could not parse "soon" as int value from DCGM_EXPORTER_INTERVAL'),
        ([], {"DCGM_EXPORTER_KUBERNETES": "yes"}, 'could not parse "yes" as bool value from DCGM_EXPORTER_KUBERNETES'),
        (["-a"], {}, "flag needs an argument: -a"),
        (["--log-format=xml"], {}, "invalid --log-format 'xml': text or json"),
    ],
)
def test_a_value_dcgm_exporter_itself_refuses_is_refused_naming_its_source(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(FlagError, match=re.escape(message)):
        dcgm(argv, env)


def test_short_v_is_version_as_in_dcgm_exporter() -> None:
    assert dcgm(["-v"]).action.value == "version"


# -- the swap, end to end ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dcgm-exporter-chart", "gpu-operator"])
def test_the_daemonsets_args_and_env_serve_dcgm_fields_and_health(exporter: StartExporter, name: str) -> None:
    """Only the image swapped: the DaemonSet's args and env as they render (the harness adds a loopback listen
    address on port 0 in place of :9400, which a test must not bind, and the fake nvidia-smi)."""
    spec = DAEMONSETS[name]
    handle = exporter("--nvidia-smi-command", fake_smi_command(MIG_FIXTURE), *spec["args"], env=spec["env"])
    # collected in the background every 30 s as dcgm-exporter does: the first collection follows the listener
    text = wait_until(handle.scrape, "a DCGM scrape", until=lambda text: "DCGM_FI_" in text)
    checked(text)
    names = names_in(text)
    assert "DCGM_FI_DEV_GPU_TEMP" in names
    assert "DCGM_FI_DEV_FB_USED" in names
    assert not any(name.startswith("nvidia_smi_") for name in names)
    assert 'hostname="node-a"' in text
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
    assert 'device="nvidia1",modelName="NVIDIA-A100-SXM4-80GB",DCGM_FI_DRIVER_VERSION="550.54.15"}' in text

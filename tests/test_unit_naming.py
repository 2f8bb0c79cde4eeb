"""Metric name derivation, reserved names and collisions, HELP = RField (docs/metrics.md, "Metric names")."""

from __future__ import annotations

import itertools

import pytest

from nvidia_gpu_exporter.exposition.families import RESERVED_NAMES
from nvidia_gpu_exporter.exposition.naming import derive_name, plan_field_metrics
from nvidia_gpu_exporter.model.fields import ValueKind, value_kind

# The naming examples of docs/metrics.md, "Metric names", and more.
NAME_TABLE: list[tuple[str, str, float]] = [
    ("encoder.stats.sessionCount", "nvidia_smi_encoder_stats_session_count", 1),
    ("power.draw [W]", "nvidia_smi_power_draw_watts", 1),
    ("memory.total [MiB]", "nvidia_smi_memory_total_bytes", 1048576),
    ("clocks.current.graphics [MHz]", "nvidia_smi_clocks_current_graphics_clock_hz", 1e6),
    ("fan.speed [%]", "nvidia_smi_fan_speed_ratio", 0.01),
    (
        "clocks_event_reasons_counters.sw_power_cap [us]",
        "nvidia_smi_clocks_event_reasons_counters_sw_power_cap_seconds",
        1e-6,
    ),
    ("power_smoothing.window_multiplier [ms]", "nvidia_smi_power_smoothing_window_multiplier_seconds", 0.001),
    ("bbx.time_run [seconds]", "nvidia_smi_bbx_time_run_seconds", 1),
    (
        "power_smoothing.curr_profile.ramp_up_rate [W/s]",
        "nvidia_smi_power_smoothing_curr_profile_ramp_up_rate_watts_per_second",
        1,
    ),
    ("pci.baseClass", "nvidia_smi_pci_base_class", 1),
    ("dramEncryption.mode.current", "nvidia_smi_dram_encryption_mode_current", 1),
    (
        "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",
        "nvidia_smi_ecc_errors_uncorrected_aggregate_sram_threshold_exceeded",
        1,
    ),
    ("fabric.clusterUuid", "nvidia_smi_fabric_cluster_uuid", 1),
    (
        "vgpu_driver_capability.heterogenous_multivGPU",
        "nvidia_smi_vgpu_driver_capability_heterogenous_multiv_gpu",
        1,
    ),
    (
        "vgpu_device_capability.fractional_multiVgpu",
        "nvidia_smi_vgpu_device_capability_fractional_multi_vgpu",
        1,
    ),
    ("some.future_field [MiB/s]", "nvidia_smi_some_future_field__mi_b_s", 1),
    ("foo__bar", "nvidia_smi_foo__bar", 1),
    ("edpp_multiplier [%]", "nvidia_smi_edpp_multiplier_ratio", 0.01),
    ("encoder.stats.averageFps", "nvidia_smi_encoder_stats_average_fps", 1),
    ("clocks.max.memory [MHz]", "nvidia_smi_clocks_max_memory_clock_hz", 1e6),
]


@pytest.mark.parametrize(("rfield", "name", "multiplier"), NAME_TABLE, ids=[f"table: {row[0]}" for row in NAME_TABLE])
def test_derive_name_table(rfield: str, name: str, multiplier: float) -> None:
    derived = derive_name(rfield)
    assert derived.name == name
    assert derived.multiplier == multiplier


EXTRA_RULES: list[tuple[str, str, float, str]] = [
    ("a b [W]", "nvidia_smi_a_watts", 1, "step 1: name = text before the first space + unit suffix"),
    ("x [mhz]", "nvidia_smi_x_mhz", 1, "step 1: unit suffixes are case-sensitive, no match -> whole RField"),
    ("x[W]", "nvidia_smi_x_w", 1, "step 1: the unit suffix includes its leading space"),
    ("a.b.c", "nvidia_smi_a_b_c", 1, "step 2: every . becomes _"),
    ("ABCDef", "nvidia_smi_abc_def", 1, "step 3: (.)([A-Z][a-z]+) then ([a-z0-9])([A-Z])"),
    ("gpu2Name", "nvidia_smi_gpu2_name", 1, "step 3: digit before capital splits"),
    ("fooÄbar", "nvidia_smi_foo_bar", 1, "step 3/5: ASCII classes only; non-ASCII becomes _"),
    ("a-b--c", "nvidia_smi_a_b_c", 1, "step 5: each run of invalid characters becomes one _"),
    ("a:b", "nvidia_smi_a:b", 1, "step 5: colon is a legal name character"),
    ("x [foo] y", "nvidia_smi_x_foo_y", 1, "step 4: ' [' becomes _, ] deleted, then spaces collapse"),
]


@pytest.mark.parametrize(
    ("rfield", "name", "multiplier"),
    [row[:3] for row in EXTRA_RULES],
    ids=[row[3] for row in EXTRA_RULES],
)
def test_derive_name_rules(rfield: str, name: str, multiplier: float) -> None:
    derived = derive_name(rfield)
    assert derived.name == name
    assert derived.multiplier == multiplier


@pytest.mark.parametrize(
    ("rfield", "best_effort"),
    [("fan.speed [%]", False), ("some.future_field [MiB/s]", True), ("a-b", True), ("pci.baseClass", False)],
    ids=[
        "known unit is not best effort",
        "unknown unit bracket is best effort",
        "invalid chars are best effort",
        "camel case is not best effort",
    ],
)
def test_best_effort_flag(rfield: str, best_effort: bool) -> None:
    assert derive_name(rfield).best_effort is best_effort


def test_empty_rfield_is_dropped() -> None:
    """Empty -> field dropped."""
    assert derive_name("").name == ""
    assert plan_field_metrics([("x", "")]) == ()


def test_help_is_rfield_verbatim_and_column_kept() -> None:
    """HELP = the RField verbatim; cells are read positionally."""
    plan = plan_field_metrics([("temperature.gpu", "temperature.gpu"), ("fan.speed", "fan.speed [%]")])
    by_name = {metric.name: metric for metric in plan}
    assert by_name["nvidia_smi_fan_speed_ratio"].help == "fan.speed [%]"
    assert by_name["nvidia_smi_fan_speed_ratio"].column == 1
    assert by_name["nvidia_smi_fan_speed_ratio"].qfield == "fan.speed"
    assert by_name["nvidia_smi_temperature_gpu"].column == 0


DOCUMENTED_RESERVED = [
    "failed_scrapes_total",
    "last_collect_success",
    "last_collect_success_timestamp_seconds",
    "last_collect_duration_seconds",
    "gpu_info",
    "compute_app_info",
    "compute_app_used_memory_bytes",
    "compute_apps",
    "compute_apps_last_collect_success",
    "pcie_throughput_tx_bytes_per_second",
    "pcie_throughput_rx_bytes_per_second",
    "energy_joules_total",
    "mig_info",
    "mig_memory_total_bytes",
    "mig_memory_used_bytes",
    "mig_memory_free_bytes",
    "mig_memory_reserved_bytes",
    "mig_graphics_activity_ratio",
    "mig_sm_activity_ratio",
    "mig_sm_occupancy_ratio",
    "mig_tensor_activity_ratio",
    "mig_pcie_throughput_tx_bytes_per_second",
    "mig_pcie_throughput_rx_bytes_per_second",
    "xid_errors_total",
    "xid_last_timestamp_seconds",
    "xid_occurrence_timestamp_seconds",
    "gpu_fallen_off_bus",
    "nvswitch_sxid_errors_total",
    "nvswitch_sxid_last_timestamp_seconds",
    "command_exit_code",
    "nvml_return_code",
    "gpu_pod_info",
    "compute_app_pod_info",
    "kubernetes_attribution_up",
    "gpus_expected",
    "pci_device_info",
    "process_sm_utilization_ratio",
    "process_memory_utilization_ratio",
    "process_encoder_utilization_ratio",
    "process_decoder_utilization_ratio",
    "process_used_memory_bytes",
    "process_usage_overflow_processes",
    "process_usage_last_collect_success",
    "pod_sm_utilization_ratio",
    "pod_used_memory_bytes",
    "pod_gpu_share_ratio",
    "pod_power_draw_watts",
    "pod_energy_joules_total",
    "unattributed_energy_joules_total",
    "pod_gpu_used_seconds_total",
    "pod_gpu_allocated_seconds_total",
    "gpu_dra_claim_info",
    "process_slurm_job_info",
    "gpu_slurm_job_info",
]


def test_reserved_names_are_exactly_the_spec_list() -> None:
    assert {"nvidia_smi_" + suffix for suffix in DOCUMENTED_RESERVED} == RESERVED_NAMES


@pytest.mark.parametrize(
    "suffix", DOCUMENTED_RESERVED, ids=[f"reserved regardless of features: {s}" for s in DOCUMENTED_RESERVED]
)
def test_reserved_name_is_dropped(suffix: str) -> None:
    plan = plan_field_metrics([("keep.me", "keep.me"), ("weird", suffix)])
    assert [metric.name for metric in plan] == ["nvidia_smi_keep_me"]


@pytest.mark.parametrize(
    "rfield",
    ["compute_app_used_memory [MiB]", "energy_joules.total", "gpuInfo", "compute.apps"],
    ids=[
        "reserved via unit suffix",
        "reserved via dot replacement",
        "reserved via snake case",
        "compute_apps reserved even with compute apps off",
    ],
)
def test_reserved_name_reached_by_derivation_is_dropped(rfield: str) -> None:
    assert plan_field_metrics([("q", rfield)]) == ()


def test_collision_drops_all_claimants() -> None:
    """foo.bar and foo_bar both derive nvidia_smi_foo_bar -> neither is exported."""
    plan = plan_field_metrics([("foo.bar", "foo.bar"), ("other", "other"), ("foo_bar", "foo_bar")])
    assert [(metric.qfield, metric.name) for metric in plan] == [("other", "nvidia_smi_other")]


def test_collision_of_three_drops_all() -> None:
    plan = plan_field_metrics([("a.b", "a.b"), ("a_b", "a_b"), ("aB", "a_b")])
    assert plan == ()


def test_collision_via_unit_suffix() -> None:
    """memory.used [MiB] and memory_used_bytes both derive nvidia_smi_memory_used_bytes."""
    plan = plan_field_metrics([("memory.used", "memory.used [MiB]"), ("x", "memory_used_bytes")])
    assert plan == ()


FIELDS = [
    ("fan.speed", "fan.speed [%]"),
    ("foo.bar", "foo.bar"),
    ("foo_bar", "foo_bar"),
    ("gpu_info", "gpu_info"),
    ("pci.baseClass", "pci.baseClass"),
    ("memory.used", "memory.used [MiB]"),
]


@pytest.mark.parametrize(
    "order", list(itertools.permutations(range(len(FIELDS)), len(FIELDS)))[::37], ids=lambda o: f"order{o}"
)
def test_plan_is_independent_of_query_order(order: tuple[int, ...]) -> None:
    """Fields are processed in sorted QField order, so the outcome does not depend on query order."""
    permuted = [FIELDS[index] for index in order]
    plan = plan_field_metrics(permuted)
    outcome = [(metric.qfield, metric.name, metric.help, permuted[metric.column][0]) for metric in plan]
    assert outcome == [
        ("fan.speed", "nvidia_smi_fan_speed_ratio", "fan.speed [%]", "fan.speed"),
        ("memory.used", "nvidia_smi_memory_used_bytes", "memory.used [MiB]", "memory.used"),
        ("pci.baseClass", "nvidia_smi_pci_base_class", "pci.baseClass", "pci.baseClass"),
    ]


@pytest.mark.parametrize(
    ("qfield", "kind"),
    [
        ("gpu_recovery_action", ValueKind.RECOVERY_ACTION),
        ("fabric.state", ValueKind.FABRIC_STATE),
        ("fabric.status", ValueKind.GENERIC),
        ("Fabric.State", ValueKind.GENERIC),
        ("fan.speed", ValueKind.GENERIC),
    ],
    ids=[
        "gpu_recovery_action is an enum",
        "fabric.state is an enum",
        "fabric.status is generic",
        "enum keyed by exact QField",
        "everything else is generic",
    ],
)
def test_value_kind(qfield: str, kind: ValueKind) -> None:
    assert value_kind(qfield) is kind


def test_enum_kind_carried_in_plan() -> None:
    plan = plan_field_metrics([("fabric.state", "fabric.state"), ("gpu_recovery_action", "gpu_recovery_action")])
    assert {metric.qfield: metric.kind for metric in plan} == {
        "fabric.state": ValueKind.FABRIC_STATE,
        "gpu_recovery_action": ValueKind.RECOVERY_ACTION,
    }

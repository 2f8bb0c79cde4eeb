"""The self families rendered per scrape (exposition/selfmetrics.py): a group of lines kept from an earlier scrape
is served only while its values are unchanged, and a count prints exactly as Go prints ``float64(count)``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvidia_gpu_exporter._go.floats import format_go_float
from nvidia_gpu_exporter.exposition import selfmetrics
from nvidia_gpu_exporter.exposition.selfmetrics import HandlerStats, SelfMetrics, format_count
from nvidia_gpu_exporter.httpserver.stats import ReloadStats

BUILD = ("main", "amd64", "linux", "3.11", "abc", "", "1.0")


@pytest.mark.parametrize(
    "count",
    [0, 1, 9, 999_999, 1_000_000, 1_000_001, 2**53, 2**53 + 1, 10**21 - 1, 10**21, 10**22, -1, -1_000_000],
    ids=lambda count: f"n={count}",
)
def test_format_count_is_go_float_formatting_at_the_boundaries(count: int) -> None:
    assert format_count(count) == format_go_float(float(count))


@given(st.integers(min_value=-(10**25), max_value=10**25))
def test_format_count_is_go_float_formatting_for_any_integer(count: int) -> None:
    assert format_count(count) == format_go_float(float(count))


def _open(stats: HandlerStats) -> None:
    stats.connections.open += 1


def _evicted(stats: HandlerStats) -> None:
    stats.connections.closed["evicted"] += 1


def _incomplete(stats: HandlerStats) -> None:
    stats.connections.responses_incomplete += 1


def _gathering_error(stats: HandlerStats) -> None:
    stats.errors["gathering"] += 1


def _in_flight(stats: HandlerStats) -> None:
    stats.in_flight += 1


def _served(stats: HandlerStats) -> None:
    stats.count(200)


def _new_code(stats: HandlerStats) -> None:
    stats.count(404)


CHANGES: list[tuple[str, Callable[[HandlerStats], None]]] = [
    ("open connections", _open),
    ("a closed-connection reason", _evicted),
    ("incomplete responses", _incomplete),
    ("a handler error cause", _gathering_error),
    ("requests in flight", _in_flight),
    ("a request code's count", _served),
    ("a request code not counted before", _new_code),
]


@pytest.mark.parametrize(("change", "mutate"), CHANGES, ids=[change for change, _ in CHANGES])
def test_a_changed_value_is_rendered_anew(change: str, mutate: Callable[[HandlerStats], None]) -> None:
    stats = HandlerStats()
    kept = SelfMetrics(BUILD)
    first = kept.before_nvidia_smi(stats) + kept.after_nvidia_smi(stats)
    mutate(stats)
    fresh = SelfMetrics(BUILD)
    expected = fresh.before_nvidia_smi(stats) + fresh.after_nvidia_smi(stats)
    assert expected != first, f"{change} does not show in the rendering"
    assert kept.before_nvidia_smi(stats) + kept.after_nvidia_smi(stats) == expected


def test_a_new_process_reading_is_rendered_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([{"process_open_fds": 7.0}, {"process_open_fds": 8.0}])
    current: dict[str, float] = next(readings)
    monkeypatch.setattr(selfmetrics, "process_values", lambda: current)
    metrics = SelfMetrics(BUILD)
    stats = HandlerStats()
    assert "process_open_fds 7\n" in metrics.after_nvidia_smi(stats)
    current = next(readings)
    assert "process_open_fds 8\n" in metrics.after_nvidia_smi(stats)


def test_an_unchanged_scrape_renders_the_same_text() -> None:
    stats = HandlerStats()
    metrics = SelfMetrics(BUILD)
    first = metrics.before_nvidia_smi(stats) + metrics.after_nvidia_smi(stats)
    assert metrics.before_nvidia_smi(stats) + metrics.after_nvidia_smi(stats) == first


def test_the_web_config_reload_state_is_served_only_with_a_web_config_file() -> None:
    stats = HandlerStats()
    metrics = SelfMetrics(BUILD)
    assert "web_config" not in metrics.before_nvidia_smi(stats)
    stats.web_config = ReloadStats(1_700_000_000.5)
    text = metrics.before_nvidia_smi(stats)
    assert "nvidia_gpu_exporter_web_config_last_reload_successful 1\n" in text
    assert "nvidia_gpu_exporter_web_config_last_reload_success_timestamp_seconds 1.7000000005e+09\n" in text
    stats.web_config.failed()
    text = metrics.before_nvidia_smi(stats)
    assert "nvidia_gpu_exporter_web_config_last_reload_successful 0\n" in text
    assert "nvidia_gpu_exporter_web_config_last_reload_success_timestamp_seconds 1.7000000005e+09\n" in text
    stats.web_config.succeeded(1_700_000_100.0)
    text = metrics.before_nvidia_smi(stats)
    assert "nvidia_gpu_exporter_web_config_last_reload_successful 1\n" in text
    assert "nvidia_gpu_exporter_web_config_last_reload_success_timestamp_seconds 1.7000001e+09\n" in text

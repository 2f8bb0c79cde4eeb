"""Fleet mode's wiring (fleet.py), in process: the targets a probe may name, each with its own collector, and the
targets file's reloads (docs/fleet.md, "The targets file" and "In the code"). No SSH is spoken: nothing here probes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

pytest.importorskip("asyncssh", reason="fleet mode needs asyncssh (the 'fleet' extra): pip install -e '.[fleet]'")

from nvidia_gpu_exporter.backends.fields import BUILTIN_FIELDS
from nvidia_gpu_exporter.backends.fleet.ssh import ConnectionKey
from nvidia_gpu_exporter.backends.fleet.targets import TargetsError
from nvidia_gpu_exporter.fleet import RELOAD_CHECK_SECONDS, Fleet


def targets_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "targets.yml"
    path.write_text(text, encoding="utf-8")
    return path


def due(fleet: Fleet) -> None:
    """Make the once-a-second look at the file due now."""
    fleet._checked_at -= RELOAD_CHECK_SECONDS + 1


def test_a_configured_name_has_its_own_collector_bounded_by_its_timeout_and_nothing_else_is_found(
    tmp_path: Path,
) -> None:
    path = targets_file(tmp_path, "targets: {gpu-01: {timeout: 3s}, gpu-02: {host: 10.0.0.2}}\n")

    async def scenario() -> None:
        fleet = Fleet(str(path))
        try:
            assert fleet.names == ("gpu-01", "gpu-02")
            first, second = fleet.lookup("gpu-01"), fleet.lookup("gpu-02")
            assert first is not None
            assert second is not None
            assert first.target.name == "gpu-01"
            assert first.collector.timeout_seconds == 3.0
            assert second.target.host == "10.0.0.2"
            assert second.collector.timeout_seconds == 10.0
            assert first.collector is not second.collector
            assert first.backend.runner.pool is fleet.pool is second.backend.runner.pool  # one pool for the fleet
            for unknown in ("gpu-03", "", "10.0.0.2", "GPU-01"):
                assert fleet.lookup(unknown) is None
        finally:
            await fleet.aclose()

    asyncio.run(scenario())


def test_a_bad_file_at_startup_is_an_error_naming_it(tmp_path: Path) -> None:
    path = targets_file(tmp_path, "targets: {a: {port: nope}}\n")
    with pytest.raises(TargetsError, match=r"targets\.yml: .*targets\.a\.port"):
        Fleet(str(path))


def test_a_lookup_sees_a_changed_file_once_the_second_has_passed(tmp_path: Path) -> None:
    path = targets_file(tmp_path, "targets: {a: }\n")

    async def scenario() -> None:
        fleet = Fleet(str(path))
        try:
            path.write_text("targets: {a: , b: }\n", encoding="utf-8")
            assert fleet.lookup("b") is None  # the file was looked at less than a second ago
            assert fleet.reloads == 0
            due(fleet)
            assert fleet.lookup("b") is not None
            assert fleet.reloads == 1
            due(fleet)
            assert fleet.lookup("a") is not None
            assert fleet.reloads == 1  # unchanged since: not read again
        finally:
            await fleet.aclose()

    asyncio.run(scenario())


def test_a_broken_file_keeps_the_previous_targets_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = targets_file(tmp_path, "targets: {a: , b: }\n")

    async def scenario() -> None:
        fleet = Fleet(str(path))
        try:
            kept = fleet.lookup("a")
            path.write_text("targets: {a: {port: nope}}\n", encoding="utf-8")
            due(fleet)
            with caplog.at_level(logging.ERROR, logger="nvidia_gpu_exporter.fleet"):
                assert fleet.lookup("a") is kept
            assert fleet.names == ("a", "b")
            assert fleet.reloads == 0
            assert fleet.reload() is False  # SIGHUP's reload refuses it the same way
            assert fleet.names == ("a", "b")
        finally:
            await fleet.aclose()

    asyncio.run(scenario())
    assert "targets file reload failed, keeping the previous targets" in caplog.text


def test_a_reload_keeps_an_unchanged_target_rebuilds_a_changed_one_and_closes_a_dropped_one(tmp_path: Path) -> None:
    path = targets_file(tmp_path, "targets: {same: , changed: , dropped: }\n")

    async def scenario() -> None:
        fleet = Fleet(str(path))
        try:
            same, changed, dropped = (fleet.lookup(name) for name in ("same", "changed", "dropped"))
            assert same is not None
            assert changed is not None
            assert dropped is not None
            for probed in (same, changed, dropped):
                fleet.pool.host(probed.target)  # as a first probe does: the host's connection is pooled
            path.write_text("targets: {same: , changed: {port: 2222}}\n", encoding="utf-8")
            assert fleet.reload() is True
            assert fleet.names == ("same", "changed")
            assert fleet.lookup("same") is same  # its counters, fields and connection are kept
            rebuilt = fleet.lookup("changed")
            assert rebuilt is not None
            assert rebuilt is not changed
            assert rebuilt.target.settings.port == 2222
            await asyncio.wait_for(asyncio.gather(*fleet._closing), 5)
            assert dropped.collector._closing
            assert changed.collector._closing
            assert not same.collector._closing
            # The dropped target's connection and the changed one's old connection are closed; the kept one stays.
            assert set(fleet.pool.hosts) == {ConnectionKey.of(same.target)}
        finally:
            await fleet.aclose()

    asyncio.run(scenario())


def test_closing_the_fleet_closes_every_collector_and_connection(tmp_path: Path) -> None:
    path = targets_file(tmp_path, "targets: {a: , b: }\n")

    async def scenario() -> None:
        fleet = Fleet(str(path))
        probed = [fleet.lookup("a"), fleet.lookup("b")]
        for each in probed:
            assert each is not None
            fleet.pool.host(each.target)
        path.write_text("targets: {a: }\n", encoding="utf-8")
        fleet.reload()  # b's closing runs in the background: aclose waits for it
        await asyncio.wait_for(fleet.aclose(), 5)
        assert not fleet._closing
        assert all(each is not None and each.collector._closing for each in probed)
        assert fleet.pool.hosts == {}

    asyncio.run(scenario())


def test_before_its_fields_are_discovered_a_target_renders_the_builtin_fields_with_one_exposition(
    tmp_path: Path,
) -> None:
    path = targets_file(tmp_path, "targets: {a: }\n")

    async def scenario() -> None:
        fleet = Fleet(str(path))
        try:
            probed = fleet.lookup("a")
            assert probed is not None
            exposition = probed.exposition_now()
            assert [field.qfield for field in exposition.fields] == list(BUILTIN_FIELDS)
            assert probed.exposition_now() is exposition  # built again only when the fields change
        finally:
            await fleet.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize(("limit", "usage"), [(None, False), (0, True), (16, True)])
def test_each_target_collects_per_process_usage_as_the_local_exporter_would(
    tmp_path: Path, limit: int | None, usage: bool
) -> None:
    """--collect.process-usage reaches every target: its backend runs pmon and its collector caps the rows."""
    path = targets_file(tmp_path, "targets: {gpu-01: {}}\n")

    async def scenario() -> None:
        fleet = Fleet(str(path), compute_apps=True, process_usage_limit=limit)
        try:
            probed = fleet.lookup("gpu-01")
            assert probed is not None
            assert probed.collector.process_usage_limit == limit
            assert probed.backend.process_usage is usage
        finally:
            await fleet.aclose()

    asyncio.run(scenario())

"""The XID watcher thread against the fake libnvidia-ml: counting, storms, re-registration and backoff."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from nvidia_gpu_exporter.backends.nvml.session import NvmlSession
from nvidia_gpu_exporter.backends.nvml.xid import XidWatcher
from nvml_fixtures import InProcessFake, h200_uuid
from polling import wait_until


@pytest.fixture
def session(fake_nvml: InProcessFake) -> Iterator[NvmlSession]:
    opened = NvmlSession()
    assert opened.init() is None
    yield opened
    opened.close(5)


def start(session: NvmlSession, **options: float) -> XidWatcher:
    watcher = XidWatcher(session, wait_milliseconds=50, **options)  # type: ignore[arg-type]
    watcher.start()
    wait_until(lambda: watcher.registrations > 0, "the first registration")
    return watcher


def counts(watcher: XidWatcher) -> dict[tuple[str, int], int]:
    return {(record.gpu_uuid, record.xid): record.count for record in watcher.records()}


def test_events_are_counted_per_gpu_and_code_with_a_warning_each(
    fake_nvml: InProcessFake, session: NvmlSession, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.command("reset mig")
    uuid0, uuid1 = h200_uuid(fake_nvml, 0), h200_uuid(fake_nvml, 1)
    caplog.set_level(logging.WARNING)
    watcher = start(session)
    try:
        before = time.time()
        fake_nvml.command("xid 0 79 2", "xid 1 13", "xid 0 48")
        wait_until(lambda: sum(counts(watcher).values()) == 4, "four events")
        assert counts(watcher) == {(uuid0, 48): 1, (uuid0, 79): 2, (uuid1, 13): 1}
        stamps = [record.last_seen for record in watcher.records()]
        assert all(stamp is not None and stamp >= before for stamp in stamps)  # NVML events are always stamped
        assert len([record for record in caplog.records if record.getMessage() == "XID error"]) == 4
    finally:
        watcher.stop(5)


def test_an_xid_storm_is_counted_in_full(fake_nvml: InProcessFake, session: NvmlSession) -> None:
    fake_nvml.command("reset xidstorm")
    watcher = start(session)
    try:
        wait_until(lambda: sum(counts(watcher).values()) == 1000, "1000 storm events")
        assert fake_nvml.pending_events() == 0
        assert {xid for _, xid in counts(watcher)} == {13, 31, 43, 48, 63, 79, 119}
    finally:
        watcher.stop(5)


def test_counts_survive_an_nvml_reinit_and_the_watcher_registers_again(
    fake_nvml: InProcessFake, session: NvmlSession
) -> None:
    uuid = h200_uuid(fake_nvml)
    watcher = start(session)
    try:
        fake_nvml.command("xid 0 79")
        wait_until(lambda: counts(watcher) == {(uuid, 79): 1}, "the first event")
        session.mark_lost()
        assert session.reinit(session.generation, 5) is None
        wait_until(lambda: watcher.registrations == 2, "a registration on the new session")
        fake_nvml.command("xid 0 79")
        wait_until(lambda: counts(watcher) == {(uuid, 79): 2}, "the count to carry on")
    finally:
        watcher.stop(5)


def test_registration_failures_back_off_and_reinit_nvml_themselves(
    fake_nvml: InProcessFake, session: NvmlSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    fake_nvml.command("rc nvmlEventSetCreate 15")  # GPU_IS_LOST: a lifecycle error
    inits = fake_nvml.calls("nvmlInitWithFlags")
    watcher = XidWatcher(session, wait_milliseconds=50, min_backoff_seconds=0.02, max_backoff_seconds=0.08)
    watcher.start()
    try:
        # Each failure logs its back-off before the re-init it waits for: four re-inits, four warnings at least.
        wait_until(lambda: fake_nvml.calls("nvmlInitWithFlags") >= inits + 4, "re-inits by the watcher")
        backoffs = [
            record.backoff_seconds  # type: ignore[attr-defined]
            for record in caplog.records
            if record.getMessage() == "XID watcher cannot listen for events, retrying"
        ]
        assert backoffs[:4] == [0.02, 0.04, 0.08, 0.08]
        assert watcher.registrations == 0
        fake_nvml.command("rc nvmlEventSetCreate 0")
        wait_until(lambda: watcher.registrations == 1, "registration once the driver is back")
        fake_nvml.command("xid 0 31")
        wait_until(lambda: sum(counts(watcher).values()) == 1, "an event after recovery")
    finally:
        watcher.stop(5)


def test_a_gpu_that_cannot_report_xids_is_skipped_and_events_of_unknown_devices_are_dropped(
    fake_nvml: InProcessFake, session: NvmlSession
) -> None:
    fake_nvml.command("reset mig", "set 1 xid_supported 0")
    uuid0 = h200_uuid(fake_nvml, 0)
    watcher = start(session)
    try:
        fake_nvml.command("xid 1 79", "xid 0 13")
        wait_until(lambda: sum(counts(watcher).values()) == 1, "the event of the watched GPU")
        assert counts(watcher) == {(uuid0, 13): 1}
    finally:
        watcher.stop(5)


def test_the_watcher_stops_promptly_and_holds_no_nvml_call(fake_nvml: InProcessFake, session: NvmlSession) -> None:
    watcher = start(session)
    stopper = threading.Thread(target=watcher.stop, args=(5,))
    stopper.start()
    stopper.join()
    assert not watcher.alive
    assert session.close(5)
    assert fake_nvml.refcount() == 0

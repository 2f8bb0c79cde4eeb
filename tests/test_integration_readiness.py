"""``GET /-/ready`` with ``--web.ready.*`` (docs/compatibility.md, "Readiness"), against the real exporter process:
503 before the first successful collection, 200 after, 503 again once the last success is older than the bound
while collections fail, and 503 while the last success saw fewer GPUs than expected (a count, or the PCI bus's).
Off by default: the Go exporter's ``/-/ready`` is always 200 (test_integration_collection.py keeps that)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import StartExporter
from exposition_reader import sample_value
from harness import MIG_FIXTURE, Exporter, Response, Wrapper, fake_smi_command
from polling import wait_until
from sysfs_fakes import add_function, gpu, make_sysfs, remove_function

READY = "Nvidia GPU Exporter is Ready.\n"
NOT_READY = "Nvidia GPU Exporter is not ready:\n"
REQUIRE = "--web.ready.require-collection"
DEMO = "--collect.backend=demo"
FIXTURE_GPUS = ("0000:07:00.0", "0000:0f:00.0")  # the bus ids of the fixture capture's two GPUs


def ready(handle: Exporter) -> Response:
    return handle.get("/-/ready")


def wait_ready(handle: Exporter, status: int, holding: str = "") -> Response:
    """Probe until the answer has ``status`` (and its body holds ``holding``)."""
    return wait_until(
        lambda: ready(handle),
        f"/-/ready to answer {status} with {holding!r}",
        until=lambda answer: answer.status == status and holding in answer.text,
        interval=0.2,
    )


def test_background_collections_ready_after_the_first_success_and_not_once_stale(
    tmp_path: Path, exporter: StartExporter
) -> None:
    wrapper = Wrapper.create(tmp_path)
    wrapper.set("from", "2")  # the startup mapping query (the first --query-gpu=) is answered
    wrapper.set("stdout", "not csv at all\n")  # every collection fails
    handle = exporter(*wrapper.args(), "--collect.interval=1s", REQUIRE, "--web.ready.max-staleness=4s")

    first = wait_ready(handle, 503, "the latest failed")
    assert first.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert first.text.startswith(
        NOT_READY + "- no collection has succeeded yet (--web.ready.require-collection); the latest failed: "
    )
    assert first.text.count("\n") == 2  # one condition unmet, one line for it

    (wrapper.control / "stdout").unlink()
    assert wait_ready(handle, 200).text == READY

    wrapper.set("stdout", "not csv at all\n")
    assert ready(handle).status == 200  # the last success is younger than the bound
    stale = wait_ready(handle, 503, "the latest failed")
    assert "- the last successful collection finished " in stale.text
    assert "s ago, longer than --web.ready.max-staleness=4s; the latest failed: " in stale.text

    (wrapper.control / "stdout").unlink()
    assert wait_ready(handle, 200).text == READY


def test_collecting_on_scrape_a_probe_collects_when_it_would_answer_503(
    tmp_path: Path, exporter: StartExporter
) -> None:
    """Without --collect.interval nothing else collects for a target not scraped because it is not ready."""
    config = tmp_path / "demo.yaml"
    good = "gpus: 2\n"
    config.write_text(good, encoding="utf-8")
    handle = exporter(DEMO, f"--demo-config={config}", REQUIRE, "--web.ready.max-staleness=1s")
    config.write_text("gpus: [broken\n", encoding="utf-8")  # every collection now fails, naming the file

    answer = ready(handle)
    assert answer.status == 503
    assert answer.text.startswith(
        NOT_READY
        + "- no collection has succeeded yet (--web.ready.require-collection); the latest failed: demo config: "
    )

    config.write_text(good, encoding="utf-8")
    assert ready(handle).text == READY  # this probe's own collection succeeded
    assert ready(handle).status == 200  # younger than the bound: answered without collecting
    metrics = handle.scrape()
    assert sample_value(metrics, "nvidia_smi_failed_scrapes_total") == 1

    config.write_text("gpus: [broken\n", encoding="utf-8")
    time.sleep(1.2)  # past the bound: the next probe collects, and fails
    stale = ready(handle)
    assert stale.status == 503
    assert "longer than --web.ready.max-staleness=1s; the latest failed: demo config: " in stale.text


@pytest.mark.parametrize(
    ("min_gpus", "status", "body"),
    [
        ("2", 200, READY),
        (
            "3",
            503,
            NOT_READY + "- the last successful collection saw 2 GPUs, fewer than --web.ready.min-gpus=3\n",
        ),
    ],
    ids=["as many as asked", "fewer than asked"],
)
def test_a_configured_gpu_count(tmp_path: Path, exporter: StartExporter, min_gpus: str, status: int, body: str) -> None:
    config = tmp_path / "demo.yaml"
    config.write_text("gpus: 2\n", encoding="utf-8")
    handle = exporter(DEMO, f"--demo-config={config}", REQUIRE, f"--web.ready.min-gpus={min_gpus}")
    answer = ready(handle)
    assert (answer.status, answer.text) == (status, body)


def test_the_pci_bus_count_follows_sysfs(tmp_path: Path, exporter: StartExporter) -> None:
    tree = make_sysfs(tmp_path / "sys", [gpu(address) for address in FIXTURE_GPUS])
    command = fake_smi_command(MIG_FIXTURE)
    handle = exporter(
        "--nvidia-smi-command", command, f"--collect.sysfs-path={tree}", REQUIRE, "--web.ready.min-gpus=pci"
    )
    assert ready(handle).text == READY

    add_function(tree, gpu("0000:5e:00.0", driver="vfio-pci"))  # a GPU the driver does not hold
    handle.scrape()  # a collection reads the bus again
    answer = ready(handle)
    assert (answer.status, answer.text) == (
        503,
        NOT_READY + "- the last successful collection saw 2 GPUs, fewer than the 3 the PCI bus lists "
        "(--web.ready.min-gpus=pci)\n",
    )

    remove_function(tree, "0000:5e:00.0")
    assert ready(handle).text == READY  # the probe collected, and read the bus, again


def test_an_unreadable_pci_bus_is_not_taken_for_a_bus_without_gpus(tmp_path: Path, exporter: StartExporter) -> None:
    command = fake_smi_command(MIG_FIXTURE)
    handle = exporter(
        "--nvidia-smi-command",
        command,
        f"--collect.sysfs-path={tmp_path / 'absent'}",
        REQUIRE,
        "--web.ready.min-gpus=pci",
    )
    answer = ready(handle)
    assert (answer.status, answer.text) == (
        503,
        NOT_READY + "- the PCI bus could not be read: the GPUs it lists are unknown (--web.ready.min-gpus=pci)\n",
    )

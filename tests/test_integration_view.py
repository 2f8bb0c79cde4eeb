"""The live view over loopback HTTP: the real exporter on port 0, the demo backend or the fake nvidia-smi.

The page renders the GPUs without JavaScript, ``/-/view.json`` matches its schema, the history fills with
background collections, a hostile process name arrives escaped, and basic auth guards both routes.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import bcrypt
import jsonschema
import pytest

from conftest import StartExporter
from harness import FIXTURE_CAPTURES, Exporter, start_exporter
from polling import wait_until

SCHEMA: dict[str, Any] = json.loads(
    (resources.files("nvidia_gpu_exporter.web") / "view.schema.json").read_text(encoding="utf-8")
)
HOSTILE = "<img src=x onerror=alert(1)>&\"'"
PASSWORD = "view-secret"


def _json(handle: Exporter, headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = handle.get("/-/view.json", headers)
    assert response.status == 200, response.body[:300]
    assert response.headers.get("Content-Type") == "application/json"
    document: dict[str, Any] = json.loads(response.body)
    return document


@pytest.fixture(scope="module")
def demo() -> Iterator[Exporter]:
    """The demo backend collecting in the background (fast, so the history fills within the test)."""
    handle = start_exporter(["--collect.backend=demo", "--collect.compute-apps", "--collect.interval=200ms"])
    yield handle
    handle.stop()


def test_the_page_renders_the_demo_gpus_without_javascript(demo: Exporter) -> None:
    wait_until(lambda: _json(demo)["gpus"], "the first background collection")
    page = demo.scrape("/")
    assert "<title>Nvidia GPU Exporter</title>" in page
    assert 'href="/metrics"' in page  # the Go exporter's landing page promise (docs/compatibility.md)
    assert page.count("GPU 0: NVIDIA H200") == page.count("GPU 1: NVIDIA H200") == 1
    assert '<th scope="row">Temperature</th>' in page
    assert "Last collection succeeded" in page


def test_the_document_matches_its_schema(demo: Exporter) -> None:
    document = wait_until(lambda: _json(demo), "GPUs in the document", until=lambda found: found["gpus"])
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert [gpu["name"] for gpu in document["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert document["gpus"][0]["processes"]  # the demo's workloads with --collect.compute-apps


def test_the_history_grows_with_background_collections(demo: Exporter) -> None:
    document = wait_until(
        lambda: _json(demo),
        "three points per GPU",
        until=lambda found: all(len(gpu["history"]["t"]) >= 3 for gpu in found["gpus"]) and found["gpus"],
    )
    for gpu in document["gpus"]:
        times = gpu["history"]["t"]
        assert times == sorted(times)
        assert len(gpu["history"]["temperature_celsius"]) == len(times)


def test_a_hostile_process_name_is_escaped_on_the_page(exporter: StartExporter, tmp_path: Path) -> None:
    capture = tmp_path / "hostile.txt"
    original = (FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt").read_text(encoding="utf-8")
    capture.write_text(original.replace("/usr/bin/python3", HOSTILE).replace("/usr/local/bin/jupyter-kernel", HOSTILE))
    config = tmp_path / "demo.yml"
    config.write_text(f"capture: {capture}\n")  # replayed in-process by the demo backend: no child processes
    handle = exporter("--collect.backend=demo", f"--demo-config={config}", "--collect.compute-apps")
    names = [process["name"] for gpu in _json(handle)["gpus"] for process in gpu["processes"]]
    assert HOSTILE in names  # the JSON carries the name as reported
    page = handle.scrape("/")
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;&amp;&quot;&#x27;" in page


@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """The demo backend collecting on each request (the default), behind basic auth."""
    config = tmp_path_factory.mktemp("view") / "web.yml"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    config.write_text(f"basic_auth_users:\n  viewer: {hashed}\n")
    handle = start_exporter(["--collect.backend=demo", f"--web.config.file={config}"])
    yield handle
    handle.stop()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/", id="page"),
        pytest.param("/-/view.json", id="json"),
        pytest.param("/-/health", id="verdicts"),  # the GPU verdicts sit behind the same authentication
    ],
)
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({}, 401, id="no-credentials-401"),
        pytest.param(_basic("viewer", "wrong"), 401, id="wrong-password-401"),
        pytest.param(_basic("viewer", PASSWORD), 200, id="right-password-200"),
    ],
)
def test_basic_auth_guards_the_view(protected: Exporter, path: str, headers: dict[str, str], status: int) -> None:
    assert protected.get(path, headers).status == status


def test_a_view_in_synchronous_mode_reuses_a_fresh_collection(protected: Exporter) -> None:
    """Viewers make nvidia-smi run at most once per refresh period, however many requests they send."""
    sequences = {_json(protected, _basic("viewer", PASSWORD))["collection"]["sequence"] for _ in range(5)}
    assert len(sequences) == 1


def test_head_measures_the_page_last_served(demo: Exporter) -> None:
    """HEAD collects and builds nothing, so its Content-Length is the page the last GET was given."""
    body = demo.get("/").body
    host, port = demo.address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("HEAD", "/")
        reply = connection.getresponse()
        assert reply.read() == b""
        assert (reply.status, reply.getheader("Content-Length")) == (200, str(len(body)))
    finally:
        connection.close()

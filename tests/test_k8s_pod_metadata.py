"""--kubernetes.pod-metadata: the API server's list of the node's pods names the pods of shared GPUs.

A fake API server over HTTPS on 127.0.0.1 port 0 (a trustme CA made here) answers the list, well or badly;
the client's rules are tested in-process against it and with a fake lister, and one exporter started for real
serves three time-sliced pods with their namespace, pod and container under both profiles.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from conftest import StartExporter
from exposition_reader import sample_value, series
from harness import Exporter, fake_smi_command
from k8s_fakes import HOST_SERVICE, make_proc
from nvidia_gpu_exporter.app import build_pod_metadata
from nvidia_gpu_exporter.config import ConfigError, validate
from nvidia_gpu_exporter.flags import parse_args
from nvidia_gpu_exporter.kubernetes.apiclient import ApiAccess, ApiClient
from nvidia_gpu_exporter.kubernetes.podmetadata import (
    KEEP_SECONDS,
    MAX_NAME_CHARACTERS,
    PodLister,
    PodListError,
    PodMetadata,
    parse_pod_list,
)
from nvidia_gpu_exporter.model.kubernetes import API_FAILURE_REASONS, PodDirectory
from nvidia_gpu_exporter.model.podusage import pod_shares
from nvidia_gpu_exporter.model.snapshot import ProcessUsage, ProcessUsageRow
from nvidia_gpu_exporter.preflight import StartupError
from test_docs import served_families, undocumented
from test_integration_pod_usage import write_capture

NODE = "gpu-node-1"
TOKEN = "test-token"  # a fake server's
GPU0 = "GPU-11111111-2222-4333-8444-555555555555"
GPU1 = "GPU-66666666-7777-4888-9999-000000000000"
UUID0 = GPU0.removeprefix("GPU-").lower()

# Three pods time-sliced on GPU 0 (pod c with two processes in one container), beside a host process.
# (pod uid, namespace, pod, container, container id, pids)
PODS = (
    ("0a0a0a0a-0000-4000-8000-00000000000a", "team-a", "trainer-0", "trainer", "a" * 64, (1001,)),
    ("0b0b0b0b-0000-4000-8000-00000000000b", "team-b", "notebook-x", "jupyter", "b" * 64, (1002,)),
    ("0c0c0c0c-0000-4000-8000-00000000000c", "team-a", "infer-7", "server", "c" * 64, (1003, 1004)),
)
PROCESSES = (  # as test_integration_pod_usage's write_capture takes them: (gpu, pid, uid, SM %, MiB)
    (GPU0, 1001, PODS[0][0], 30, 1000),
    (GPU0, 1002, PODS[1][0], 20, 500),
    (GPU0, 1003, PODS[2][0], 10, 250),
    (GPU0, 1004, PODS[2][0], 5, 250),
    (GPU0, 1900, "", 15, 100),
    (GPU1, 2001, "", 40, 100),
)


def pod_item(uid: str, namespace: str, name: str, containers: dict[str, str], **extra: Any) -> dict[str, Any]:
    """One PodList item as the API server writes it: containerStatuses with ``containerd://<id>`` ids."""
    return {
        "metadata": {"uid": uid, "namespace": namespace, "name": name, **extra},
        "spec": {"nodeName": NODE},
        "status": {
            "containerStatuses": [
                {"name": container, "containerID": f"containerd://{cid}"} for container, cid in containers.items()
            ]
        },
    }


def pod_list(*items: dict[str, Any]) -> bytes:
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "items": list(items)}).encode()


NODE_PODS = pod_list(*(pod_item(uid, ns, name, {container: cid}) for uid, ns, name, container, cid, _ in PODS))


# -- the fake API server ---------------------------------------------------------------------------------------


@dataclass
class FakeApi:
    """What the fake API server answers (``mode``), and the requests it got."""

    url: str
    ca: trustme.CA
    mode: str = "ok"
    body: bytes = NODE_PODS
    requests: list[tuple[str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends the slow answers at teardown

    def access(self, token: str = TOKEN) -> ApiAccess:
        return ApiAccess(server=self.url, source="test", token=token, ca_data=self.ca.cert_pem.bytes())

    def kubeconfig(self, path: Path) -> Path:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": "ca.pem"}}],
            "users": [{"name": "test", "user": {"token": TOKEN}}],
        }
        self.ca.cert_pem.write_to_path(str(path.parent / "ca.pem"))
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return path


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            api.requests.append((self.path, self.headers.get("Authorization", "")))
            mode = api.mode
            if mode == "ok":
                self._send(200, api.body)
            elif mode in ("forbidden", "unauthorized", "error"):
                status = {"forbidden": 403, "unauthorized": 401, "error": 500}[mode]
                message = f'pods is forbidden: User "system:serviceaccount:x:y" cannot list resource "pods" ({mode})'
                self._send(status, json.dumps({"kind": "Status", "message": message}).encode())
            elif mode == "redirect":
                self.send_response(302)
                self.send_header("Location", f"{api.url}/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif mode == "invalid":
                self._send(200, b'{"kind": "PodList", "items": [')
            elif mode == "status":
                self._send(200, b'{"kind": "Status", "status": "Failure"}')
            elif mode == "huge":  # announced as longer than the client reads
                self._send(200, b"{}", length=1 << 40)
            elif mode == "huge-chunked":  # no length: the client counts what it reads
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"x" * 65536
                for _ in range(64):
                    if api.release.is_set():
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            elif mode == "slow":  # no answer at all until the test ends
                api.release.wait(10)
            elif mode == "trickle":  # a byte at a time, each well within the socket timeout
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(100):
                    if api.release.wait(0.05):
                        break
                    self.wfile.write(b" ")
                    self.wfile.flush()

    return Handler


class QuietServer(ThreadingHTTPServer):
    """Clients that give up mid-answer are what these tests do: no traceback for them."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api() -> Iterator[FakeApi]:
    ca = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    fake = FakeApi("", ca)
    server = QuietServer(("127.0.0.1", 0), _handler(fake))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    fake.url = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def fresh(api: FakeApi) -> Iterator[FakeApi]:
    """The module's server answering well, with no requests recorded, again after the test."""
    api.mode, api.body = "ok", NODE_PODS
    api.requests.clear()
    yield api
    api.mode, api.body = "ok", NODE_PODS


# -- parsing the answer ----------------------------------------------------------------------------------------


def test_a_pod_list_names_pods_by_uid_and_containers_by_id() -> None:
    directory = parse_pod_list(NODE_PODS, read_at=7.0)
    assert directory.pods == {uid: (ns, name) for uid, ns, name, _, _, _ in PODS}
    assert directory.containers == {cid: container for _, _, _, container, cid, _ in PODS}
    assert directory.read_at == 7.0


def test_a_static_pod_is_also_named_by_its_config_hash() -> None:
    """The kubelet runs a static pod under its config hash, which is what its cgroup says; the mirror pod has
    another uid and the hash in annotations."""
    config_hash = "0123456789abcdef0123456789abcdef"
    item = pod_item(
        "9f9f9f9f-0000-4000-8000-00000000009f",
        "kube-system",
        "gpu-probe-node-1",
        {},
        annotations={"kubernetes.io/config.hash": config_hash, "kubernetes.io/config.mirror": config_hash},
    )
    assert parse_pod_list(pod_list(item)).pods[config_hash] == ("kube-system", "gpu-probe-node-1")


@pytest.mark.parametrize(
    ("item", "pods", "containers"),
    [
        ({"metadata": "no"}, {}, {}),
        ({"metadata": {"uid": "u", "namespace": "n"}}, {}, {}),  # no name
        ({"metadata": {"uid": 7, "namespace": "n", "name": "p"}}, {}, {}),
        (pod_item("u", "n", "p", {"c": "not-hex"}), {"u": ("n", "p")}, {}),
        (pod_item("u", "n", "p", {"": "d" * 64}), {"u": ("n", "p")}, {}),
        (pod_item("u", "n", "x" * 1000, {}), {"u": ("n", "x" * MAX_NAME_CHARACTERS)}, {}),
        (pod_item("u", "n", "p\ud800", {}), {"u": ("n", "p?")}, {}),  # a lone surrogate, which JSON allows
        ({**pod_item("u", "n", "p", {}), "status": {"containerStatuses": "no"}}, {"u": ("n", "p")}, {}),
        (
            {
                **pod_item("u", "n", "p", {}),
                "status": {"initContainerStatuses": [{"name": "init", "containerID": "cri-o://" + "e" * 64}]},
            },
            {"u": ("n", "p")},
            {"e" * 64: "init"},
        ),
    ],
)
def test_items_are_read_defensively(item: Any, pods: dict[str, Any], containers: dict[str, str]) -> None:
    directory = parse_pod_list(pod_list(item))
    assert (directory.pods, directory.containers) == (pods, containers)


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"<html>", "not JSON"),
        (b"[]", "not a PodList"),
        (b'{"kind": "Status"}', "not a PodList (kind 'Status')"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # nesting past the parser's recursion limit
    ],
)
def test_an_answer_that_is_no_pod_list_is_an_invalid_answer(body: bytes, detail: str) -> None:
    with pytest.raises(PodListError) as raised:
        parse_pod_list(body)
    assert raised.value.reason == "invalid_answer"
    assert detail in raised.value.detail


# -- one list against the fake server ----------------------------------------------------------------------------


def test_the_list_asks_for_this_nodes_pods_with_the_token(fresh: FakeApi) -> None:
    directory = PodLister(ApiClient(fresh.access()), NODE)()
    assert directory.pods[PODS[0][0]] == ("team-a", "trainer-0")
    assert fresh.requests == [(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}", f"Bearer {TOKEN}")]


@pytest.mark.parametrize(
    ("mode", "reason", "detail"),
    [
        ("forbidden", "forbidden", 'HTTP 403: pods is forbidden: User "system:serviceaccount:x:y" cannot list'),
        ("unauthorized", "unauthorized", "HTTP 401: "),
        ("error", "http_error", "HTTP 500: "),
        ("redirect", "http_error", "HTTP 302: "),  # not followed: the token would go along
        ("invalid", "invalid_answer", "the answer is not JSON"),
        ("status", "invalid_answer", "not a PodList"),
        ("huge", "too_large", "the answer is longer than 1048576 bytes"),
        ("huge-chunked", "too_large", "the answer is longer than 1048576 bytes"),
        ("slow", "timeout", "within 0.5s"),
        ("trickle", "timeout", "no complete answer within 0.5s"),
    ],
)
def test_a_bad_answer_is_a_failure_with_its_reason(fresh: FakeApi, mode: str, reason: str, detail: str) -> None:
    fresh.mode = mode
    lister = PodLister(ApiClient(fresh.access()), NODE, timeout_seconds=0.5, max_bytes=1 << 20)
    with pytest.raises(PodListError) as raised:
        lister()
    assert (raised.value.reason, detail in raised.value.detail) == (reason, True), raised.value.detail
    assert len(fresh.requests) == 1


def test_a_server_that_is_not_there_is_unreachable(fresh: FakeApi) -> None:
    access = ApiAccess(server=f"https://127.0.0.1:{unused_port()}", source="test", ca_data=fresh.ca.cert_pem.bytes())
    with pytest.raises(PodListError) as raised:
        PodLister(ApiClient(access), NODE, timeout_seconds=1.0)()
    assert raised.value.reason == "unreachable"


def test_a_server_whose_certificate_is_not_trusted_is_unreachable(fresh: FakeApi) -> None:
    access = ApiAccess(server=fresh.url, source="test", ca_data=trustme.CA().cert_pem.bytes())
    with pytest.raises(PodListError) as raised:
        PodLister(ApiClient(access), NODE, timeout_seconds=1.0)()
    assert (raised.value.reason, "CERTIFICATE_VERIFY_FAILED" in raised.value.detail) == ("unreachable", True)


def unused_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# -- when to list, and what a failure leaves --------------------------------------------------------------------


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class ScriptedLister:
    """Answers each list with the next outcome: a directory of the given uids, or a failure."""

    clock: Clock
    outcomes: list[tuple[str, ...] | PodListError]
    calls: int = 0

    def __call__(self) -> PodDirectory:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if isinstance(outcome, PodListError):
            raise outcome
        return PodDirectory({uid: ("ns", uid) for uid in outcome}, {}, self.clock())


def metadata(outcomes: list[tuple[str, ...] | PodListError], **kwargs: Any) -> tuple[PodMetadata, Clock]:
    clock = Clock()
    lister = ScriptedLister(clock, outcomes)
    return PodMetadata(lister, refresh_seconds=30.0, timeout_seconds=5.0, clock=clock, **kwargs), clock


FORBIDDEN = PodListError("forbidden", "HTTP 403: no")


@pytest.mark.parametrize(
    ("outcomes", "steps", "lists"),
    [
        ([("u1",)], [(0, {"u1"}), (10, {"u1"}), (29, {"u1"})], 1),  # known pods: once per refresh
        ([("u1",)], [(0, {"u1"}), (30, {"u1"})], 2),
        ([("u1",), ("u1", "u2")], [(0, {"u1"}), (1, {"u2"}), (5, {"u2"}), (6, {"u2"})], 2),  # a new pod: 5 s on
        ([FORBIDDEN], [(0, {"u1"}), (5, {"u1"}), (20, {"u1"})], 1),  # a failure waits the whole refresh
        ([FORBIDDEN], [(0, {"u1"}), (30, {"u1"})], 2),
    ],
)
def test_the_node_is_listed_when_due_and_no_more(
    outcomes: list[tuple[str, ...] | PodListError], steps: list[tuple[float, set[str]]], lists: int
) -> None:
    source, clock = metadata(outcomes)

    async def run() -> None:
        start = clock.now
        for at, uids in steps:
            clock.now = start + at
            await source.directory(uids)

    asyncio.run(run())
    assert source.lists == lists


def test_a_failure_is_counted_every_time_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    source, clock = metadata([("u1",), FORBIDDEN, FORBIDDEN, ("u1",)], where="https://api node-1")

    async def run() -> list[PodDirectory | None]:
        found = []
        for _ in range(4):
            found.append(await source.directory({"u1"}))
            clock.now += 30
        return found

    with caplog.at_level(logging.INFO, logger="nvidia_gpu_exporter.kubernetes.podmetadata"):
        found = asyncio.run(run())
    assert all(directory is not None for directory in found), "the last good answer serves through failures"
    assert source.failures == {**dict.fromkeys(API_FAILURE_REASONS, 0), "forbidden": 2}
    messages = [(record.levelname, record.getMessage()) for record in caplog.records]
    assert messages == [
        ("INFO", "Kubernetes pod metadata is up"),
        ("WARNING", "Kubernetes pod metadata is unavailable: pods are named by uid only"),
        ("INFO", "Kubernetes pod metadata is up"),
    ]
    warning = caplog.records[1]
    assert (warning.reason, warning.detail, warning.where) == ("forbidden", "HTTP 403: no", "https://api node-1")  # type: ignore[attr-defined]


def test_the_last_good_answer_names_pods_for_a_bounded_time() -> None:
    source, clock = metadata([("u1",), FORBIDDEN])

    async def at(seconds: float) -> PodDirectory | None:
        clock.now = 1000.0 + seconds
        return await source.directory({"u1"})

    async def run() -> tuple[PodDirectory | None, ...]:
        return (await at(0), await at(KEEP_SECONDS), await at(KEEP_SECONDS + 1))

    first, kept, dropped = asyncio.run(run())
    assert (first is not None, kept is not None, dropped) == (True, True, None)


def test_a_list_that_never_ends_holds_one_thread_and_no_collection() -> None:
    """Each collection waits at most the timeout; while the list runs on, none starts beside it."""
    release = threading.Event()
    started: list[float] = []

    def stuck() -> PodDirectory:
        started.append(time.monotonic())
        release.wait(10)
        return PodDirectory({"u1": ("ns", "p")}, {})

    source = PodMetadata(stuck, refresh_seconds=0.01, timeout_seconds=0.05)

    async def run() -> tuple[list[PodDirectory | None], int]:
        found = [await source.directory({"u1"}) for _ in range(3)]
        lists = len(started)
        release.set()
        await asyncio.sleep(0.05)
        found.append(await source.directory({"u1"}))
        return found, lists

    found, lists = asyncio.run(run())
    assert found[:3] == [None, None, None]
    assert lists == 1
    assert found[3] is not None
    assert found[3].pods == {"u1": ("ns", "p")}


# -- the shares' names -------------------------------------------------------------------------------------------


def _usage(*rows: tuple[str, int]) -> ProcessUsage:
    return ProcessUsage(True, tuple(ProcessUsageRow(GPU0, str(pid), f"job{pid}", sm_percent=sm) for pid, sm in rows))


@pytest.mark.parametrize(
    ("containers", "holders", "expected"),
    [
        ({"1": "trainer", "2": "trainer"}, {}, ("team-a", "trainer-0", "trainer")),
        ({"1": "trainer", "2": "sidecar"}, {}, ("team-a", "trainer-0", "")),  # two containers: none named
        ({}, {}, ("team-a", "trainer-0", "")),  # a container the list does not name yet
        ({"1": "trainer", "2": "trainer"}, {(UUID0, ""): ("o", "held", "c")}, ("team-a", "trainer-0", "trainer")),
    ],
)
def test_the_api_servers_names_label_the_pods_share(
    containers: dict[str, str], holders: dict[tuple[str, str], tuple[str, str, str]], expected: tuple[str, ...]
) -> None:
    pod_of = {"1": "uid-a", "2": "uid-a"}
    (share,) = pod_shares(
        _usage(("1", 10), ("2", 30)),
        pod_of,
        holders,
        {},
        16,
        names={"uid-a": ("team-a", "trainer-0")},
        containers=containers,
    )
    assert (share.namespace, share.pod, share.container, share.pod_uid) == (*expected, "uid-a")


def test_a_pod_the_list_lacks_keeps_the_kubelets_sole_holder() -> None:
    (share,) = pod_shares(
        _usage(("1", 10)), {"1": "uid-a"}, {(UUID0, ""): ("ns", "held", "c")}, {}, 16, names={"uid-b": ("x", "y")}
    )
    assert (share.namespace, share.pod, share.container) == ("ns", "held", "c")


# -- flags and startup -------------------------------------------------------------------------------------------


POD_METADATA_ARGS = (
    "--collect.compute-apps",
    "--collect.process-usage",
    "--kubernetes.process-pods",
    "--kubernetes.pod-metadata",
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kubernetes.pod-metadata"], "--kubernetes.pod-metadata requires --kubernetes.process-pods"),
        (
            ["--collect.compute-apps", "--kubernetes.process-pods", "--kubernetes.pod-metadata"],
            "--kubernetes.pod-metadata requires --collect.process-usage: it names the per-pod series",
        ),
        (
            [*POD_METADATA_ARGS, "--kubernetes.pod-metadata-refresh=0s"],
            "kubernetes.pod-metadata-refresh must be positive, got 0s",
        ),
    ],
)
def test_flags_that_cannot_work_stop_the_start(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(parse_args(args).config)


@pytest.mark.parametrize(
    ("extra", "environ", "message"),
    [
        ((), {}, "needs its name: set --kubernetes.node-name or NODE_NAME"),
        ((), {"NODE_NAME": NODE}, "found no in-cluster service account"),
        (("--kubernetes.kubeconfig=/nonexistent/kubeconfig",), {"NODE_NAME": NODE}, "/nonexistent/kubeconfig"),
    ],
)
def test_a_start_without_node_or_credentials_says_which(
    extra: tuple[str, ...], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(StartupError, match=message):
        build_pod_metadata(parse_args([*POD_METADATA_ARGS, *extra]).config, environ)


def test_the_kubeconfig_and_node_name_flags_reach_the_list(fresh: FakeApi, tmp_path: Path) -> None:
    kubeconfig = fresh.kubeconfig(tmp_path / "kubeconfig")
    source = build_pod_metadata(
        parse_args([*POD_METADATA_ARGS, f"--kubernetes.kubeconfig={kubeconfig}", "--kubernetes.node-name=n-2"]).config,
        {"NODE_NAME": NODE},
    )
    assert source is not None
    directory = asyncio.run(source.directory())
    assert directory is not None
    assert PODS[0][0] in directory.pods
    assert fresh.requests[0][0].endswith("spec.nodeName%3Dn-2")


# -- through the real server -------------------------------------------------------------------------------------


def _start(exporter: StartExporter, api: FakeApi, tmp_path: Path) -> Exporter:
    cgroups = {str(pid): HOST_SERVICE for _, pid, uid, _, _ in PROCESSES if not uid}
    for uid, *_, cid, pids in PODS:
        slice_uid = uid.replace("-", "_")
        for pid in pids:
            cgroups[str(pid)] = (
                "0::/kubepods.slice/kubepods-besteffort.slice/"
                f"kubepods-besteffort-pod{slice_uid}.slice/cri-containerd-{cid}.scope\n"
            )
    proc = make_proc(tmp_path, cgroups)
    capture = write_capture(tmp_path / "c.txt", PROCESSES)
    return exporter(
        "--nvidia-smi-command",
        fake_smi_command(capture, "--state", "load"),
        "--query-field-names=power.draw",
        "--metrics.profile=both",
        "--dcgm.compatibility=4.8",  # the DCGM names below are 4.8's
        *POD_METADATA_ARGS,
        f"--kubernetes.proc-root={proc}",
        f"--kubernetes.kubeconfig={api.kubeconfig(tmp_path / 'kubeconfig')}",
        f"--kubernetes.node-name={NODE}",
    )


def test_three_time_sliced_pods_carry_namespace_pod_and_container(
    exporter: StartExporter, fresh: FakeApi, tmp_path: Path
) -> None:
    text = _start(exporter, fresh, tmp_path).scrape()
    expected = {uid: (ns, name, container) for uid, ns, name, container, _, _ in PODS}
    for family in ("nvidia_smi_pod_gpu_share_ratio", "nvidia_smi_pod_power_draw_watts"):
        named = {
            sample.labels["pod_uid"]: (sample.labels["namespace"], sample.labels["pod"], sample.labels["container"])
            for sample in series(text, family)
        }
        assert named == expected, family
    dcgm = {
        sample.labels["pod_uid"]: (sample.labels["namespace"], sample.labels["pod"], sample.labels["container"])
        for sample in series(text, "DCGM_FI_DEV_POWER_USAGE")
        if "pod_uid" in sample.labels
    }
    assert dcgm == expected
    failures = {s.labels["reason"]: s.value for s in series(text, "nvidia_gpu_exporter_pod_metadata_failures_total")}
    assert failures == dict.fromkeys(API_FAILURE_REASONS, 0.0)
    own = {name: family for name, family in served_families(text).items() if "pod_metadata" in name}
    assert list(own) == ["nvidia_gpu_exporter_pod_metadata_failures_total"]
    assert undocumented(own) == []
    assert len(fresh.requests) == 1


def test_a_forbidden_list_leaves_pods_by_uid_counted_and_logged(
    exporter: StartExporter, fresh: FakeApi, tmp_path: Path
) -> None:
    fresh.mode = "forbidden"
    handle = _start(exporter, fresh, tmp_path)
    text = handle.scrape()
    shares = list(series(text, "nvidia_smi_pod_gpu_share_ratio"))
    assert {sample.labels["pod_uid"] for sample in shares} == {uid for uid, *_ in PODS}
    assert all(sample.labels["pod"] == "" for sample in shares)
    assert sample_value(text, "nvidia_gpu_exporter_pod_metadata_failures_total", {"reason": "forbidden"}) == 1.0
    (line,) = handle.logged("Kubernetes pod metadata is unavailable")
    assert "reason=forbidden" in line
    assert 'cannot list resource \\"pods\\"' in line, line

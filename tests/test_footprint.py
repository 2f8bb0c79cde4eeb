"""The exporter imports only what its configuration uses (issue 16): every module costs resident memory on every
GPU node, so a heavy one that sneaks back onto a configuration that does not need it fails here.

Each case runs the real exporter (``python -m nvidia_gpu_exporter``, 127.0.0.1 port 0), scrapes it once and
stops it; a ``sitecustomize`` on ``PYTHONPATH`` writes the child's ``sys.modules`` at exit, one file per
process (the fake nvidia-smi children load it too). ``ssl`` is kept out before ``asyncio`` (which would import
it) is first imported, unless the configuration serves TLS or runs something that may need it
(``preflight.needs_ssl``; BENCHMARKS.md, "Footprint", has the figures).
"""

from __future__ import annotations

import http.client
import signal
import ssl
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from conftest import StartExporter
from harness import FIXTURE_CAPTURES, Exporter, fake_smi_command
from nvidia_gpu_exporter.config import Config
from nvidia_gpu_exporter.httpserver.config import TlsSettings, WebConfig
from nvidia_gpu_exporter.preflight import needs_ssl
from nvml_fixtures import FakeNvmlLibrary

CAPTURE = FIXTURE_CAPTURES / "fixture-linux-2gpu-mig.txt"
# A cost-4 hash, so the check stays cheap; the exporter loads bcrypt for the user whether or not anyone logs in.
HASH = "$2b$04$b97I2YmfSIIS85ucx1p1puYKWyht7rauQrXdi9POiaXzSr1TA1.Ni"

SITECUSTOMIZE = """
import atexit, os, sys

def _dump():
    with open(os.path.join({directory!r}, "modules.%d" % os.getpid()), "w") as out:
        out.write("\\n".join(sorted(sys.modules)))

atexit.register(_dump)
"""

# Modules no configuration below loads unless it says so: the backends and tools it does not run, the
# bindings and parsers of features it does not configure.
OPTIONAL = (
    "ssl",  # TLS (tls_server_config), fleet mode, Kubernetes attribution (preflight.needs_ssl)
    "_ssl",
    "bcrypt",  # basic_auth_users
    "nvidia_gpu_exporter.httpserver.auth",  # basic_auth_users: the authenticator, built with the users
    "base64",
    "yaml",  # a config file (--web.config.file, --demo-config)
    "nvidia_gpu_exporter.support.strictyaml",
    "pynvml",  # --collect.backend=nvml
    "nvidia_gpu_exporter.backends.nvml",
    "nvidia_gpu_exporter.backends.demo",  # --collect.backend=demo
    "nvidia_gpu_exporter.capture",  # the fake nvidia-smi's and the demo's engine
    "nvidia_gpu_exporter.fakesmi",
    "nvidia_gpu_exporter.doctor",
    "nvidia_gpu_exporter.windows",
    "nvidia_gpu_exporter.kubernetes.attribution",  # --kubernetes.*
    "nvidia_gpu_exporter.exposition.kubernetes",  # the attribution's families and pod labels (issue 31, item 2)
    "nvidia_gpu_exporter.model.kubernetes",
    "nvidia_gpu_exporter.exposition.dcgm",  # --metrics.profile=dcgm or both
    "nvidia_gpu_exporter.exposition.dcgm_generations",  # its renames (config reads exposition/dcgm_defaults.py)
    "nvidia_gpu_exporter.exposition.dcgm_events",  # its XID and clock-event windows
    "fractions",  # the renames' unit factors
    "grpc",
    "asyncssh",  # --fleet.targets-file
    "nvidia_gpu_exporter.backends.fleet.targets",
    "nvidia_gpu_exporter.backends.fleet.ssh",
    "nvidia_gpu_exporter.kubernetes.podresources",  # --kubernetes.pod-resources (config.py reads only its defaults)
    "nvidia_gpu_exporter.kubernetes.devices",
    "nvidia_gpu_exporter.fleet",  # fleet mode's targets and their collectors, and its /probe route
    "nvidia_gpu_exporter.web.probe",
    "nvidia_gpu_exporter.web.view",  # the live view (GET / and /view.json), built at its first request
    "nvidia_gpu_exporter.web.landing",
    "aiohttp",  # a test dependency only: the HTTP layer is httpserver/ on h11 (its client side alone cost 7 MiB)
    "multidict",
    "yarl",
    "secrets",  # nothing needs a cryptographic token generator (hmac behind it)
    "hmac",
    "importlib.resources",  # the build record is read through the package's loader (support/buildinfo.py)
    "zipfile",
    "platform",  # only `--version` names the machine (cli.version_text)
    "nvidia_gpu_exporter.support.extras",  # the install hint of an extra that is missing
    "shlex",
    "datetime",  # the build date is formatted at build time (buildinfo.from_source); PyYAML's constructor loads it
    "encodings.idna",  # a str host makes getaddrinfo encode it with the idna codec (unicodedata, stringprep)
    # pathlib loads urllib.parse, which loads ipaddress: 0.5 MiB of a 1-GPU exporter's heap (issue 35), for paths a
    # string names as well, and a percent-decoder that a path without a ``%`` and a request without a query skip
    "pathlib",
    "urllib.parse",
    "ipaddress",
)

EXEC = ("--nvidia-smi-command", fake_smi_command(CAPTURE))
USERS = f"basic_auth_users:\n  prometheus: '{HASH}'\n"
WRONG_PASSWORD = {"Authorization": "Basic cHJvbWV0aGV1czp4"}


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    loaded: tuple[str, ...] = ()  # modules the configuration needs, so they must be there
    web_config: str | None = None  # a --web.config.file's text
    nvml: bool = False  # load the fake libnvidia-ml
    tls: bool = False  # the web config serves TLS with cert.pem and key.pem beside it (trustme's)


CASES = [
    pytest.param(Case(EXEC), id="plain-exec-loads-no-optional-module"),
    pytest.param(
        Case(
            EXEC,
            (
                "bcrypt",
                "yaml",
                "datetime",
                "nvidia_gpu_exporter.support.strictyaml",
                "nvidia_gpu_exporter.httpserver.auth",
                "base64",
            ),
            web_config=USERS,
        ),
        id="web-config-users-load-yaml-and-bcrypt",
    ),
    pytest.param(
        Case(
            EXEC,
            (
                "ssl",
                "_ssl",
                "bcrypt",
                "yaml",
                "datetime",
                "nvidia_gpu_exporter.support.strictyaml",
                "nvidia_gpu_exporter.httpserver.auth",
                "base64",
            ),
            web_config=f"tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n{USERS}",
            tls=True,
        ),
        id="tls-web-config-loads-ssl",
    ),
    pytest.param(
        # The DCGM block reads the attribution's types whether or not it is on, and the exec backend under it reads
        # through NVML what nvidia-smi cannot print (docs/dcgm.md, "The exec backend and NVML").
        Case(
            (*EXEC, "--metrics.profile=dcgm"),
            (
                "nvidia_gpu_exporter.exposition.dcgm",
                "nvidia_gpu_exporter.exposition.dcgm_generations",
                "nvidia_gpu_exporter.exposition.dcgm_events",
                "fractions",
                "nvidia_gpu_exporter.model.kubernetes",
                "nvidia_gpu_exporter.backends.nvml",
                "pynvml",
            ),
        ),
        id="dcgm-profile-loads-its-table",
        marks=pytest.mark.slow,  # the CI budget: the two cases above guard the exec path
    ),
    pytest.param(
        Case(("--collect.backend=nvml",), ("pynvml", "nvidia_gpu_exporter.backends.nvml"), nvml=True),
        id="nvml-backend-loads-the-bindings-only",
    ),
    pytest.param(
        Case(
            ("--collect.backend=demo",),
            # The capture engine reads the fake's config (and the demo's extras) through the strict YAML loader; the
            # simulated node's pods (backends/demo/pods.py) wait for Kubernetes attribution, which is off here.
            (
                "nvidia_gpu_exporter.backends.demo",
                "nvidia_gpu_exporter.capture",
                "nvidia_gpu_exporter.support.strictyaml",
            ),
        ),
        id="demo-backend-loads-its-engine-only",
        marks=pytest.mark.slow,
    ),
]


def hook_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment that makes every child write its ``sys.modules`` at exit, and where it writes them."""
    dumps = tmp_path / "modules"
    dumps.mkdir()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE.format(directory=str(dumps))))
    return {"PYTHONPATH": str(hook)}, dumps


def loaded_modules(dumps: Path, running: Exporter) -> set[str]:
    return set((dumps / f"modules.{running.process.pid}").read_text().split("\n"))


def write_pki(directory: Path) -> trustme.CA:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(directory / "key.pem"))
    return ca


def https_status(running: Exporter, ca: trustme.CA, headers: dict[str, str]) -> int:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    host, port = running.address.rsplit(":", 1)
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    try:
        connection.request("GET", "/metrics", headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.parametrize("case", CASES)
def test_configuration_imports_only_what_it_uses(
    exporter: StartExporter, tmp_path: Path, request: pytest.FixtureRequest, case: Case
) -> None:
    env, dumps = hook_env(tmp_path)
    if case.nvml:
        library: FakeNvmlLibrary = request.getfixturevalue("fake_nvml_library")
        env.update(library.env())
    args = case.args
    if case.web_config is not None:
        config = tmp_path / "web.yml"
        config.write_text(case.web_config)
        args = (*args, f"--web.config.file={config}")
    ca = write_pki(tmp_path) if case.tls else None
    running = exporter(*args, env=env)
    headers = WRONG_PASSWORD if case.web_config else {}
    status = https_status(running, ca, headers) if ca is not None else running.get("/metrics", headers).status
    assert status == (401 if case.web_config else 200)
    assert running.stop() == 0, running.log
    modules = loaded_modules(dumps, running)
    assert [name for name in case.loaded if name not in modules] == []
    assert sorted(name for name in OPTIONAL if name in modules and name not in case.loaded) == []


# What the decision to keep ssl out must not import: asyncio (it would import ssl), and OpenSSL's hashes and
# tempfile (3.7 and 0.9 MiB) that only a web config file with users or inline TLS keys needs.
BEFORE_THE_DECISION = ("asyncio", "ssl", "_ssl", "hashlib", "_hashlib", "tempfile")


def test_parsing_flags_and_a_web_config_imports_no_asyncio_ssl_or_hashlib(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(f"{USERS}http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    script = (
        "import sys\n"
        "from nvidia_gpu_exporter import cli, preflight\n"
        f"config = preflight.checked(preflight.parse(['--web.config.file={config}']).config)\n"
        "web = preflight.web_config(config)\n"
        "assert web is not None and not preflight.needs_ssl(config, web)\n"
        f"print(sorted(name for name in {BEFORE_THE_DECISION!r} if name in sys.modules))\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


RESTART_NEEDED = "turning TLS on or off applies after a restart"


def test_a_reload_that_adds_tls_says_it_needs_a_restart_and_keeps_ssl_out(
    exporter: StartExporter, tmp_path: Path
) -> None:
    env, dumps = hook_env(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(USERS)
    write_pki(tmp_path)
    running = exporter(*EXEC, f"--web.config.file={config}", env=env)
    config.write_text(f"tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n{USERS}")
    running.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while RESTART_NEEDED not in running.log and running.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert RESTART_NEEDED in running.log
    assert running.get("/metrics", WRONG_PASSWORD).status == 401  # still plain HTTP, still checking users
    assert running.stop() == 0, running.log
    assert {"ssl", "_ssl"} & loaded_modules(dumps, running) == set()


TLS = WebConfig(tls=TlsSettings(cert_file="cert.pem", key_file="key.pem"))


@pytest.mark.parametrize(
    ("config", "web", "needed"),
    [
        pytest.param(Config(), None, False, id="plain-needs-no-ssl"),
        pytest.param(Config(web_config_file="web.yml"), WebConfig(), False, id="web-config-without-tls-needs-none"),
        pytest.param(Config(web_config_file="web.yml"), TLS, True, id="tls-server-config-needs-ssl"),
        pytest.param(Config(fleet_targets_file="t.yml"), None, True, id="fleet-mode-may-need-ssl"),
        pytest.param(Config(kubernetes_pod_resources=True), None, True, id="pod-resources-grpc-may-need-ssl"),
        pytest.param(Config(kubernetes_process_pods=True), None, False, id="process-pods-read-cgroups-only"),
        pytest.param(
            Config(kubernetes_process_pods=True, kubernetes_pod_metadata=True),
            None,
            True,
            id="pod-metadata-lists-pods-over-https",
        ),
        pytest.param(Config(enable_pprof=True), None, False, id="pprof-needs-no-ssl"),
    ],
)
def test_needs_ssl(config: Config, web: WebConfig | None, needed: bool) -> None:
    assert needs_ssl(config, web) is needed


def test_importing_the_app_leaves_serving_modules_for_the_first_nvidia_smi_run() -> None:
    """``app.serve`` imports these on a thread while startup's first nvidia-smi run is under way (issue 31,
    item 2); one imported by ``app`` itself would put its CPU back in front of that run."""
    script = (
        "import sys\n"
        "from nvidia_gpu_exporter import app\n"
        "print(sorted(name for name in app.SERVING_MODULES if name in sys.modules))\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


# What a start leaves for after its first nvidia-smi run is under way (issue 31, item 2): the kernel log's parser
# and ledger (the XID source starts once exec's first run is spawned), and the DCGM profile's tables, which the
# default profile never needs (config.py reads their defaults from exposition/dcgm_defaults.py).
AFTER_THE_FIRST_RUN = (
    "nvidia_gpu_exporter.health.source",
    "nvidia_gpu_exporter.health.kernellog",
    "nvidia_gpu_exporter.health.ledger",
    "nvidia_gpu_exporter.health.reader",
    "nvidia_gpu_exporter.exposition.dcgm_events",
    "nvidia_gpu_exporter.exposition.dcgm_generations",
    "fractions",
)


def test_importing_the_command_and_the_app_leaves_the_kernel_log_and_dcgm_tables_for_later() -> None:
    script = (
        "import sys\n"
        "from nvidia_gpu_exporter import app, cli\n"
        f"print(sorted(name for name in {AFTER_THE_FIRST_RUN!r} if name in sys.modules))\n"
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


# A demo process from start to collections: its config read (through the strict YAML loader), its fleet stepped and its
# extras drawn (MIG, XIDs on a schedule), as a demo exporter does at every scrape. Nothing else imported: ``tempfile``,
# for one, loads ``random``.
DEMO_CONFIG = """\
gpus: 2
extras:
  scenarios: [random-xids]
  xids: {interval: 1s}
  mig: [{gpu: 0, instances: [{gi: 1, profile: 1g.18gb}]}]
"""
DEMO_RUN = """
import asyncio, sys
from nvidia_gpu_exporter.backends.demo.backend import DemoBackend
from nvidia_gpu_exporter.backends.fields import FieldRequest
from nvidia_gpu_exporter.capture import engine

now = [1000.0]
backend = asyncio.run(DemoBackend.start(FieldRequest("AUTO"), config_path=sys.argv[1], clock=lambda: now[0]))
for _ in range(4):
    asyncio.run(backend.collect())
    now[0] += 30.0
engine.generated_uuid(0)
print("\\n".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def demo_modules(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    config = tmp_path_factory.mktemp("demo") / "demo.yml"
    config.write_text(DEMO_CONFIG)
    completed = subprocess.run(
        [sys.executable, "-c", DEMO_RUN, str(config)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return set(completed.stdout.split())


@pytest.mark.parametrize(
    "module",
    [
        # The demo derives its uuids, pods and seeds by SHA-256: ``hashlib``'s would load ``_hashlib`` and map
        # libcrypto, 3.4 MiB of the demo's resident memory without a web config (issue 35).
        pytest.param("hashlib", id="hashlib"),
        pytest.param("_hashlib", id="openssl-libcrypto"),
        # Its draws come from backends/demo/prng.py: ``random`` brought _random, _bisect and _sha512 (issue 35).
        pytest.param("random", id="random"),
        pytest.param("_random", id="random-extension"),
        # The strict loader composes with PyYAML's pure-Python SafeLoader: libyaml's binding and Cython's runtime
        # went unused (issue 35).
        pytest.param("yaml._yaml", id="libyaml-binding"),
        # The simulated kubelet's pods serve only Kubernetes attribution, which is off unless asked for.
        pytest.param("nvidia_gpu_exporter.model.kubernetes", id="pods-without-attribution"),
        # The fake's ``nvidia-smi pmon`` renderer: the demo never runs pmon.
        pytest.param("nvidia_gpu_exporter.capture.pmon", id="pmon-renderer"),
    ],
)
def test_a_demo_run_leaves_out(demo_modules: set[str], module: str) -> None:
    assert "yaml" in demo_modules, "the run read no config: it proves nothing"
    assert module not in demo_modules

"""The HTTP dimension of the differential fuzz: requests a Prometheus, a load balancer, a browser or a scanner
sends, asked of the Go exporter and of ours, their answers compared by what a client acts on.

Compared: the status, the headers a client reads (``Content-Type``, ``Content-Encoding``, ``Location``, ``Allow``,
``X-Content-Type-Options``, ``Vary``, ``WWW-Authenticate``, ``Cache-Control``) and the body: the metrics route's
``nvidia_smi_*`` lines (:func:`exposition_reader.comparable`), or in a delimited protobuf answer the same families'
messages byte for byte (after gzip is undone), the landing page's title and link to the metrics path, every other
body byte for byte. Left out, each for its reason:

- ``Date``: the clock.
- ``Content-Length`` and ``Transfer-Encoding``: framing. Go chunks a body over 2 KiB and sends a streamed HEAD answer
  without a length; a client reads the same bytes either way.
- ``escaping=underscores`` at the end of Go's text ``Content-Type``: a deliberate difference
  (docs/compatibility.md, "Deliberate differences", `escaping=` only when asked); Prometheus reads the media type alone.
  A protobuf answer's ``Content-Type`` is compared whole.
- The protobuf text encodings (``encoding=text`` and ``compact-text``): never drawn, a deliberate difference
  (docs/compatibility.md); their spacing varies from Go build to Go build on purpose.
- The landing page beyond its title and link: ours adds the live view (a deliberate difference).
- A 500's body past its first line (``An error has occurred while serving metrics:``): Go names each duplicate
  series in protobuf's text format, whose spacing the protobuf library varies from build to build on purpose.
- The routes only ours has (``/-/xids``, ``/-/view.json``): additions, never drawn.
- A raw byte beyond ASCII in the request target (``GET /é``): refused by h11 with a 400, a deliberate difference
  (docs/compatibility.md, "Deliberate differences"), never drawn.
"""

from __future__ import annotations

import gzip
import http.client
import random
import re
from dataclasses import dataclass
from urllib.parse import unquote

import protobuf_reader
from exposition_reader import comparable
from nvidia_gpu_exporter.exposition.families import WALL_CLOCK_FAMILIES

COMPARED_HEADERS = (
    "content-type",
    "content-encoding",
    "location",
    "allow",
    "x-content-type-options",
    "vary",
    "www-authenticate",
    "cache-control",
)
_GO_DEFAULT_ESCAPING = "; escaping=underscores"
_PROTOBUF_TYPE = "application/vnd.google.protobuf"
_PROTOBUF = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
# Prometheus 3's scrape header with native histograms on: protobuf first
PROTOBUF_ACCEPT = (
    f"{_PROTOBUF};q=0.7,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
METHODS = ("GET", "GET", "GET", "HEAD", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
ACCEPTS = (
    None,
    "*/*",
    "text/plain",
    "text/plain;version=0.0.4",
    "application/json",
    "text/html",
    # Prometheus 2's and 3's scrape headers: OpenMetrics first, which neither exporter answers by default
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    # the same with native histograms on (or scrape_protocols: [PrometheusProto, ...]): protobuf first
    f"{_PROTOBUF};q=0.6,application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    PROTOBUF_ACCEPT,
    _PROTOBUF,
    f"{_PROTOBUF};escaping=allow-utf-8",
    f"text/plain;q=0.5,{_PROTOBUF};q=0.4",
    f"{_PROTOBUF.replace('delimited', 'bogus')},text/plain",
)
TELEMETRY_PATHS = ("/metrics", "/metrics", "/metrics", "/m", "/a/b/metrics", "/-/metrics", "/debug/pprofile", "/x_y")


@dataclass(frozen=True)
class Probe:
    """One request: what is sent, never how it is framed."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]


def telemetry_path(rng: random.Random) -> str:
    return rng.choice(TELEMETRY_PATHS)


def _path(rng: random.Random, telemetry: str) -> str:
    """A path a client may ask: the routes, their near misses, unclean and encoded forms of them."""
    candidates = (
        telemetry,
        telemetry,
        "/",
        "/-/healthy",
        "/-/ready",
        "/foo",
        "/favicon.ico",
        telemetry + "/",
        "/" + telemetry,
        "/x/.." + telemetry,
        "/." + telemetry,
        telemetry + "/.",
        telemetry + "?x=1&y",
        telemetry + "?",
        telemetry.upper(),
        "/metrics" if telemetry != "/metrics" else "/m",
        "/debug/pprof/",
        "/debug/pprof/cmdline",
        "/-/",
        "/-/healthy/",
        "//",
        "/%2e%2e" + telemetry,
        telemetry[:-1] + "%" + format(ord(telemetry[-1]), "02x"),
        "/index.html",
        "/health",
        # an escaped slash, one segment to Go's ServeMux: routed nowhere, or cleaned around
        "/-%2Fhealthy",
        "/" + telemetry[1:].replace("/", "%2F"),
        telemetry + "%2F",
        "//a%2Fb",
    )
    return rng.choice(candidates)


def draw_probes(rng: random.Random, telemetry: str, count: int) -> list[Probe]:
    probes = []
    for _ in range(count):
        headers: list[tuple[str, str]] = []
        accept = rng.choice(ACCEPTS)
        if accept is not None:
            headers.append(("Accept", accept))
        if rng.random() < 0.4:
            headers.append(("Accept-Encoding", rng.choice(("gzip", "gzip, deflate", "identity", "br", "*"))))
        probes.append(Probe(rng.choice(METHODS), _path(rng, telemetry), tuple(headers)))
    return probes


@dataclass(frozen=True)
class Answer:
    """What a client acts on in one answer (the status -1 and the error's type when the request failed)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: str


_TITLE = re.compile(r"<title>[^<]*</title>")
_LINKS = re.compile(r'href="(/[^"]*)"')


def protobuf_comparable(body: bytes) -> str:
    """The compared families' delimited messages, one a line in hex (the order kept)."""
    kept = []
    for message in protobuf_reader.delimited(body):
        name = protobuf_reader.family(message).name
        if name.startswith("nvidia_smi_") and name not in WALL_CLOCK_FAMILIES:
            kept.append(f"{name} {message.hex()}")
    return "\n".join(kept) + "\n"


def _body(probe: Probe, telemetry: str, status: int, content_type: str, body: bytes) -> str:
    text = body.decode("utf-8", "surrogateescape")
    if status == 500:
        return text.split("\n", 1)[0]
    metrics_get = unquote(probe.path.partition("?")[0]) == telemetry and status == 200 and probe.method == "GET"
    if metrics_get and content_type.startswith(_PROTOBUF_TYPE):
        return protobuf_comparable(body)
    if metrics_get:
        end = "\n# EOF\n"  # OpenMetrics' last line, which names no family
        return comparable(text.removesuffix(end)) + (end if text.endswith(end) else "")
    if content_type.startswith("text/html") and status == 200 and probe.method == "GET":
        title = _TITLE.search(text)
        return f"{title.group(0) if title else ''} links {telemetry in _LINKS.findall(text)}"
    return text


def ask(address: str, probe: Probe, telemetry: str) -> Answer:
    host, _, port = address.rpartition(":")
    connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=30)
    try:
        connection.request(probe.method, probe.path, headers=dict(probe.headers))
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as error:
        return Answer(-1, (), type(error).__name__)
    finally:
        connection.close()
    kept = []
    for name in COMPARED_HEADERS:
        for value in response.headers.get_all(name) or ():
            kept.append((name, value if value.startswith(_PROTOBUF_TYPE) else value.removesuffix(_GO_DEFAULT_ESCAPING)))
    if response.headers.get("content-encoding") == "gzip" and body:
        body = gzip.decompress(body)
    content_type = response.headers.get("content-type") or ""
    return Answer(response.status, tuple(kept), _body(probe, telemetry, response.status, content_type, body))


__all__ = ("PROTOBUF_ACCEPT", "Answer", "Probe", "ask", "draw_probes", "protobuf_comparable", "telemetry_path")

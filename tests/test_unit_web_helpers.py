"""HTTP helpers: the scrape-timeout budget (docs/compatibility.md, "Timeouts"), gzip, content negotiation and
listen addresses."""

from __future__ import annotations

import socket

import pytest

from nvidia_gpu_exporter.app import listen_sockets, web_settings
from nvidia_gpu_exporter.config import Config, Profile
from nvidia_gpu_exporter.httpserver.server import ListenError, _split_host_port, bind_socket
from nvidia_gpu_exporter.preflight import StartupError
from nvidia_gpu_exporter.web.metrics import accepts_gzip, scrape_budget
from nvidia_gpu_exporter.web.negotiation import negotiate

BUDGETS: list[tuple[str | None, float, float | None, str]] = [
    ("10", 0.5, 9.5, "10 with 500ms offset -> 9.5 s"),
    ("2.5", 0.5, 2.0, "2.5 -> 2 s"),
    ("3", 0.0, 3.0, "3 with offset 0 -> 3 s"),
    (None, 0.5, None, "missing header ignored"),
    ("", 0.5, None, "empty header ignored"),
    ("abc", 0.5, None, "unparsable ignored"),
    ("NaN", 0.5, None, "NaN ignored"),
    ("nan", 0.0, None, "lowercase nan ignored"),
    ("0", 0.0, None, "zero ignored"),
    ("-5", 0.0, None, "negative ignored"),
    ("86400", 0.0, 86400.0, "exactly one day accepted"),
    ("86400.5", 0.0, None, "more than one day ignored"),
    ("Inf", 0.0, None, "infinity ignored"),
    ("0.5", 0.5, None, "0.5 with 500ms offset -> no deadline"),
    ("0.4", 0.5, None, "offset larger than header -> no deadline"),
    ("1_0", 0.5, None, "Go ParseFloat rejects digit separators"),
    ("\uff11\uff10", 0.5, None, "Go ParseFloat rejects non-ASCII digits"),
]


@pytest.mark.parametrize(("header", "offset", "budget"), [b[:3] for b in BUDGETS], ids=[b[3] for b in BUDGETS])
def test_scrape_budget(header: str | None, offset: float, budget: float | None) -> None:
    assert scrape_budget(header, offset) == budget


GZIP: list[tuple[str | None, bool, str]] = [
    ("gzip", True, "gzip"),
    ("GZIP", False, "case-sensitive, as the Go client"),
    ("deflate, gzip;q=0.5", True, "gzip among others with quality"),
    ("gzip;q=0", False, "q=0 refuses gzip"),
    ("gzip; q=0.0", False, "q=0.0 refuses gzip"),
    ("identity", False, "identity only"),
    ("", False, "empty header"),
    (None, False, "no header"),
    ("br, deflate", False, "other encodings only"),
    ("x-gzip", False, "x-gzip is a different token"),
    (" gzip , br", True, "spaces around tokens"),
]


@pytest.mark.parametrize(("header", "expected"), [g[:2] for g in GZIP], ids=[f"Accept-Encoding: {g[2]}" for g in GZIP])
def test_accepts_gzip(header: str | None, expected: bool) -> None:
    assert accepts_gzip(header) is expected


ADDRESSES: list[tuple[str, tuple[str, int], str]] = [
    (":9835", ("", 9835), "empty host means every interface"),
    ("127.0.0.1:0", ("127.0.0.1", 0), "IPv4 and port 0"),
    ("[::1]:9835", ("::1", 9835), "bracketed IPv6"),
    ("localhost:65535", ("localhost", 65535), "highest port"),
]


@pytest.mark.parametrize(("address", "parts"), [a[:2] for a in ADDRESSES], ids=[a[2] for a in ADDRESSES])
def test_split_host_port(address: str, parts: tuple[str, int]) -> None:
    assert _split_host_port(address) == parts


BAD_ADDRESSES: list[tuple[str, str]] = [
    ("localhost", "missing port in address"),
    ("a:b:9835", "too many colons in address"),
    ("::1:9835", "too many colons in address"),
    ("host:65536", "65536"),
    ("host:no-such-service-name", "no-such-service-name"),
]


@pytest.mark.parametrize(
    ("address", "fragment"), BAD_ADDRESSES, ids=[f"listen address error: {a}" for a, _ in BAD_ADDRESSES]
)
def test_split_host_port_errors(address: str, fragment: str) -> None:
    with pytest.raises(ListenError) as caught:
        _split_host_port(address)
    assert fragment in str(caught.value)


def test_bind_socket_unknown_network() -> None:
    with pytest.raises(ListenError, match="unknown network"):
        bind_socket("127.0.0.1:0", "tcp5")


def test_bind_socket_loopback() -> None:
    sock = bind_socket("127.0.0.1:0", "tcp4")
    try:
        host, port = sock.getsockname()[:2]
        assert host == "127.0.0.1"
        assert port > 0
        assert sock.type == socket.SOCK_STREAM
    finally:
        sock.close()


def test_bind_socket_bad_address() -> None:
    with pytest.raises(ListenError):
        bind_socket("localhost", "tcp")


def _loopback_listener(family: socket.AddressFamily) -> socket.socket:
    """A listener on the loopback address of ``family`` (skips where this host has no IPv6)."""
    if family is socket.AF_INET:
        return socket.create_server(("127.0.0.1", 0))
    try:
        return socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")


@pytest.mark.parametrize(
    ("form", "network", "family"),
    [
        pytest.param(":{port}", "tcp", socket.AF_INET, id="every-interface"),
        pytest.param(":{port}", "tcp4", socket.AF_INET, id="every-ipv4-interface"),
        pytest.param("127.0.0.1:{port}", "tcp", socket.AF_INET, id="a-host"),
        pytest.param("[::1]:{port}", "tcp", socket.AF_INET6, id="an-ipv6-host"),
        pytest.param("[::1]:{port}", "tcp6", socket.AF_INET6, id="an-ipv6-host-on-tcp6"),
        pytest.param(":{port}", "tcp6", socket.AF_INET6, id="every-ipv6-interface"),
    ],
)
def test_a_port_in_use_is_said_as_go_says_it_for_every_address_form(
    form: str, network: str, family: socket.AddressFamily
) -> None:
    """One message shape (issue 30): the every-interface form once read as a Python tuple,
    ``error while attempting to bind on address ('::', 9835)``."""
    taken = _loopback_listener(family)  # loopback only; a listener there is in the way of :port too
    try:
        address = form.format(port=taken.getsockname()[1])
        with pytest.raises(ListenError) as caught:
            bind_socket(address, network).close()
        assert str(caught.value) == f"listen {network} {address}: bind: address already in use"
    finally:
        taken.close()


# -- content negotiation (docs/compatibility.md, "Content negotiation") ------------------------------------

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OM_1 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
OM_0 = "application/openmetrics-text; version=0.0.1; charset=utf-8"
PROMETHEUS_2 = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROTOBUF = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
NEGOTIATIONS: list[tuple[str | None, str, str]] = [
    (None, TEXT, "no Accept header: text 0.0.4"),
    ("", TEXT, "empty Accept header: text 0.0.4"),
    (PROMETHEUS_2, OM_1, "Prometheus 2 scrape header: OpenMetrics 1.0.0"),
    (PROMETHEUS_3, OM_1 + "; escaping=allow-utf-8", "Prometheus 3 scrape header: OpenMetrics 1.0.0, its escaping"),
    (f"{PROTOBUF};q=0.6,{PROMETHEUS_2}", OM_1, "protobuf where not served (the DCGM profiles): the next choice"),
    (PROTOBUF, TEXT, "protobuf only where not served: text 0.0.4, never 406"),
    ("application/openmetrics-text", OM_0, "OpenMetrics without a version is 0.0.1"),
    ("application/openmetrics-text;version=0.0.1", OM_0, "OpenMetrics 0.0.1"),
    ("application/openmetrics-text;version=2.0.0", TEXT, "an unknown OpenMetrics version is skipped"),
    ("text/plain", TEXT, "text without a version"),
    ("text/plain;version=0.0.4", TEXT, "text 0.0.4"),
    ("text/plain;version=1.0.0;escaping=allow-utf-8", TEXT + "; escaping=allow-utf-8", "text 1.0.0 falls back"),
    ("text/plain;q=0.9,application/openmetrics-text;version=1.0.0;q=0.8", TEXT, "the higher quality wins"),
    ("application/openmetrics-text;version=1.0.0;q=abc,text/plain;q=0.1", TEXT, "an unreadable quality is 0"),
    ("application/json", TEXT, "an unknown type: text 0.0.4, never 406"),
    ("*/*", TEXT, "anything: text 0.0.4"),
    ("text", TEXT, "a type without a subtype is skipped"),
    ("application/openmetrics-text;version=1.0.0;escaping=bogus", OM_1, "an unknown escaping is ignored"),
    (
        "application/openmetrics-text; version=1.0.0; escaping=underscores",
        OM_1 + "; escaping=underscores",
        "spaces around parameters",
    ),
    ("Application/OpenMetrics-Text;version=1.0.0", TEXT, "media types compare case-sensitively, as in Go"),
]


@pytest.mark.parametrize(("accept", "content_type"), [n[:2] for n in NEGOTIATIONS], ids=[n[2] for n in NEGOTIATIONS])
def test_negotiate_with_openmetrics_enabled(accept: str | None, content_type: str) -> None:
    negotiated = negotiate(accept, openmetrics=True)
    assert negotiated.content_type == content_type
    assert negotiated.openmetrics is content_type.startswith("application/openmetrics-text")


def _as_text(content_type: str) -> str:
    """What the Go exporter's handler (OpenMetrics off) answers where the table above answers OpenMetrics: text
    0.0.4 with the same ``escaping=``, seen from the v1.14.0 binary for Prometheus 3's header."""
    for openmetrics in (OM_1, OM_0):
        if content_type.startswith(openmetrics):
            return TEXT + content_type[len(openmetrics) :]
    return content_type


@pytest.mark.parametrize(("accept", "content_type"), [n[:2] for n in NEGOTIATIONS], ids=[n[2] for n in NEGOTIATIONS])
def test_negotiate_by_default_answers_text_as_the_go_exporter(accept: str | None, content_type: str) -> None:
    negotiated = negotiate(accept, openmetrics=False)
    assert negotiated.content_type == _as_text(content_type)
    assert negotiated.openmetrics is False


PB = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
PB_ASK = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily"
# What the Go exporter v1.14.0 answered (curl -H "Accept: ..." against the binary, 2026-12-04), but for its text
# answers' default "; escaping=underscores", which ours names only when asked (docs/compatibility.md).
PROTOBUF_NEGOTIATIONS: list[tuple[str, str, str]] = [
    (PROTOBUF, PB + "; escaping=underscores", "protobuf: Go's default escaping named"),
    (f"{PROTOBUF};q=0.6,{PROMETHEUS_2}", PB + "; escaping=underscores", "Prometheus 2 with native histograms"),
    (f"{PROTOBUF};q=0.6,{PROMETHEUS_3}", PB + "; escaping=underscores", "Prometheus 3 with native histograms"),
    (f"{PROTOBUF};escaping=allow-utf-8;q=0.6,{PROMETHEUS_3}", PB + "; escaping=allow-utf-8", "its own escaping"),
    (f"{PROTOBUF};escaping=values", PB + "; escaping=values", "a known escaping"),
    (f"{PROTOBUF};escaping=bogus", PB + "; escaping=underscores", "an unknown escaping is ignored"),
    (f"{PROTOBUF};q=0.1,text/plain;q=0.2", TEXT, "the higher quality wins"),
    (f"text/plain;q=0.2,{PROTOBUF};q=0.2", TEXT, "equal quality: the first listed"),
    (f"{PROTOBUF};q=0.2,text/plain;q=0.2", PB + "; escaping=underscores", "equal quality: the first listed, again"),
    (f"*/*;q=0.2,{PROTOBUF};q=0.2", PB + "; escaping=underscores", "a wildcard sorts after a type"),
    (f"{PROTOBUF};q=0", PB + "; escaping=underscores", "quality 0 is still a choice, as goautoneg reads it"),
    (f"{PROTOBUF};q=abc,text/plain;q=0.1", TEXT, "an unreadable quality is 0"),
    (f"{PROTOBUF};q=0.7,text/plain;version=0.0.4;escaping=dots;q=0.9", TEXT + "; escaping=dots", "text preferred"),
    (PB, PB + "; escaping=underscores", "spaces around parameters"),
    (PB_ASK, TEXT, "no encoding: passed over"),
    (f"{PB_ASK};encoding=Delimited", TEXT, "parameter values compare case-sensitively"),
    (f"{PB_ASK};encoding=bogus,{PROTOBUF};q=0.5", PB + "; escaping=underscores", "an unknown encoding is skipped"),
    ("application/vnd.google.protobuf;encoding=delimited", TEXT, "no proto parameter: passed over"),
    (PROTOBUF.replace("proto=io", 'proto="io') + '"', TEXT, "a quoted parameter is not unquoted"),
    ("Application/" + PROTOBUF.partition("/")[2], TEXT, "media types compare case-sensitively"),
]


@pytest.mark.parametrize(
    ("accept", "content_type"), [n[:2] for n in PROTOBUF_NEGOTIATIONS], ids=[n[2] for n in PROTOBUF_NEGOTIATIONS]
)
def test_negotiate_protobuf_as_the_go_exporter(accept: str, content_type: str) -> None:
    negotiated = negotiate(accept, openmetrics=False, protobuf=True)
    assert negotiated.content_type == content_type
    assert negotiated.protobuf is content_type.startswith(PB)
    assert negotiated.openmetrics is False


@pytest.mark.parametrize(("accept", "content_type"), [n[:2] for n in NEGOTIATIONS], ids=[n[2] for n in NEGOTIATIONS])
def test_negotiate_with_protobuf_served_keeps_every_other_answer(accept: str | None, content_type: str) -> None:
    """The tables above have protobuf in two rows only; with it served, those rows are protobuf and the rest stay."""
    negotiated = negotiate(accept, openmetrics=True, protobuf=True)
    if accept is not None and accept.startswith(PROTOBUF):
        assert negotiated.content_type == PB + "; escaping=underscores"
    else:
        assert negotiated.content_type == content_type


@pytest.mark.parametrize(
    ("profile", "protobuf"), [(Profile.NVIDIA_SMI, True), (Profile.DCGM, False), (Profile.BOTH, False)]
)
def test_protobuf_is_served_under_the_go_exporters_profile_only(profile: Profile, protobuf: bool) -> None:
    """dcgm-exporter's /metrics handler writes its text whatever Accept says (internal/pkg/server, no promhttp)."""
    assert web_settings(Config(metrics_profile=profile)).protobuf is protobuf


# (address, network, the Go binary's error once "failed to run: failed to listen on ADDRESS: " is taken off)
GO_LISTEN_ERRORS: list[tuple[str, str, str]] = [
    ("localhost", "tcp", "listen tcp: address localhost: missing port in address"),
    ("a:b:9835", "tcp", "listen tcp: address a:b:9835: too many colons in address"),
    ("127.0.0.1:99999", "tcp", "listen tcp: address 99999: invalid port"),
    ("127.0.0.1:notaport", "tcp", "listen tcp: lookup tcp/notaport: unknown port"),
    ("127.0.0.1:0", "tcp5", "listen tcp5: unknown network tcp5"),
    ("127.0.0.1:0", "udp", "listen udp 127.0.0.1:0: address 127.0.0.1:0: unexpected address type"),
]


@pytest.mark.parametrize(("address", "network", "message"), GO_LISTEN_ERRORS, ids=[e[2] for e in GO_LISTEN_ERRORS])
def test_a_listen_address_that_cannot_be_used_is_said_as_go_says_it(address: str, network: str, message: str) -> None:
    with pytest.raises(ListenError) as caught:
        bind_socket(address, network).close()
    assert str(caught.value) == message


def test_a_listen_failure_names_the_address_as_the_go_exporter_does() -> None:
    with pytest.raises(StartupError) as caught:
        listen_sockets(Config(listen_addresses=("127.0.0.1:0", "localhost")))
    assert str(caught.value) == (
        "failed to run: failed to listen on localhost: listen tcp: address localhost: missing port in address"
    )

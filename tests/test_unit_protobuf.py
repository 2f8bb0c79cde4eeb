"""The delimited protobuf exposition (docs/compatibility.md, "Content negotiation"): hand-computed bytes per rule,
a decode-back through the tests' own reader, and the Go exporter v1.14.0's bytes for a fixture.

The golden files in tests/fixtures/protobuf/ are the Go binary's answers on the two-GPU fixture, reduced to the
``nvidia_smi_*`` families minus the wall-clock ones; they were captured with (port and paths as on the capturing
machine; the .hex file holds each family's delimited message as one line of hex, the .txt file the text answer's
lines of the same families):

    FIXTURE=tests/fixtures/captures/fixture-linux-2gpu-mig.txt
    CMD="$PWD/.venv/bin/python -m nvidia_gpu_exporter.fakesmi --capture $PWD/$FIXTURE"
    /work/go-exporter/nvidia_gpu_exporter --web.listen-address=127.0.0.1:19837 --nvidia-smi-command "$CMD" &
    PB='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited'
    curl -s -o mig.pb -H "Accept: $PB" http://127.0.0.1:19837/metrics
    curl -s -o mig.txt http://127.0.0.1:19837/metrics
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

import protobuf_reader
from nvidia_gpu_exporter.exposition.protobuf import ProtobufError, to_protobuf, varint

GOLDEN = Path(__file__).parent / "fixtures" / "protobuf"
GO_MIG_TEXT = GOLDEN / "go-v1.14.0__fixture-linux-2gpu-mig.txt"
GO_MIG_PROTOBUF = GOLDEN / "go-v1.14.0__fixture-linux-2gpu-mig.hex"


def golden_protobuf() -> bytes:
    """The Go binary's delimited messages for the fixture's compared families, in its order."""
    return bytes.fromhex("".join(GO_MIG_PROTOBUF.read_text(encoding="ascii").split()))


VARINTS: list[tuple[int, str]] = [
    (0, "00"),
    (1, "01"),
    (127, "7f"),
    (128, "8001"),
    (300, "ac02"),
    (2**32, "8080808010"),
    (2**64 - 1, "ffffffffffffffffff01"),
    (-1, "ffffffffffffffffff01"),  # an int64 below 0 is its 64-bit two's complement: ten bytes
]


@pytest.mark.parametrize(("value", "encoded"), VARINTS, ids=[str(v) for v, _ in VARINTS])
def test_varints_are_protobufs(value: int, encoded: str) -> None:
    assert varint(value).hex() == encoded


def _double(value: float) -> str:
    return struct.pack("<d", value).hex()


# (text, the delimited bytes as hex, what it shows), computed by hand from the wire format
ENCODINGS: list[tuple[str, str, str]] = [
    (
        "# HELP a h\n# TYPE a gauge\na 1\n",
        "15" + "0a0161" + "120168" + "1801" + "220b" + "1209" + "09" + _double(1.0),
        "a gauge: name, help, type 1, one Metric with a Gauge",
    ),
    (
        "# HELP c_total h\n# TYPE c_total counter\nc_total 0\n",
        "1b" + "0a07635f746f74616c" + "120168" + "1800" + "220b" + "1a09" + "09" + _double(0.0),
        "a counter: type 0 written (proto2 keeps presence), the value in Metric field 3, zero written",
    ),
    (
        "# HELP u h\n# TYPE u untyped\nu -2.5\n",
        "15" + "0a0175" + "120168" + "1803" + "220b" + "2a09" + "09" + _double(-2.5),
        "untyped: the value in Metric field 5",
    ),
    (
        '# HELP a \n# TYPE a gauge\na{k="",l="v"} 2\n',
        "23"
        + "0a0161"
        + "1200"
        + "1801"
        + "221a"
        + ("0a05" + "0a016b" + "1200")
        + ("0a06" + "0a016c" + "120176")
        + ("1209" + "09" + _double(2.0)),
        "an empty help and an empty label value are written, labels before the value",
    ),
    (
        "# TYPE a gauge\na 3 1700000000000\n",
        "19" + "0a0161" + "1801" + "2212" + "1209" + "09" + _double(3.0) + "30" + varint(1700000000000).hex(),
        "no HELP line: no help field; a timestamp is Metric field 6",
    ),
]


@pytest.mark.parametrize(("text", "encoded", "rule"), ENCODINGS, ids=[e[2] for e in ENCODINGS])
def test_text_becomes_the_bytes_go_writes(text: str, encoded: str, rule: str) -> None:
    assert to_protobuf(text.encode()).hex() == encoded, rule


# (label value or help as rendered in the text, the string protobuf carries)
UNESCAPES: list[tuple[str, str]] = [
    (r"plain", "plain"),
    (r"a\\b", "a\\b"),
    (r"a\"b", 'a"b'),
    (r"line\nbreak", "line\nbreak"),
    (r"\\n", "\\n"),
    (r"ünï ☃ {x=\"\"}", 'ünï ☃ {x=""}'),
]


@pytest.mark.parametrize(("rendered", "value"), UNESCAPES, ids=[u[0] for u in UNESCAPES])
def test_label_values_and_help_unescape_to_what_was_rendered(rendered: str, value: str) -> None:
    help_text = rendered.replace(r"\"", '"')  # a HELP line escapes only \ and newline
    text = f'# HELP a {help_text}\n# TYPE a gauge\na{{k="{rendered}"}} 1\n'
    (family,) = protobuf_reader.families(to_protobuf(text.encode()))
    assert family.help == value
    assert family.samples[0].labels == (("k", value),)


VALUES: list[tuple[str, float]] = [
    ("0", 0.0),
    ("-0", -0.0),
    ("1e+06", 1e6),
    ("2.1e+08", 2.1e8),
    ("0.1", 0.1),
    ("1.7976931348623157e+308", 1.7976931348623157e308),
    ("5e-324", 5e-324),
    ("+Inf", math.inf),
    ("-Inf", -math.inf),
]


@pytest.mark.parametrize(("rendered", "value"), VALUES, ids=[v[0] for v in VALUES])
def test_values_keep_every_bit(rendered: str, value: float) -> None:
    encoded = to_protobuf(f"# TYPE a gauge\na {rendered}\n".encode())
    assert encoded.endswith(struct.pack("<d", value))


def test_nan_is_gos_nan() -> None:
    """Go's ``math.NaN()`` (and ``strconv.ParseFloat("NaN")``) has the low bit set, Python's ``float("nan")`` not."""
    encoded = to_protobuf(b"# TYPE a gauge\na NaN\n")
    assert encoded.endswith(struct.pack("<Q", 0x7FF8000000000001))


def test_a_help_byte_that_is_not_utf8_passes_as_it_is() -> None:
    """As the text writes it (and proto2 does not validate strings), so no driver output can fail a scrape."""
    encoded = to_protobuf(b"# HELP a bad \xff byte\n# TYPE a gauge\na 1\n")
    (message,) = protobuf_reader.delimited(encoded)
    assert dict(protobuf_reader.fields(message))[2] == b"bad \xff byte"


def test_families_and_samples_keep_the_texts_order() -> None:
    text = (
        '# HELP b h\n# TYPE b gauge\nb{x="2"} 2\nb{x="1"} 1\n'
        "# HELP a_total h\n# TYPE a_total counter\na_total 5\n"
        "# HELP c h\n# TYPE c gauge\nc 0\n"
    )
    families = protobuf_reader.families(to_protobuf(text.encode()))
    assert [(family.name, family.type) for family in families] == [("b", 1), ("a_total", 0), ("c", 1)]
    assert [sample.labels for sample in families[0].samples] == [(("x", "2"),), (("x", "1"),)]
    assert [sample.kind for family in families for sample in family.samples] == [2, 2, 3, 2]


def test_a_family_without_header_lines_is_untyped() -> None:
    (family,) = protobuf_reader.families(to_protobuf(b"x 1\n"))
    assert (family.name, family.help, family.type, family.samples[0].kind) == ("x", "", 3, 5)


def test_no_text_is_no_bytes() -> None:
    assert to_protobuf(b"") == b""


BAD_TEXT: list[bytes] = [b"# TYPE a gauge\na\n", b'# TYPE a gauge\na{k="v} 1\n', b"# TYPE a gauge\na one\n"]


@pytest.mark.parametrize("text", BAD_TEXT, ids=[t.decode() for t in BAD_TEXT])
def test_text_the_exposition_never_writes_is_an_error(text: bytes) -> None:
    with pytest.raises(ProtobufError):
        to_protobuf(text)


def test_the_go_exporters_text_becomes_its_protobuf_byte_for_byte() -> None:
    """The Go binary's own text answer, rewritten, is its protobuf answer: every family, label, value, help."""
    assert to_protobuf(GO_MIG_TEXT.read_bytes()) == golden_protobuf()


def test_the_golden_bytes_decode_to_the_golden_text() -> None:
    """The test-side reader agrees with the golden files (so a failure above is the encoder's, not the reader's)."""
    families = protobuf_reader.families(golden_protobuf())
    text = GO_MIG_TEXT.read_text(encoding="utf-8")
    assert [family.name for family in families] == [
        line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")
    ]
    assert sum(len(family.samples) for family in families) == sum(
        1 for line in text.splitlines() if not line.startswith("#")
    )

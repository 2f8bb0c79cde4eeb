"""Text format rendering (docs/compatibility.md, "Exposition format") and the cached gzip body assembly."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter.exposition.text import (
    CONTENT_TYPE,
    DuplicateSeriesError,
    Family,
    escape_help,
    escape_label_value,
    header,
    label_block,
    render_blocks,
    render_family,
)
from nvidia_gpu_exporter.web.payload import COMBINE_FROM_BYTES, DeflatedBlock, PartDeflater, deflate_block


def test_content_type() -> None:
    """The content type is text/plain; version=0.0.4; charset=utf-8."""
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_empty_family_omitted() -> None:
    """A family with no samples is omitted entirely (no HELP/TYPE)."""
    assert render_family(Family("x", "help", "gauge", ("a",))) == ""


def test_family_without_labels() -> None:
    family = Family("nvidia_smi_failed_scrapes_total", "Number of failed collections", "counter")
    family.add((), 3.0)
    assert render_family(family) == (
        "# HELP nvidia_smi_failed_scrapes_total Number of failed collections\n"
        "# TYPE nvidia_smi_failed_scrapes_total counter\n"
        "nvidia_smi_failed_scrapes_total 3\n"
    )


def test_labels_sorted_by_name_samples_by_values_in_label_name_order() -> None:
    """Labels sorted by name; samples sorted by label values compared in label-name order."""
    family = Family("f", "h", "gauge", ("uuid", "pid"))
    family.add(("b", "1"), 1.0)
    family.add(("a", "2"), 2.0)
    family.add(("a", "1"), 3.0)
    assert render_family(family) == (
        '# HELP f h\n# TYPE f gauge\nf{pid="1",uuid="a"} 3\nf{pid="1",uuid="b"} 1\nf{pid="2",uuid="a"} 2\n'
    )


@pytest.mark.parametrize(
    ("values", "ordered"),
    [
        (["2056", "12332"], ["12332", "2056"]),
        (["a", "B"], ["B", "a"]),
        (["é", "z"], ["z", "é"]),
        (["ab", "a"], ["a", "ab"]),
        (["", "0"], ["", "0"]),
    ],
    ids=[
        "pid 12332 before 2056 (string order)",
        "byte order: uppercase before lowercase",
        "byte order: ASCII before non-ASCII",
        "prefix sorts first",
        "empty value sorts first",
    ],
)
def test_sample_value_order_is_bytewise(values: list[str], ordered: list[str]) -> None:
    family = Family("f", "h", "gauge", ("v",))
    for value in values:
        family.add((value,), 1.0)
    text = render_family(family)
    assert [line.split('"')[1] for line in text.splitlines()[2:]] == ordered


def test_duplicate_series_detected() -> None:
    """Same name + label values -> error, never a doubled series."""
    family = Family("f", "h", "gauge", ("a", "b"))
    family.add(("1", "2"), 1.0)
    family.add(("3", "4"), 1.0)
    family.add(("1", "2"), 5.0)
    with pytest.raises(DuplicateSeriesError, match=r'f\{a="1",b="2"\}'):
        render_family(family)


def test_duplicate_unlabelled_series_detected() -> None:
    family = Family("f", "h", "gauge")
    family.add((), 1.0)
    family.add((), 1.0)
    with pytest.raises(DuplicateSeriesError):
        render_family(family)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("C:\\Windows", "C:\\\\Windows"), ('a"b', 'a\\"b'), ("a\nb", "a\\nb"), ("\t\r", "\t\r"), ("\\n", "\\\\n")],
    ids=[
        "label backslash",
        "label double quote",
        "label newline",
        "other controls raw",
        "literal backslash-n",
    ],
)
def test_escape_label_value(raw: str, escaped: str) -> None:
    assert escape_label_value(raw) == escaped


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("fan.speed [%]", "fan.speed [%]"), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ('a"b', 'a"b')],
    ids=["HELP verbatim", "HELP backslash", "HELP newline", "HELP keeps double quotes"],
)
def test_escape_help(raw: str, escaped: str) -> None:
    assert escape_help(raw) == escaped


def test_header_and_label_block() -> None:
    assert header("m", "fan.speed [%]", "gauge") == "# HELP m fan.speed [%]\n# TYPE m gauge\n"
    assert label_block([]) == ""
    assert label_block([("a", 'x"'), ("b", "y")]) == '{a="x\\"",b="y"}'


def test_render_blocks_sorted_by_family_name() -> None:
    """Families sorted by full name (byte order) across all collectors."""
    blocks = [("nvidia_smi_compute_cap", "C"), ("nvidia_smi_compute_app_info", "A"), ("nvidia_smi_compute_apps", "B")]
    assert render_blocks(blocks) == "ABC"


def test_values_use_go_float_format() -> None:
    family = Family("f", "h", "gauge", ("a",))
    family.add(("x",), 8589934592.0)
    family.add(("y",), float("nan"))
    family.add(("z",), -0.0)
    assert render_family(family).splitlines()[2:] == [
        'f{a="x"} 8.589934592e+09',
        'f{a="y"} NaN',
        'f{a="z"} 0',
    ]


# -- gzip assembly (docs/architecture.md, "Gzip on demand") -------------------------------------------------------

PARTS = [
    (b"", b"", b""),
    (b"", b"block\n", b""),
    (b"prefix\n", b"", b""),
    (b"", b"", b"suffix\n"),
    (b"prefix\n", b"block\n", b"suffix\n"),
    (b"p" * 70000, b"b" * 100000, b"s" * 70000),
]


def one_member(body: bytes) -> bytes:
    """The data of ``body``, which must be exactly one gzip member (zlib and curl read only a first member)."""
    reader = zlib.decompressobj(wbits=31)
    data = reader.decompress(body)
    assert reader.eof
    assert reader.unused_data == b""
    assert gzip.decompress(body) == data
    return data


def gzip_body(deflater: PartDeflater, prefix: bytes, block: bytes, suffix: bytes) -> bytes:
    return b"".join(deflater.gzip_parts([("prefix", prefix)], deflate_block(block), [("suffix", suffix)]))


@pytest.mark.parametrize(("prefix", "block", "suffix"), PARTS, ids=[f"parts{i}" for i in range(len(PARTS))])
def test_gzip_parts_are_one_member_of_the_whole(prefix: bytes, block: bytes, suffix: bytes) -> None:
    assert one_member(gzip_body(PartDeflater(), prefix, block, suffix)) == prefix + block + suffix


def test_a_block_is_reused_for_several_bodies() -> None:
    deflater = PartDeflater()
    cached = deflate_block(b"# HELP x y\n# TYPE x gauge\nx 1\n")
    for prefix, suffix in [(b"a\n", b"b\n"), (b"", b"zz\n"), (b"q\n", b""), (b"a\n", b"b\n")]:
        body = b"".join(deflater.gzip_parts([("prefix", prefix)], cached, [("suffix", suffix)]))
        assert one_member(body) == prefix + b"# HELP x y\n# TYPE x gauge\nx 1\n" + suffix


def test_a_part_unchanged_is_not_deflated_again() -> None:
    deflater = PartDeflater()
    first = deflater.deflate("part", b"process_open_fds 7\n")
    assert deflater.deflate("part", b"process_open_fds 7\n") is first
    assert deflater.deflate("other", b"process_open_fds 7\n") is not first


def test_a_part_never_refers_to_what_the_stream_deflated_before() -> None:
    """The route's one stream deflates the same text over and over; each piece must stand alone in a body that
    holds none of the earlier ones (a piece that referred back would decompress to other bytes)."""
    deflater = PartDeflater()
    text = b'promhttp_metric_handler_requests_total{code="200"} 1\n' * 3
    for count in range(5):
        suffix = text + str(count).encode()
        assert one_member(gzip_body(deflater, text, b"", suffix)) == text + suffix


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=4000), st.binary(max_size=2000))
def test_gzip_parts_property(prefix: bytes, block: bytes, suffix: bytes) -> None:
    assert one_member(gzip_body(PartDeflater(), prefix, block, suffix)) == prefix + block + suffix


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=300),
    st.binary(max_size=5000),
    st.sampled_from([0, 1000, COMBINE_FROM_BYTES - 1, COMBINE_FROM_BYTES, 3 * COMBINE_FROM_BYTES + 7]),
)
def test_the_crc_after_a_block_is_the_crc_of_the_concatenation(before: bytes, block: bytes, zeros: int) -> None:
    """Continued over a small block, combined with a large one as zlib's crc32_combine does (``zeros`` puts the
    block on either side of the line), and the same when asked again."""
    text = block + bytes(zeros)
    cached = DeflatedBlock(text, b"")
    assert cached.crc_after(zlib.crc32(before)) == zlib.crc32(before + text)
    assert cached.crc_after(zlib.crc32(before)) == zlib.crc32(before + text)
    assert cached.crc_after(0) == zlib.crc32(text)

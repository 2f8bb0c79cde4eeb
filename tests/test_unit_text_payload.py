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
from nvidia_gpu_exporter.web.payload import assemble, assemble_gzip, make_block


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


# -- gzip assembly ----------------------------------------------------------------------------------------------

PARTS = [
    (b"", b"", b""),
    (b"", b"block\n", b""),
    (b"prefix\n", b"", b""),
    (b"", b"", b"suffix\n"),
    (b"prefix\n", b"block\n", b"suffix\n"),
    (b"p" * 70000, b"b" * 100000, b"s" * 70000),
]


@pytest.mark.parametrize(("prefix", "block", "suffix"), PARTS, ids=[f"parts{i}" for i in range(len(PARTS))])
def test_assemble_gzip_parts(prefix: bytes, block: bytes, suffix: bytes) -> None:
    cached = make_block(block)
    body = assemble_gzip(prefix, cached, suffix)
    assert gzip.decompress(body) == prefix + block + suffix
    assert zlib.decompress(body, wbits=31) == prefix + block + suffix
    assert assemble(prefix, cached, suffix) == prefix + block + suffix


def test_block_reused_for_several_bodies() -> None:
    cached = make_block(b"# HELP x y\n# TYPE x gauge\nx 1\n")
    for prefix, suffix in [(b"a\n", b"b\n"), (b"", b"zz\n"), (b"q\n", b"")]:
        assert gzip.decompress(assemble_gzip(prefix, cached, suffix)) == prefix + cached.text + suffix


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=4000), st.binary(max_size=2000))
def test_assemble_gzip_property(prefix: bytes, block: bytes, suffix: bytes) -> None:
    body = assemble_gzip(prefix, make_block(block), suffix)
    assert gzip.decompress(body) == prefix + block + suffix
    assert zlib.decompress(body, wbits=31) == prefix + block + suffix

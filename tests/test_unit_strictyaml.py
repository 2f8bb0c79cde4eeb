"""The strict YAML loader shared by the web config, the demo config and the fake nvidia-smi's config."""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter.support.strictyaml import (
    MAX_DEPTH,
    MAX_NODES,
    StrictYamlError,
    YamlMapping,
    YamlNode,
    YamlScalar,
    child_path,
    load_yaml,
)


def root(text: str) -> YamlNode:
    node = load_yaml(text)
    assert node is not None
    return node


def value(text: str) -> YamlNode:
    """The node of ``v`` in the document ``v: <text>``, null or not."""
    ((_, node),) = root(f"v: {text}\n").pairs()
    return node


def error_of(text: str) -> str:
    with pytest.raises(StrictYamlError) as raised:
        load_yaml(text)
    return str(raised.value)


@pytest.mark.parametrize(
    ("parent", "key", "expected"),
    [
        pytest.param("", "tls_server_config", "tls_server_config", id="root-key-has-no-dot"),
        pytest.param("extras.pcie", "tx-bytes-per-second", "extras.pcie.tx-bytes-per-second", id="word-key-dotted"),
        pytest.param("overrides", "temperature.gpu", 'overrides["temperature.gpu"]', id="dotted-key-quoted"),
        pytest.param("", "a b", '["a b"]', id="root-key-with-space-quoted"),
        pytest.param("users", "", 'users[""]', id="empty-key-quoted"),
        pytest.param("users", 'say "hi"', 'users["say \\"hi\\""]', id="quotes-escaped-as-go-does"),
    ],
)
def test_child_paths(parent: str, key: str, expected: str) -> None:
    assert child_path(parent, key) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: 1\na: 2", 'line 2: top level: duplicate key "a" (first at line 1)', id="duplicate-top-key"),
        pytest.param(
            "a:\n  - b: 1\n    c: 2\n    b: 3",
            'line 4: a[0]: duplicate key "b" (first at line 2)',
            id="duplicate-key-in-a-list-item",
        ),
        pytest.param(
            "a: {b: {c: 1, c: 2}}", 'line 1: a.b: duplicate key "c" (first at line 1)', id="duplicate-in-flow"
        ),
        pytest.param("1: x\n'1': y", 'line 2: top level: duplicate key "1" (first at line 1)', id="same-text-same-key"),
        pytest.param("a: &m {b: 1, b: 2}\nc: *m", 'line 1: a: duplicate key "b"', id="duplicate-in-an-anchor"),
        pytest.param("[a]: 1", "line 1: top level: keys must be scalars, got a list", id="list-key"),
        pytest.param("? {a: 1}\n: 1", "line 1: top level: keys must be scalars, got a mapping", id="mapping-key"),
        pytest.param("a: !!binary aGk=", 'line 1: a: unsupported tag "tag:yaml.org,2002:binary"', id="binary"),
        pytest.param("a: !!set {b}", 'line 1: a: unsupported tag "tag:yaml.org,2002:set"', id="set"),
        pytest.param("a: !!omap [b: 1]", 'line 1: a: unsupported tag "tag:yaml.org,2002:omap"', id="omap"),
        pytest.param(
            "a: !!python/name:os.system x",
            'line 1: a: unsupported tag "tag:yaml.org,2002:python/name:os.system"',
            id="python-object",
        ),
        pytest.param("a: [!local 1]", 'line 1: a[0]: unsupported tag "!local"', id="local-tag"),
        pytest.param("!!binary aGk=: 1", 'line 1: top level: unsupported tag "tag:yaml.org,2002:binary"', id="key-tag"),
        pytest.param("a: !!map [1]", 'line 1: a: unsupported tag "tag:yaml.org,2002:map"', id="map-tag-on-a-list"),
        pytest.param("a: !!int abc", 'line 1: a: "abc" is not a valid !!int', id="bad-explicit-int"),
        pytest.param("a: !!int ''", 'line 1: a: "" is not a valid !!int', id="empty-explicit-int"),
        pytest.param("a: !!float x", 'line 1: a: "x" is not a valid !!float', id="bad-explicit-float"),
        pytest.param("a: !!bool maybe", 'line 1: a: "maybe" is not a valid !!bool', id="bad-explicit-bool"),
        pytest.param(
            "a: {<<: 1}", 'line 1: a: a merge (<<) takes a mapping or a list of mappings, got "1"', id="merge-scalar"
        ),
        pytest.param(
            "b: &b {x: 1}\na: {<<: *b, <<: *b}", 'line 2: a: duplicate key "<<" (first at line 2)', id="two-merges"
        ),
        pytest.param("a: &a {<<: *a}", f"line 1: a: nested deeper than {MAX_DEPTH} levels", id="merge-cycle"),
        pytest.param("a: &a [*a]", f"nested deeper than {MAX_DEPTH} levels", id="recursive-alias"),
        pytest.param("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested deeper than", id="deep-nesting"),
        pytest.param("a: " + "[" * 5000 + "]" * 5000, "invalid YAML: nested too deeply", id="deeper-than-pyyaml"),
        pytest.param(
            "a: &a ["
            + ", ".join(["1"] * 100)
            + "]\n"
            + "".join(
                f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, n in zip("abcdef", "bcdefg", strict=True)
            ),
            f"the document has more than {MAX_NODES} values (every use of an alias counts)",
            id="alias-expansion",
        ),
    ],
)
def test_document_errors_name_the_line_and_key_path(text: str, message: str) -> None:
    assert message in error_of(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "a: 1\nb: [1\nc: 2\n",
            "line 3, column 2: invalid YAML: expected ',' or ']', but got ':' "
            "(while parsing a flow sequence at line 2, column 4)",
            id="unclosed-list",
        ),
        pytest.param(
            "a: 1\n---\nb: 2",
            "line 2, column 1: invalid YAML: but found another document "
            "(expected a single document in the stream at line 1, column 1)",
            id="two-documents",
        ),
        pytest.param(
            "a: 1\n b: 2\n", "line 2, column 3: invalid YAML: mapping values are not allowed here", id="indent"
        ),
        pytest.param(
            "a: 1\nb: \x00",
            "line 2, column 4: invalid YAML: unacceptable character #x0000: special characters are not allowed",
            id="control-character",
        ),
    ],
)
def test_syntax_errors_are_one_line_with_the_line_and_column(text: str, message: str) -> None:
    """Not PyYAML's several lines naming ``"<unicode string>"``: the loaders put their file's name first."""
    assert error_of(text) == message


@pytest.mark.parametrize(
    ("text", "written"),
    [
        pytest.param("88.50", "88.50", id="decimal-places-kept"),
        pytest.param("0x1F", "0x1F", id="hex-kept"),
        pytest.param("yes", "yes", id="yaml11-bool-word-kept"),
        pytest.param("'007'", "007", id="single-quoted"),
        pytest.param('"a\\tb"', "a\tb", id="double-quoted-escapes-applied"),
        pytest.param("2024-01-02", "2024-01-02", id="date-kept"),
        pytest.param("|\n  one\n  two", "one\ntwo\n", id="block-scalar"),
        pytest.param("Fake RTX 3090", "Fake RTX 3090", id="spaces"),
    ],
)
def test_text_is_read_as_written(text: str, written: str) -> None:
    assert value(text).text() == written


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("42", 42, id="decimal"),
        pytest.param("+7", 7, id="plus-sign"),
        pytest.param("0x2a", 42, id="hex"),
        pytest.param("1_000", 1000, id="yaml11-underscores"),
        pytest.param("!!int '12'", 12, id="explicit-tag"),
        pytest.param("-9223372036854775808", -(1 << 63), id="int64-min"),
    ],
)
def test_integers(text: str, expected: int) -> None:
    assert value(text).integer() == expected


@pytest.mark.parametrize(
    ("text", "low", "message"),
    [
        pytest.param("'42'", 0, 'line 1: v: must be an integer, got "42"', id="quoted"),
        pytest.param("4.0", 0, 'line 1: v: must be an integer, got "4.0"', id="float"),
        pytest.param("true", 0, 'line 1: v: must be an integer, got "true"', id="bool"),
        pytest.param("~", 0, "line 1: v: must be an integer, got null", id="null"),
        pytest.param("[1]", 0, "line 1: v: must be an integer, got a list", id="list"),
        pytest.param(
            "9223372036854775808", 0, "line 1: v: integer 9223372036854775808 is out of the int64 range", id="int64"
        ),
        pytest.param("-1", 0, "line 1: v: must be at least 0, got -1", id="below-low"),
    ],
)
def test_integer_errors(text: str, low: int, message: str) -> None:
    with pytest.raises(StrictYamlError, match=f"^{re.escape(message)}$"):
        value(text).integer(low=low)


def test_integer_above_high() -> None:
    with pytest.raises(StrictYamlError, match=r"^line 1: v: must be at most 9, got 10$"):
        value("10").integer(high=9)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("1.5", 1.5, id="yaml-float"),
        pytest.param("7", 7.0, id="yaml-int"),
        pytest.param("1e6", 1e6, id="exponent-without-dot-as-go-reads-it"),
        pytest.param("1.5e3", 1500.0, id="exponent-without-sign"),
        pytest.param("0x1p-2", 0.25, id="go-hex-float"),
        pytest.param(".inf", math.inf, id="yaml-infinity"),
        pytest.param("-Infinity", -math.inf, id="go-infinity"),
        pytest.param("1" + "0" * 400, math.inf, id="integer-beyond-float-range"),
    ],
)
def test_numbers(text: str, expected: float) -> None:
    assert value(text).number() == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("'1.5'", 'must be a number, got "1.5"', id="quoted"),
        pytest.param("+nan", 'must be a number, got "+nan"', id="signed-nan-is-not-go"),
        pytest.param("1_0e3", 'must be a number, got "1_0e3"', id="go-has-no-underscores"),
        pytest.param("true", 'must be a number, got "true"', id="bool"),
        pytest.param("{a: 1}", "must be a number, got a mapping", id="mapping"),
    ],
)
def test_number_errors(text: str, message: str) -> None:
    with pytest.raises(StrictYamlError, match=f"^line 1: v: {re.escape(message)}$"):
        value(text).number()


def test_long_values_are_shown_short() -> None:
    with pytest.raises(StrictYamlError) as raised:
        value("x" * 1000).integer()
    assert str(raised.value) == 'line 1: v: must be an integer, got "' + "x" * 77 + '..."'


def test_nan_is_a_number() -> None:
    assert math.isnan(value("nan").number())


@pytest.mark.parametrize(
    ("text", "expected"),
    [pytest.param("true", True, id="true"), pytest.param("off", False, id="yaml11-word")],
)
def test_booleans(text: str, expected: bool) -> None:
    assert value(text).boolean() is expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("1", 'must be true or false, got "1"', id="number"),
        pytest.param("'true'", 'must be true or false, got "true"', id="quoted"),
    ],
)
def test_boolean_errors(text: str, message: str) -> None:
    with pytest.raises(StrictYamlError, match=f"^line 1: v: {re.escape(message)}$"):
        value(text).boolean()


@pytest.mark.parametrize(
    ("text", "reader", "message"),
    [
        pytest.param("[a]", "text", "line 1: v: must be a string, got a list", id="text-of-list"),
        pytest.param("~", "text", "line 1: v: must be a string, got null", id="text-of-null"),
        pytest.param("a", "items", 'line 1: v: must be a list, got "a"', id="items-of-scalar"),
        pytest.param("[a]", "pairs", "line 1: v: must be a mapping, got a list", id="pairs-of-list"),
    ],
)
def test_reader_type_errors(text: str, reader: str, message: str) -> None:
    with pytest.raises(StrictYamlError, match=f"^{re.escape(message)}$"):
        getattr(value(text), reader)()


def test_mapping_rejects_unknown_keys_at_their_line() -> None:
    with pytest.raises(StrictYamlError, match=r'^line 3: v: unknown key "colour", want one of size, shape$'):
        root("v:\n  size: 1\n  colour: red\n").mapping(("v",))["v"].mapping(("size", "shape"))


def test_mapping_names_what_it_expected() -> None:
    with pytest.raises(StrictYamlError, match=r"^line 1: top level: must be a mapping of settings, got a list$"):
        root("[1]").mapping(("a",), "a mapping of settings")


def test_null_values_mean_unset_and_required_names_the_missing_key() -> None:
    entries = root("a: ~\nb: 1\nc:\n").mapping(("a", "b", "c"))
    assert list(entries) == ["b"]
    assert entries.required("b").integer() == 1
    with pytest.raises(StrictYamlError, match=r"^line 1: a: required$"):
        entries.required("a")


def test_pairs_keep_null_values_and_key_lines() -> None:
    ((key, node),) = root("users:\n  alice:\n").mapping(("users",))["users"].pairs()
    assert (key.written, key.line, key.path, node.is_null, node.path, node.line) == (
        "alice",
        2,
        "users",
        True,
        "users.alice",
        2,
    )


def test_merges_fill_in_keys_explicit_ones_and_earlier_merges_win() -> None:
    text = "one: &one {a: 1, b: 1}\ntwo: &two {b: 2, c: 2}\nboth:\n  <<: [*one, *two]\n  a: 3\n"
    both = root(text).mapping(("one", "two", "both"))["both"]
    values = {key.written: (node.integer(), node.path) for key, node in both.pairs()}
    assert values == {"a": (3, "both.a"), "b": (1, "both.b"), "c": (2, "both.c")}


def test_aliases_get_the_path_of_each_use() -> None:
    entries = root("a: &x {n: 1}\nb: *x\n").mapping(("a", "b"))
    assert [entries[name].mapping(("n",))["n"].path for name in ("a", "b")] == ["a.n", "b.n"]


def test_nodes_compare_by_content_and_place() -> None:
    assert load_yaml("a: [1, {b: x}]") == load_yaml("a: [1, {b: x}]")
    assert load_yaml("a: 1") != load_yaml("\na: 1")


@pytest.mark.parametrize("text", ["", "# just a comment\n"], ids=["empty", "comment"])
def test_a_document_without_content_is_none(text: str) -> None:
    assert load_yaml(text) is None


def test_an_empty_document_is_null() -> None:
    assert root("---\n").is_null


def test_scalar_fields() -> None:
    node = value("'1.50'")
    assert isinstance(node, YamlScalar)
    assert (node.written, node.value, node.tag, node.plain) == ("1.50", "1.50", "str", False)
    assert isinstance(root("{}"), YamlMapping)


def test_pyyaml_is_imported_only_when_a_document_is_read() -> None:
    modules = (
        "nvidia_gpu_exporter.support.strictyaml",
        "nvidia_gpu_exporter.capture.config",
        "nvidia_gpu_exporter.httpserver.config",
        "nvidia_gpu_exporter.backends.demo.extras",
        "nvidia_gpu_exporter.fakesmi.cli",
    )
    code = f"import sys\nfor name in {modules!r}:\n    __import__(name)\nprint('yaml' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_loads_or_raises_only_the_loaders_error(text: str) -> None:
    with contextlib.suppress(StrictYamlError):
        load_yaml(text)

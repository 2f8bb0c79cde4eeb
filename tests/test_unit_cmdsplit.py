"""Splitting `--nvidia-smi-command` into argv words (docs/compatibility.md, "Splitting the nvidia-smi command")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvidia_gpu_exporter.backends.exec.command import CommandSplitError, quote_word, split_command

SPLIT_EXAMPLES: list[tuple[str, list[str]]] = [
    ("  sudo   nvidia-smi\t", ["sudo", "nvidia-smi"]),
    (
        "ssh -o StrictHostKeyChecking=no user@host nvidia-smi",
        ["ssh", "-o", "StrictHostKeyChecking=no", "user@host", "nvidia-smi"],
    ),
    (
        '"C:\\Program Files\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe" -someflag',
        ["C:\\Program Files\\NVIDIA Corporation\\NVSMI\\nvidia-smi.exe", "-someflag"],
    ),
    ('sudo "/opt/my tools/nvidia-smi"', ["sudo", "/opt/my tools/nvidia-smi"]),
    ("'/path/o'\\''connor/fake' --capture x", ["/path/o'connor/fake", "--capture", "x"]),
]


@pytest.mark.parametrize(("command", "argv"), SPLIT_EXAMPLES, ids=[f"table: {row[0]!r}" for row in SPLIT_EXAMPLES])
def test_spec_table(command: str, argv: list[str]) -> None:
    assert split_command(command) == argv


RULES: list[tuple[str, list[str], str]] = [
    ("C:\\nvidia\\nvidia-smi.exe", ["C:\\nvidia\\nvidia-smi.exe"], "no quotes: backslashes literal"),
    ("a\\ b", ["a\\", "b"], "no quotes: backslash does not escape a space"),
    ("nvidia-smi $HOME/x *.exe ~", ["nvidia-smi", "$HOME/x", "*.exe", "~"], "no quotes: no expansion"),
    ("a\x0bb\x0cc", ["a", "b", "c"], "no quotes: Go strings.Fields splits on \\v and \\f"),
    ("a\xa0b\u3000c", ["a", "b", "c"], "no quotes: Go strings.Fields splits on Unicode spaces"),
    ("a\x1cb", ["a\x1cb"], "no quotes: \\x1c is not a Go space"),
    ("/opt/'my tools'/nvidia-smi", ["/opt/my tools/nvidia-smi"], "adjacent quoted/unquoted parts concatenate"),
    ("cmd ''", ["cmd", ""], "'' yields an empty word"),
    ('cmd ""', ["cmd", ""], '"" yields an empty word'),
    ("cmd '' x", ["cmd", "", "x"], "empty word in the middle"),
    ('"$HOME/x" y', ["$HOME/x", "y"], "double quotes: no variable expansion"),
    ("'~/x' ~ *", ["~/x", "~", "*"], "quote mode: no tilde or glob expansion"),
    ('"a\\$b\\`c\\"d\\\\e"', ['a$b`c"d\\e'], 'double quotes: backslash escapes $ ` " \\'),
    ('"a\\nb"', ["a\\nb"], "double quotes: other backslashes stay literal"),
    ('"line\\\nmore"', ["linemore"], "double quotes: backslash-newline removed"),
    ("'a\\b' c", ["a\\b", "c"], "single quotes: backslash literal"),
    ("'x' a\\\"b", ["x", 'a"b'], "unquoted backslash escapes the next char"),
    ("'x' a\\\nb", ["x", "ab"], "unquoted backslash-newline removed"),
    ("'x' a\\ b", ["x", "a b"], "unquoted backslash escapes a space"),
    ("'a'\x0bb", ["a\x0bb"], "quote mode: only space, tab, newline separate"),
    ("'a'\xa0b", ["a\xa0b"], "quote mode: NBSP does not separate"),
    ("  'a'\t\n 'b'  ", ["a", "b"], "quote mode: leading/trailing separators ignored"),
    ("'a \"b\" c'", ['a "b" c'], "single quotes keep double quotes"),
    ("\"a 'b' c\"", ["a 'b' c"], "double quotes keep single quotes"),
]


@pytest.mark.parametrize(("command", "argv"), [r[:2] for r in RULES], ids=[r[2] for r in RULES])
def test_split_rules(command: str, argv: list[str]) -> None:
    assert split_command(command) == argv


ERRORS: list[tuple[str, str]] = [
    ('"abc', "unterminated double quote"),
    ("'abc", "unterminated single quote"),
    ("'a' b\\", "trailing backslash (quote mode)"),
    ('"abc\\"', "escaped closing double quote leaves it unterminated"),
    ("'a' \"b", "unterminated double quote after a good word"),
]


@pytest.mark.parametrize("command", [e[0] for e in ERRORS], ids=[f"error: {e[1]}" for e in ERRORS])
def test_split_errors(command: str) -> None:
    with pytest.raises(CommandSplitError):
        split_command(command)


EMPTY = ["", "   ", "\t\n", "''", '""', "'' x", "\"\" 'x'"]


@pytest.mark.parametrize("command", EMPTY, ids=[f"empty result or first word empty: {e!r}" for e in EMPTY])
def test_empty_command(command: str) -> None:
    with pytest.raises(CommandSplitError, match="empty nvidia-smi command"):
        split_command(command)


def test_trailing_backslash_without_quotes_is_literal() -> None:
    """Without any quote character backslashes are literal, even at the end."""
    assert split_command("C:\\dir\\") == ["C:\\dir\\"]


_words = st.lists(st.text(max_size=20), max_size=5)


@settings(max_examples=300, deadline=None)
@given(_words)
def test_quote_word_round_trips(words: list[str]) -> None:
    command = " ".join(quote_word(word) for word in ["cmd", *words])
    assert split_command(command) == ["cmd", *words]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30).filter(lambda word: word != ""))
def test_quote_word_single_word(word: str) -> None:
    assert split_command(quote_word(word)) == [word]

"""Splitting ``--nvidia-smi-command`` into argv words, as the Go exporter does.

Without any quote character the value is split on whitespace and backslashes are literal, so Windows
paths such as ``C:\\nvidia\\nvidia-smi.exe`` survive. With a quote anywhere, POSIX shell word splitting
applies (quotes, backslash escapes, no expansion of variables, globs or ``~``).
"""

from __future__ import annotations

from nvidia_gpu_exporter._go.text import go_fields


class CommandSplitError(ValueError):
    """The command cannot be split into words (unterminated quote, trailing backslash, empty)."""


_SEPARATORS = " \t\n"
_DOUBLE_QUOTE_ESCAPABLE = '$`"\\\n'


def _shell_split(text: str) -> list[str]:
    words: list[str] = []
    current: list[str] = []
    in_word = False
    position = 0
    length = len(text)
    while position < length:
        char = text[position]
        if char in _SEPARATORS:
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            position += 1
        elif char == "\\":
            if position + 1 >= length:
                raise CommandSplitError("unterminated backslash escape at the end of the command")
            following = text[position + 1]
            if following != "\n":
                current.append(following)
                in_word = True
            position += 2
        elif char == "'":
            end = text.find("'", position + 1)
            if end < 0:
                raise CommandSplitError("unterminated single-quoted string in the command")
            current.append(text[position + 1 : end])
            in_word = True
            position = end + 1
        elif char == '"':
            position += 1
            while True:
                if position >= length:
                    raise CommandSplitError("unterminated double-quoted string in the command")
                char = text[position]
                if char == '"':
                    position += 1
                    break
                if char == "\\" and position + 1 < length and text[position + 1] in _DOUBLE_QUOTE_ESCAPABLE:
                    if text[position + 1] != "\n":
                        current.append(text[position + 1])
                    position += 2
                    continue
                current.append(char)
                position += 1
            in_word = True
        else:
            current.append(char)
            in_word = True
            position += 1
    if in_word:
        words.append("".join(current))
    return words


def split_command(command: str) -> list[str]:
    """Argv words of ``--nvidia-smi-command``; raises :class:`CommandSplitError` with a clear reason."""
    words = _shell_split(command) if ('"' in command or "'" in command) else go_fields(command)
    if not words or not words[0]:
        raise CommandSplitError("empty nvidia-smi command")
    return words


def quote_word(word: str) -> str:
    """Quote one word so that :func:`split_command` gives it back unchanged (``'`` written as ``'\\''``)."""
    return "'" + word.replace("'", "'\\''") + "'"

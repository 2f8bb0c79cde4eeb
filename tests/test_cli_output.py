"""The informational flags as kingpin answers them (docs/compatibility.md, "Command line"): which stream, what
text, exit 0; the man page and the shell completion that cover exactly the visible flags."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvidia_gpu_exporter import cli
from nvidia_gpu_exporter.flags import FLAGS, Kind, completions

HIDDEN = ("--help-long", "--help-man", "--completion-bash", "--completion-script-bash", "--completion-script-zsh")
VISIBLE = ["--help", *(f"--{flag.name}" for flag in FLAGS), "--version"]

# (arguments, stream the text goes to, a line the text must hold, rule)
STREAMS: list[tuple[list[str], str, str, str]] = [
    (["--help"], "err", "usage: nvidia_gpu_exporter [<flags>]", "help goes to stderr"),
    (["-h"], "err", "usage: nvidia_gpu_exporter [<flags>]", "short help goes to stderr"),
    (["--version"], "err", "nvidia_gpu_exporter, version ", "version goes to stderr"),
    (["--help-long"], "out", "usage: nvidia_gpu_exporter [<flags>]", "long help goes to stdout"),
    (["--help-man"], "out", ".SH OPTIONS", "man page goes to stdout"),
    (["--completion-script-bash"], "out", "complete -o default -F", "bash script goes to stdout"),
    (["--completion-script-zsh"], "out", "#compdef nvidia_gpu_exporter", "zsh script goes to stdout"),
    (["--completion-bash", "--log."], "out", "--log.level", "completions go to stdout"),
    (["--help", "--version"], "err", "nvidia_gpu_exporter, version ", "a generating flag wins over help"),
    (["--version", "--help-man"], "err", "nvidia_gpu_exporter, version ", "the first generating flag wins"),
    (["--collect.interval=1d", "--help"], "err", "usage: nvidia_gpu_exporter", "help after other flags"),
]


@pytest.mark.parametrize(("argv", "stream", "line", "rule"), STREAMS, ids=[row[3] for row in STREAMS])
def test_informational_flags_stream_and_exit_code(
    argv: list[str], stream: str, line: str, rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 0, rule
    captured = capsys.readouterr()
    written, silent = (captured.err, captured.out) if stream == "err" else (captured.out, captured.err)
    assert line in written
    assert silent == ""


def test_version_block_ends_with_one_newline(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--version"])
    assert capsys.readouterr().err == cli.version_text()


def test_help_names_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    """`doctor` (and `install`/`uninstall` on Windows) are commands too; --help is where a user looks for them."""
    from nvidia_gpu_exporter.windows.scm import SUBCOMMANDS

    cli.main(["--help"])
    subcommands = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("Subcommands: "))
    for name in ("doctor", *SUBCOMMANDS):
        assert re.search(rf"\b{name}\b", subcommands), name


def test_help_lists_visible_flags_only(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--help"])
    text = capsys.readouterr().err
    for name in VISIBLE:
        assert name in text or name.replace("--", "--[no-]", 1) in text
    entries = [line.strip() for line in text.splitlines()]
    for name in HIDDEN:
        assert not any(entry.startswith(name) for entry in entries)


def test_man_page_is_roff_of_the_visible_flags(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--help-man"])
    page = capsys.readouterr().out
    assert page.startswith(".TH NVIDIA_GPU_EXPORTER 1 ")
    for section in (".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS"):
        assert f"\n{section}\n" in page
    for name in VISIBLE:
        assert f"\\fB{roff_dashes(name)}\\fR" in page
    for name in HIDDEN:
        assert f"\\fB{roff_dashes(name)}" not in page
    assert not any(
        line.startswith((".", "'")) and line.split(" ")[0] not in ROFF_REQUESTS for line in page.splitlines()
    )


ROFF_REQUESTS = {".TH", ".SH", ".TP", ".B", ".PP"}


def roff_dashes(text: str) -> str:
    return text.replace("-", "\\-")


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
def test_man_page_renders_without_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["--help-man"])
    page = capsys.readouterr().out
    rendered = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww"], input=page, capture_output=True, text=True, timeout=30, check=True
    )
    assert rendered.stderr == ""
    plain = re.sub(".\b", "", rendered.stdout)  # overstruck bold and underline
    assert "--collect.interval" in plain.replace("\u2010", "-").replace("\u2212", "-")


# (words after --completion-bash, expected candidates, rule)
COMPLETIONS: list[tuple[list[str], list[str], str]] = [
    ([], [], "nothing typed: no candidates (the shell falls back to files)"),
    (["--"], VISIBLE, "a flag prefix lists every visible flag"),
    (["--coll"], VISIBLE, "the shell filters the prefix, not the exporter"),
    (["--log.level"], ["debug", "info", "warn", "error"], "a complete enum flag lists its values"),
    (["--log.level", "de"], ["debug", "info", "warn", "error"], "a value being typed lists the values"),
    (["--log.level", "info"], [], "a complete value ends completion"),
    (["--log.level", "=", ""], ["debug", "info", "warn", "error"], "bash splits --flag=value at ="),
    (["--log.level", "="], ["debug", "info", "warn", "error"], "bash splits --flag= at ="),
    (["--log.format=j"], ["--log.format=logfmt", "--log.format=json"], "one word --flag=value keeps its flag"),
    (["--collect.timeout", ""], [], "a flag without values: nothing (files)"),
    (["--collect.compute-apps"], [], "a complete boolean flag: nothing"),
    (["nvidia_gpu_exporter", "--web.listen-address", ":9835", "--"], VISIBLE, "earlier words do not matter"),
]


@pytest.mark.parametrize(("words", "expected", "rule"), COMPLETIONS, ids=[row[2] for row in COMPLETIONS])
def test_completions(words: list[str], expected: list[str], rule: str) -> None:
    assert completions(words) == expected, rule


def test_completion_bash_prints_candidates_one_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--completion-bash", "--log.format"]) == 0
    assert capsys.readouterr().out == "logfmt\njson"


def test_enum_completions_are_the_enum_choices() -> None:
    for flag in FLAGS:
        if flag.kind is Kind.ENUM:
            assert completions([f"--{flag.name}"]) == list(flag.choices)


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main([f"--completion-script-{shell}"]) == 0
    return capsys.readouterr().out


def test_bash_script_is_valid_bash(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "nvidia_gpu_exporter.bash"
    path.write_text(script("bash", capsys), encoding="utf-8")
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_is_valid_zsh(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "_nvidia_gpu_exporter"
    path.write_text(script("zsh", capsys), encoding="utf-8")
    subprocess.run(["zsh", "-n", str(path)], check=True, timeout=30)


def complete_in(shell: str, words: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> list[str]:
    """What ``shell``'s completion script offers for ``words`` (the cursor's word last), run through the real
    exporter: bash's function fills ``COMPREPLY``; zsh's, outside a completion widget, adds through stand-ins
    for ``compadd`` and ``compdef`` that print what they are given."""
    command = tmp_path / "nvidia_gpu_exporter"
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nvidia_gpu_exporter "$@"\n', encoding="utf-8")
    command.chmod(0o755)
    loaded = tmp_path / f"completion.{shell}"
    loaded.write_text(script(shell, capsys), encoding="utf-8")
    line = " ".join(f"'{word}'" for word in [str(command), *words])
    if shell == "bash":
        setup = f"COMP_WORDS=({line}); COMP_CWORD={len(words)}"
        call = '_nvidia_gpu_exporter_bash_autocomplete; printf "%s\\n" "${COMPREPLY[@]}"'
    else:
        setup = 'compdef() { : }; compadd() { [[ $1 == -a ]] && print -l -- "${(@P)2}" }; _files() { : }'
        call = f"words=({line}); CURRENT={len(words) + 1}; _nvidia_gpu_exporter"
    program = f"{setup}\nsource '{loaded}'\n{call}\n"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [shell, "-c", program], check=False, capture_output=True, text=True, timeout=60, env=environment
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


# (words on the command line, the cursor's word last; the replies bash offers)
BASH: list[tuple[list[str], list[str], str]] = [
    (["--collect.i"], ["--collect.interval"], "a flag name"),
    (["--log.level", "w"], ["warn"], "an enum value"),
    (["--metrics.profile", "=", "d"], ["dcgm"], "an enum value after ="),
    (["--collect.backend", "="], ["exec", "nvml", "demo"], "every value right after ="),
]


@pytest.mark.parametrize(("words", "replies", "rule"), BASH, ids=[row[2] for row in BASH])
def test_bash_completes_through_the_exporter(
    words: list[str], replies: list[str], rule: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert complete_in("bash", words, capsys, tmp_path) == replies, rule


# (words on the command line, the cursor's word last; the candidates the zsh function adds, unfiltered)
ZSH: list[tuple[list[str], list[str], str]] = [
    (["--collect.i"], VISIBLE, "a flag name: every visible flag (zsh filters)"),
    (["--log.level", "w"], ["debug", "info", "warn", "error"], "an enum value"),
    (["--log.level=w"], ["--log.level=debug", "--log.level=info", "--log.level=warn", "--log.level=error"], "one word"),
]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.parametrize(("words", "candidates", "rule"), ZSH, ids=[row[2] for row in ZSH])
def test_zsh_completes_through_the_exporter(
    words: list[str], candidates: list[str], rule: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert complete_in("zsh", words, capsys, tmp_path) == candidates, rule

"""INSTALL.md's code blocks by name, so CI and the tests run exactly the documented commands.

Each fenced block in INSTALL.md is preceded by a marker comment::

    <!-- installdoc: NAME -->                       CI or a test runs this block as written
    <!-- installdoc: NAME untested: REASON -->      nothing here can run it (REASON says why)

Command line (used by ``.ci/steps/30-packaging.sh``)::

    python3 tests/installdoc.py NAME     # print the block NAME
    python3 tests/installdoc.py --list   # NAME<TAB>tested|untested for every block
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

INSTALL_MD = Path(__file__).resolve().parents[1] / "INSTALL.md"

_BLOCK = re.compile(
    r"<!-- installdoc: (?P<name>[a-z0-9-]+)(?: untested: (?P<reason>[^\n]*?))? -->\n"
    r"```(?P<language>[a-z]+)\n(?P<body>.*?)^```$",
    flags=re.DOTALL | re.MULTILINE,
)
_FENCE = re.compile(r"^```[a-z]+$", flags=re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    language: str
    body: str
    untested_reason: str | None

    @property
    def tested(self) -> bool:
        return self.untested_reason is None

    def lines(self) -> list[str]:
        """The block's commands, one per line, with backslash and pipe continuations joined."""
        joined = re.sub(r"\\\n\s*", "", self.body)
        joined = re.sub(r"\|\n\s*", "| ", joined)
        return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def blocks(path: Path = INSTALL_MD) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = [Block(match["name"], match["language"], match["body"], match["reason"]) for match in _BLOCK.finditer(text)]
    fences = len(_FENCE.findall(text))
    if fences != len(found):
        raise ValueError(f"{path.name}: {fences} code blocks but {len(found)} installdoc markers")
    names = [block.name for block in found]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{path.name}: duplicate installdoc names {duplicates}")
    return found


def block(name: str, path: Path = INSTALL_MD) -> Block:
    for candidate in blocks(path):
        if candidate.name == name:
            return candidate
    raise KeyError(f"{path.name} has no installdoc block {name!r}")


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        for item in blocks():
            sys.stdout.write(f"{item.name}\t{'tested' if item.tested else 'untested'}\n")
        return 0
    if len(argv) != 1:
        sys.stderr.write(__doc__ or "")
        return 2
    sys.stdout.write(block(argv[0]).body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

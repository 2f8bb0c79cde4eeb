"""The shell blocks of the user-facing pages, each marked as run by CI or a test, or as needing what CI lacks.

A fenced block in a shell language (``sh``, ``bash``, ``shell``, ``console``, ``powershell``) is preceded, on the
line above its fence, by one of::

    <!-- run: NAME -->            a test or a CI step runs this block, reading it by NAME (block(PAGE, NAME))
    <!-- not run: REASON -->      what it needs that CI lacks (a GPU, a cluster, Windows, a published release)

INSTALL.md keeps its own markers (``<!-- installdoc: NAME -->``, tests/installdoc.py), and the README's opening
is read by tests/readmedoc.py; both count here as the same two kinds. docs/architecture.md, "Tests", says this
for contributors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console", "zsh", "powershell", "pwsh", "ps1", "bat", "cmd"})
# Pages of figures, each block the command that reproduces its table on the benchmark machine: not docs to follow.
NOT_CHECKED = frozenset({"BENCHMARKS.md"})

_FENCE = re.compile(r"^(?P<indent> *)```(?P<language>[A-Za-z0-9_-]*)\s*$")
_MARKER = re.compile(r"^\s*<!-- (?:(?P<run>run): (?P<name>[a-z0-9-]+)|not run: (?P<reason>.+?)|installdoc: .+?) -->$")


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    body: str
    marker: str  # the comment line above the fence, or "" when there is none

    @property
    def name(self) -> str | None:
        """NAME of ``<!-- run: NAME -->`` (or INSTALL.md's tested ``installdoc: NAME``), else None."""
        match = _MARKER.match(self.marker)
        if match and match["run"]:
            return match["name"]
        installdoc = re.match(r"^<!-- installdoc: ([a-z0-9-]+) -->$", self.marker)
        return installdoc.group(1) if installdoc else None

    @property
    def reason(self) -> str | None:
        """REASON of ``<!-- not run: REASON -->`` (or of INSTALL.md's ``untested: REASON``), else None."""
        match = _MARKER.match(self.marker)
        if match and match["reason"]:
            return match["reason"]
        untested = re.match(r"^<!-- installdoc: [a-z0-9-]+ untested: (.+) -->$", self.marker)
        return untested.group(1) if untested else None

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    """Every Markdown page of the repository (not those of the virtual environment or of git)."""
    return [
        path
        for path in sorted(REPO.rglob("*.md"))
        if not {".venv", ".git", "node_modules"} & set(path.relative_to(REPO).parts)
    ]


def shell_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in a shell language, with the line above each fence."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        closing = re.compile(rf"^{opening['indent']}```\s*$")
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{index + 1}: a code fence that is never closed")
        if opening["language"] in SHELL_LANGUAGES:
            marker = lines[index - 1].strip() if index else ""
            body = "\n".join(line.removeprefix(opening["indent"]) for line in lines[index + 1 : end])
            found.append(Block(page, index + 1, opening["language"], body + "\n", marker))
        index = end + 1
    return found


def block(page: str, name: str) -> Block:
    """The block of ``page`` (relative to the repository) marked ``<!-- run: NAME -->``."""
    for candidate in shell_blocks(REPO / page):
        if candidate.name == name:
            return candidate
    raise KeyError(f"{page} has no block marked <!-- run: {name} -->")

"""What the user-facing pages say stays true: the README's endpoint table lists every route the exporter can serve,
and every shell block of the docs is either run by a test or CI, or says what it needs that CI lacks
(tests/docblocks.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import docblocks
from harness import REPO
from nvidia_gpu_exporter.flags import FLAGS
from nvidia_gpu_exporter.web import routes

README_MD = REPO / "README.md"


def route_constants() -> set[str]:
    """Every route routes.py defines (the paths and the pprof prefix), each once."""
    return {
        value for name, value in vars(routes).items() if name.endswith(("_PATH", "_PREFIX")) and isinstance(value, str)
    }


def documented_routes() -> set[str]:
    """The routes in the first column of the README's endpoint table, without query strings or a trailing slash."""
    text = README_MD.read_text(encoding="utf-8")
    section = text.split("\n## Endpoints\n", 1)[1].split("\n## ", 1)[0]
    found = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            for span in re.findall(r"`([^`]+)`", first_cell):
                if span.startswith("/"):
                    found.add(span.split("?", 1)[0].rstrip("/") or "/")
    return found


def test_the_readme_endpoint_table_lists_every_route() -> None:
    assert documented_routes() == route_constants()


# -- every shell block is run, or says what it needs ------------------------------------------------------------

# Tools and files that read a block by name: a block marked run must be named in one of them, beside its page.
READERS = (*sorted((REPO / "tests").glob("*.py")), *sorted((REPO / ".ci").rglob("*.sh")), REPO / ".ci" / "run")
SELF = {Path(__file__).resolve(), Path(docblocks.__file__).resolve()}


def unmarked(page: Path) -> list[str]:
    """The page's shell blocks with neither ``<!-- run: NAME -->`` nor ``<!-- not run: REASON -->`` above."""
    return [
        f"{block.where()}: a {block.language} block with neither <!-- run: NAME --> nor <!-- not run: REASON -->"
        for block in docblocks.shell_blocks(page)
        if block.name is None and not (block.reason or "").strip()
    ]


def unread(page: Path) -> list[str]:
    """The page's blocks marked run that no test or CI step names together with the page."""
    relative = str(page.relative_to(REPO))
    texts = [path.read_text(encoding="utf-8") for path in READERS if path.resolve() not in SELF]
    problems = []
    for block in docblocks.shell_blocks(page):
        if block.name is None:
            continue
        word = re.compile(rf"(?<![\w-]){re.escape(block.name)}(?![\w-])")
        if not any(relative in text and word.search(text) for text in texts):
            problems.append(f"{block.where()}: marked run: {block.name}, but no test or CI step reads it")
    return problems


CHECKED_PAGES = [page for page in docblocks.pages() if page.name not in docblocks.NOT_CHECKED]


def test_every_page_with_shell_blocks_is_checked() -> None:
    """The user-facing pages the issue names are all here, and a page of figures is the only one left out."""
    names = {str(page.relative_to(REPO)) for page in CHECKED_PAGES}
    assert {"README.md", "INSTALL.md", "KUBERNETES.md", "packaging/README.md", "docs/fleet.md"} <= names
    assert "deploy/helm/nvidia-gpu-exporter/README.md" in names
    assert "BENCHMARKS.md" not in names


@pytest.mark.parametrize("page", CHECKED_PAGES, ids=[str(page.relative_to(REPO)) for page in CHECKED_PAGES])
def test_every_shell_block_is_run_or_says_what_it_needs(page: Path) -> None:
    assert unmarked(page) + unread(page) == []


MARKING: dict[str, tuple[str, list[str]]] = {
    "unmarked": ("# x\n\ntext\n\n```sh\nmake\n```\n", ["page.md:5: a sh block with neither"]),
    "marked not run": ("text\n<!-- not run: needs a GPU -->\n```sh\nmake\n```\n", []),
    "an empty reason": ("text\n<!-- not run:  -->\n```sh\nmake\n```\n", ["page.md:3: a sh block with neither"]),
    "a yaml block needs no marker": ("```yaml\na: 1\n```\n", []),
    "indented in a list": ("- item\n\n  ```powershell\n  x\n  ```\n", ["page.md:3: a powershell block with neither"]),
}


@pytest.mark.parametrize(("text", "expected"), MARKING.values(), ids=MARKING.keys())
def test_the_marker_check_finds_an_unmarked_block(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, expected: list[str]
) -> None:
    monkeypatch.setattr(docblocks, "REPO", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    problems = unmarked(page)
    assert [problem[: len(want)] for problem, want in zip(problems, expected, strict=True)] == expected


def test_a_block_marked_run_that_nothing_reads_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    page = REPO / "docs" / "demo.md"
    original = docblocks.shell_blocks(page)
    renamed = [docblocks.Block(b.page, b.line, b.language, b.body, "<!-- run: nobody-reads-this -->") for b in original]
    monkeypatch.setattr(docblocks, "shell_blocks", lambda _page: renamed)
    assert unread(page) == [
        f"docs/demo.md:{renamed[0].line}: marked run: nobody-reads-this, but no test or CI step reads it"
    ]


# -- the README's flag table ------------------------------------------------------------------------------------


def readme_flag_rows() -> list[str]:
    section = README_MD.read_text(encoding="utf-8").split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `--")]


def test_the_readme_flag_table_covers_every_flag() -> None:
    """Each flag is named in a row (its own, or one that mentions it), or falls under a row's ``--group.*``."""
    rows = readme_flag_rows()
    flag_cells = {name for row in rows for name in re.findall(r"`--([a-z][a-z0-9.-]*)`", row.split("|")[1])}
    named = {name for row in rows for name in re.findall(r"`--([a-z][a-z0-9.-]*)[`=]", row)}
    groups = {group for row in rows for group in re.findall(r"`--([a-z]+)\.\*`", row)}
    flags = {flag.name for flag in FLAGS}
    assert sorted(flag_cells - flags) == []
    assert sorted(name for name in flags - named if name.split(".", 1)[0] not in groups) == []

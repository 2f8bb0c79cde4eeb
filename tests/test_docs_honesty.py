"""What the user-facing pages say about the code stays true: the README's endpoint table lists every route the
exporter can serve."""

from __future__ import annotations

import re

from harness import REPO
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

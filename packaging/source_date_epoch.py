#!/usr/bin/env python3
"""Print the SOURCE_DATE_EPOCH a release build of a source tree uses when the caller sets none.

    python3 packaging/source_date_epoch.py ROOT

- ROOT is an unpacked sdist (it has PKG-INFO): the mtime of PKG-INFO. The sdist's members carry the
  SOURCE_DATE_EPOCH of the build that made it (hatchling writes it as every member's mtime), so a rebuild
  from the sdist stamps what the build from the checkout stamped.
- ROOT is the top of a git work tree: the committer time of HEAD.
- Anything else (an export without PKG-INFO, an sdist unpacked inside an unrelated git checkout is still an
  sdist): exit status 2 with the reason; set SOURCE_DATE_EPOCH yourself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class NoEpochError(Exception):
    """The tree carries no timestamp to reproduce."""


def _git(root: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def source_date_epoch(root: Path) -> int:
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        return int(pkg_info.stat().st_mtime)
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is not None and Path(top).resolve() == root.resolve():
        committed = _git(root, "log", "-1", "--format=%ct")
        if committed and committed.isdigit():
            return int(committed)
        raise NoEpochError(f"{root} is a git work tree without a commit")
    raise NoEpochError(f"{root} is neither an unpacked sdist (no PKG-INFO) nor the top of a git work tree")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: source_date_epoch.py ROOT", file=sys.stderr)
        return 2
    try:
        print(source_date_epoch(Path(argv[0])))
    except NoEpochError as error:
        print(f"source_date_epoch.py: {error}; set SOURCE_DATE_EPOCH", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

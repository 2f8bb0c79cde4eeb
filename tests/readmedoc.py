"""The README's opening commands, read from README.md itself, so that its test and CI run exactly what it says.

The opening (everything above the first ``---``) holds two ``sh`` blocks, install-and-run and run-tests, and one
inline apt line (the packages both need on a minimal Debian image). ``.ci/run`` runs run-tests verbatim;
``.ci/steps/35-fresh-debian.sh`` runs the apt line, then both commands, in a fresh Debian image.

Command line::

    python3 tests/readmedoc.py NAME     # print NAME: install-and-run, run-tests or apt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README_MD = Path(__file__).resolve().parents[1] / "README.md"
NAMES = ("install-and-run", "run-tests", "apt")

_BLOCK = re.compile(r"^```sh\n(.*?)^```$", flags=re.DOTALL | re.MULTILINE)
_APT = re.compile(r"`(apt-get update [^`]*)`")


def opening(path: Path = README_MD) -> dict[str, str]:
    """NAME -> command, from the README's opening; a ValueError naming the file where one is missing."""
    head = path.read_text(encoding="utf-8").split("\n---\n", 1)[0]
    blocks = [block.strip() for block in _BLOCK.findall(head)]
    apt = _APT.findall(head)
    if len(blocks) != 2 or len(apt) != 1:
        raise ValueError(
            f"{path}: its opening (above the first ---) must hold two sh blocks and one `apt-get update ...` line,"
            f" found {len(blocks)} blocks and {len(apt)} apt lines"
        )
    return dict(zip(NAMES, [*blocks, apt[0]], strict=True))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in NAMES:
        sys.stderr.write(__doc__ or "")
        return 2
    sys.stdout.write(opening()[argv[0]] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

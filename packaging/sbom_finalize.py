#!/usr/bin/env python3
"""Complete the CycloneDX SBOM written by ``cyclonedx-py environment``: the root component gets its version
and package URL (the project's version is dynamic, so cyclonedx-py cannot read it from pyproject.toml) and
every component gets the sha256 hashes that ``packaging/requirements.lock`` pins for it.

    python3 packaging/sbom_finalize.py SBOM.json VERSION

The file is rewritten in place with sorted keys, so equal inputs give equal bytes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

LOCK = Path(__file__).resolve().parent / "requirements.lock"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_hashes(lock: Path) -> dict[str, list[str]]:
    """name -> sha256 digests, from the pip requirements format with ``--hash`` continuation lines."""
    hashes: dict[str, list[str]] = {}
    current = ""
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            current = canonical(line.split("==", 1)[0])
            hashes[current] = []
        for digest in re.findall(r"--hash=sha256:([0-9a-f]{64})", line):
            hashes[current].append(digest)
    return hashes


def finalize(sbom: dict[str, Any], version: str, hashes: dict[str, list[str]]) -> dict[str, Any]:
    root = sbom["metadata"]["component"]
    root["version"] = version
    root["purl"] = f"pkg:pypi/{canonical(root['name'])}@{version}"
    for component in sbom.get("components", []):
        digests = hashes.get(canonical(component["name"]))
        if not digests:
            raise SystemExit(f"{component['name']} is in the SBOM but not in {LOCK.name}")
        component["hashes"] = [{"alg": "SHA-256", "content": digest} for digest in digests]
    return sbom


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, version = Path(argv[0]), argv[1]
    sbom = finalize(json.loads(path.read_text(encoding="utf-8")), version, locked_hashes(LOCK))
    path.write_text(json.dumps(sbom, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

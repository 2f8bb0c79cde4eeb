"""Turn a directory of Go module source trees into a file:// GOPROXY, checking each against go.sum.

Layout read: ``MODDIR/<module path>@<version>/`` (for example ``MODDIR/golang.org/x/sys@v0.47.0/``), each
the module's files at that version, as ``git archive <tag>`` gives them. Each tree is zipped the way the Go
command zips a module and its ``h1:`` hash compared with the main module's go.sum. A tree that matches
goes into the proxy, so the build verifies it like any download. One that does not (a version the
offline mirror lacks, exported from the nearest commit instead) is printed as a ``replace`` line for
build.sh, which points the build at the directory; such a build is then not the upstream release's bytes,
and build.sh says so.

Usage: modproxy.py MODDIR GO_SUM PROXY_DIR  (prints ``verified MOD VER`` / ``replace MOD VER DIR`` lines)
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

_VCS_DIRS = frozenset({".git", ".hg", ".svn", ".bzr"})


def escape(path: str) -> str:
    """The proxy's case escaping: each capital letter becomes ``!`` and its lower case."""
    return re.sub(r"[A-Z]", lambda match: "!" + match.group(0).lower(), path)


def module_files(root: Path) -> list[str]:
    """The files the Go command puts in a module zip: no nested modules, VCS dirs, vendored packages or links."""
    found: list[str] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        for entry in directory.iterdir():
            rel = entry.relative_to(root).as_posix()
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if entry.name not in _VCS_DIRS and not (entry / "go.mod").exists():
                    pending.append(entry)
            elif entry.is_file() and not rel.startswith("vendor/") and "/vendor/" not in rel:
                found.append(rel)
    return sorted(found)


def hash1(entries: list[tuple[str, bytes]]) -> str:
    """Go's dirhash ``h1:``: SHA-256 over the sorted ``<sha256>  <name>`` lines of the files."""
    summary = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(entries))
    return "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()


def module_trees(moddir: Path) -> list[Path]:
    """Every ``<module>@<version>`` directory under ``moddir``."""
    trees: list[Path] = []
    pending = [moddir]
    while pending:
        for entry in sorted(pending.pop().iterdir()):
            if entry.is_dir():
                (trees if "@" in entry.name else pending).append(entry)
    return sorted(trees)


def build(moddir: Path, go_sum: Path, proxy: Path) -> list[str]:
    """Write the proxy; return one ``verified``/``replace`` line per module tree."""
    sums = dict(re.findall(r"^(\S+ \S+) (h1:\S+)$", go_sum.read_text(encoding="utf-8"), re.MULTILINE))
    lines: list[str] = []
    for tree in module_trees(moddir):
        module, version = tree.relative_to(moddir).as_posix().rsplit("@", 1)
        go_mod_path = tree / "go.mod"
        go_mod = go_mod_path.read_bytes() if go_mod_path.exists() else f"module {module}\n".encode()
        prefix = f"{module}@{version}/"
        entries = [(prefix + rel, (tree / rel).read_bytes()) for rel in module_files(tree)]
        want_zip = sums.get(f"{module} {version}")
        want_mod = sums.get(f"{module} {version}/go.mod")
        if hash1(entries) != want_zip or hash1([("go.mod", go_mod)]) != want_mod:
            lines.append(f"replace {module} {version} {tree}")
            continue
        versions = proxy / escape(module) / "@v"
        versions.mkdir(parents=True, exist_ok=True)
        stem = escape(version)
        (versions / f"{stem}.mod").write_bytes(go_mod)
        (versions / f"{stem}.info").write_text(json.dumps({"Version": version}), encoding="utf-8")
        with zipfile.ZipFile(versions / f"{stem}.zip", "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in entries:
                archive.writestr(name, data)
        with (versions / "list").open("a", encoding="utf-8") as listing:
            listing.write(version + "\n")
        lines.append(f"verified {module} {version}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    for line in build(Path(argv[0]), Path(argv[1]), Path(argv[2])):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

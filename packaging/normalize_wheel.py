#!/usr/bin/env python3
"""Rewrite a wheel (any zip) so that its bytes do not depend on the builder's umask.

    python3 packaging/normalize_wheel.py WHEEL...

``pip wheel`` of an sdist (PyPI's PyYAML, built here without libyaml) records each file's mode as the build
left it on disk: 0644 under umask 0022, 0664 under umask 0002. Every entry gets the mode a umask-0022 build
gives (0755 for anything executable by anyone, else 0644; directories 0755) and the Unix "made by" system;
names, order, contents, compression and timestamps are kept, so RECORD stays valid. The file is rewritten in
place only when something changes. Exit status 2, with the reason, for a file that is not a zip.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

UNIX = 3  # ZipInfo.create_system for entries whose external_attr holds a Unix mode


def normalized_mode(mode: int, *, directory: bool) -> int:
    """The full st_mode an entry gets: type bits kept, permissions 0755 or 0644."""
    if directory:
        return stat.S_IFDIR | 0o755
    return stat.S_IFREG | (0o755 if mode & 0o111 else 0o644)


def normalize(path: Path) -> bool:
    """Rewrite ``path`` with normalized modes; True when it changed."""
    with zipfile.ZipFile(path) as source:
        entries = source.infolist()
        wanted = [normalized_mode(entry.external_attr >> 16, directory=entry.is_dir()) for entry in entries]
        if all(
            entry.create_system == UNIX and entry.external_attr == mode << 16
            for entry, mode in zip(entries, wanted, strict=True)
        ):
            return False
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(handle)
        try:
            with zipfile.ZipFile(temporary, "w") as target:
                for entry, mode in zip(entries, wanted, strict=True):
                    copy = zipfile.ZipInfo(entry.filename, date_time=entry.date_time)
                    copy.compress_type = entry.compress_type
                    copy.create_system = UNIX
                    copy.external_attr = mode << 16
                    copy.comment = entry.comment
                    copy.extra = entry.extra
                    with source.open(entry) as data, target.open(copy, "w") as out:
                        shutil.copyfileobj(data, out)
            shutil.copymode(path, temporary)
            Path(temporary).replace(path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: normalize_wheel.py WHEEL...", file=sys.stderr)
        return 2
    for name in argv:
        try:
            changed = normalize(Path(name))
        except (OSError, zipfile.BadZipFile) as error:
            print(f"normalize_wheel.py: {name}: {error}", file=sys.stderr)
            return 2
        print(f"{name}: {'modes normalized' if changed else 'already normalized'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

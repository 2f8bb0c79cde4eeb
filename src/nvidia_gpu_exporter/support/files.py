"""Reading a small file that an operator (or an attacker with write access) may replace at any time.

Opened without blocking and checked on the open file, not by name: opening a FIFO for reading blocks until a
writer comes (a thread held for ever, or the event loop), and a device such as /dev/zero never ends. So
anything but a regular file is refused, and at most ``max_bytes`` are read.
"""

from __future__ import annotations

import errno
import os
import stat

# O_NONBLOCK has no effect on a regular file; Windows has neither FIFOs nor the flag.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def read_regular_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The file's bytes; an :class:`OSError` whose ``strerror`` says why when it is not a regular file of at
    most ``max_bytes`` (or cannot be read)."""
    descriptor = os.open(path, _OPEN_FLAGS)
    try:  # checked before open() wraps it: open() refuses a directory itself, with the descriptor for a name
        _refuse_special(os.fstat(descriptor).st_mode, path)
    except OSError:
        os.close(descriptor)
        raise
    with open(descriptor, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", os.fspath(path))
    return data


def refuse_special_file(path: str | os.PathLike[str]) -> None:
    """The :class:`OSError` :func:`read_regular_file` raises when ``path`` names something other than a regular
    file, checked by name for a file another library opens itself (``ssl`` loads certificates from paths); a
    missing or unreadable path is left to that library to report. The file can change between this check and
    that open, so whoever opens it must still bound the wait (a thread with a timeout)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    _refuse_special(mode, path)


def _refuse_special(mode: int, path: str | os.PathLike[str]) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for is_kind, name in _SPECIAL_FILES if is_kind(mode)), "a special file")
        raise OSError(errno.EINVAL, f"not a regular file ({kind})", os.fspath(path))

"""The command that adds an optional extra to the installation running now, said from where it was installed.

No release is on PyPI yet, so ``pip install 'nvidia-gpu-exporter[fleet]'`` fails for most users: a hint names the
checkout, wheel or archive pip installed from (PEP 610's ``direct_url.json``), the index name only where pip had it
from an index, and for the single file (pex) or the frozen Windows executable, which take no extras, what to run
instead (INSTALL.md, "From a checkout or a wheel").
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

# importlib.metadata (zipfile, email, datetime ...), json and urllib are imported by the functions that need them:
# a hint is built only when an extra is missing, and every start imports this module (tests/test_footprint.py).

DISTRIBUTION = "nvidia-gpu-exporter"
_SOURCE_ROOT = Path(__file__).resolve().parents[3]  # src/nvidia_gpu_exporter/support/extras.py -> the checkout


class Kind(Enum):
    CHECKOUT = "checkout"  # pip install DIR
    EDITABLE = "editable"  # pip install -e DIR
    ARCHIVE = "archive"  # pip install a wheel or sdist file
    URL = "url"  # pip install from a URL that is not a local file (a VCS or web address)
    INDEX = "index"  # pip install nvidia-gpu-exporter, from PyPI or another index
    SINGLE_FILE = "single-file"  # the pex, or the frozen Windows executable: no pip, no extras


@dataclass(frozen=True, slots=True)
class Origin:
    kind: Kind
    location: str = ""  # the directory, file or URL it was installed from


def install_hint(extra: str, origin: Origin | None = None, python: str | None = None, os_name: str = os.name) -> str:
    """One line that adds ``extra`` to this installation, or what to do where none can."""
    origin = current_origin() if origin is None else origin
    if origin.kind is Kind.SINGLE_FILE:
        image = "" if extra == "windows" else ", or run the container image"
        return (
            f"the single file carries no extras: install the wheel with [{extra}] into a virtual environment"
            f' (INSTALL.md, "From a checkout or a wheel"){image}'
        )
    quote = _windows_quote if os_name == "nt" else shlex.quote
    pip = f"{quote(python or sys.executable)} -m pip install"
    if origin.kind is Kind.EDITABLE:
        return f"{pip} -e {quote(f'{origin.location}[{extra}]')}"
    if origin.kind in (Kind.CHECKOUT, Kind.ARCHIVE):
        return f"{pip} {quote(f'{origin.location}[{extra}]')}"
    if origin.kind is Kind.URL:
        return f"{pip} {quote(f'{DISTRIBUTION}[{extra}] @ {origin.location}')}"
    return f"{pip} {quote(f'{DISTRIBUTION}[{extra}]')}"


def current_origin() -> Origin:
    """Where the running package came from: the pex and the frozen executable say so, pip records the rest."""
    if os.environ.get("PEX") or getattr(sys, "frozen", False):
        return Origin(Kind.SINGLE_FILE)
    from importlib import metadata  # noqa: PLC0415 - see the imports above

    try:
        recorded = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:  # run from a source tree on PYTHONPATH, never installed
        if (_SOURCE_ROOT / "pyproject.toml").is_file():
            return Origin(Kind.EDITABLE, str(_SOURCE_ROOT))
        return Origin(Kind.INDEX)
    return origin_from_direct_url(recorded)


def origin_from_direct_url(recorded: str | None) -> Origin:
    """The origin PEP 610's ``direct_url.json`` records; none (an index install) or one unreadable is the index."""
    import json  # noqa: PLC0415 - see the imports above
    from urllib.parse import urlparse  # noqa: PLC0415
    from urllib.request import url2pathname  # noqa: PLC0415

    if not recorded:
        return Origin(Kind.INDEX)
    try:
        document = json.loads(recorded)
    except ValueError:
        return Origin(Kind.INDEX)
    if not isinstance(document, dict) or not isinstance(document.get("url"), str):
        return Origin(Kind.INDEX)
    url: str = document["url"]
    parsed = urlparse(url)
    if parsed.scheme != "file" or "vcs_info" in document:
        return Origin(Kind.URL, url)
    path = url2pathname(parsed.path)
    dir_info = document.get("dir_info")
    if isinstance(dir_info, dict):
        return Origin(Kind.EDITABLE if dir_info.get("editable") is True else Kind.CHECKOUT, path)
    return Origin(Kind.ARCHIVE, path)


def _windows_quote(text: str) -> str:
    """PowerShell's and cmd's double quotes, which both read the same where the text holds none."""
    return f'"{text}"'

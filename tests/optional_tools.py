"""One way for a test to need an optional command-line tool: it skips, naming the tool, where the tool is absent.

The README's test command must pass on a machine with only what the README installs (CI proves it in a fresh
Debian image, .ci/steps/35-fresh-debian.sh), so a test that runs a tool beyond Python (git, dpkg, rpm ...) says
so with ``needs_tool`` instead of failing with FileNotFoundError; the end of the run counts the skips by tool.
"""

from __future__ import annotations

import shutil

import pytest


def needs_tool(name: str, purpose: str = "") -> pytest.MarkDecorator:
    """Skip where ``name`` is not on PATH; ``purpose`` says what the test uses it for."""
    reason = f"{name} is not installed" + (f": {purpose}" if purpose else "")
    return pytest.mark.skipif(shutil.which(name) is None, reason=reason)

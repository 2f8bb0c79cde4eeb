"""The docs' commands that start the exporter (marked ``<!-- run: NAME -->``, tests/docblocks.py) run as written,
from the repository root as after the README's install, and serve GPUs."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

import docblocks
from harness import start_exporter

EXPORTER_BLOCKS = {
    "README.md": "fake-smi-capture",
    "docs/fake-nvidia-smi.md": "fake-smi-capture",
    "docs/demo.md": "demo-mig",
    "docs/view.md": "demo-view",
}


def command_line(body: str) -> list[str]:
    """The one command of a block: continuation lines joined, comment lines left out."""
    lines = [line for line in body.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0], comments=True)


@pytest.mark.parametrize(("page", "name"), EXPORTER_BLOCKS.items(), ids=EXPORTER_BLOCKS.keys())
def test_the_documented_exporter_command_serves_gpus(page: str, name: str) -> None:
    argv = command_line(docblocks.block(page, name).body)
    assert argv[0] == "nvidia_gpu_exporter"
    # The block's other commands (the fake nvidia-smi) are on PATH as after the README's install.
    handle = start_exporter(argv[1:], env={"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    try:
        text = handle.scrape()
    finally:
        assert handle.stop() == 0
    assert "nvidia_smi_last_collect_success 1" in text
    assert "nvidia_smi_gpu_info{" in text

"""Capture files: recorded ``nvidia-smi`` outputs, one section per command.

A capture is the unit both the fake ``nvidia-smi`` and the demo backend answer from. The file format is a
sequence of blocks, each a fence (80 ``#``), heading lines, a fence, then the verbatim body::

    ################################################################################
    # load :: query-gpu (csv, what the exporter parses)
    # $ nvidia-smi --query-gpu=uuid,name --format=csv
    ################################################################################
    uuid, name
    GPU-..., NVIDIA H200
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

from nvidia_gpu_exporter.support.files import read_regular_file

FENCE = "#" * 80
GPU_CSV_LABEL_PREFIX = "query-gpu (csv"
COMPUTE_APPS_LABEL_PREFIX = "query-compute-apps"
CAPABILITIES_STATE = "capabilities"


class CaptureError(ValueError):
    """The capture text does not follow the capture file format."""


@dataclass(frozen=True, slots=True)
class Section:
    """One recorded command: state (``idle``, ``load``, ``capabilities``), label, command line, output."""

    state: str
    label: str
    command: str
    body: str


@dataclass(frozen=True, slots=True)
class Capture:
    """A parsed capture: the free-form metadata header and the sections in file order."""

    name: str
    metadata: str
    sections: tuple[Section, ...]

    def find(self, state: str, label_prefix: str) -> Section | None:
        """First section in file order with this state whose label starts with ``label_prefix``."""
        for section in self.sections:
            if section.state == state and section.label.startswith(label_prefix):
                return section
        return None

    def states(self) -> tuple[str, ...]:
        """The states that have a GPU CSV section, in file order (``idle``, ``load``, ...)."""
        seen: list[str] = []
        for section in self.sections:
            if section.label.startswith(GPU_CSV_LABEL_PREFIX) and section.state not in seen:
                seen.append(section.state)
        return tuple(seen)


def _trim_empty_lines(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and lines[start] == "":
        start += 1
    while end > start and lines[end - 1] == "":
        end -= 1
    return lines[start:end]


def parse_capture(text: str, name: str = "") -> Capture:
    """Parse capture text (LF or CRLF). Raises :class:`CaptureError` with the offending line number."""
    lines = text.replace("\r\n", "\n").split("\n")
    metadata: list[str] = []
    sections: list[Section] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line != FENCE:
            if line.strip():
                raise CaptureError(f"line {index + 1}: text outside a block: {line[:60]!r}")
            index += 1
            continue
        heading_start = index + 1
        index = heading_start
        while index < len(lines) and lines[index] != FENCE:
            if not lines[index].startswith("#"):
                raise CaptureError(f"line {index + 1}: heading line does not start with '#'")
            index += 1
        if index >= len(lines):
            raise CaptureError(f"line {heading_start}: block heading is not closed by a fence")
        headings = lines[heading_start:index]
        if not headings:
            raise CaptureError(f"line {heading_start}: block without a heading")
        index += 1
        body_start = index
        while index < len(lines) and lines[index] != FENCE:
            index += 1
        body = "\n".join(_trim_empty_lines(lines[body_start:index]))
        title = headings[0][1:].strip()
        if " :: " in title:
            state, _, label = title.partition(" :: ")
            command = ""
            for heading in headings[1:]:
                if heading.startswith("# $ "):
                    command = heading[4:].strip()
                    break
            sections.append(Section(state.strip(), label.strip(), command, body))
        else:
            metadata.append(body)
    if not sections:
        raise CaptureError("the capture has no sections")
    return Capture(name=name, metadata="\n".join(metadata), sections=tuple(sections))


# A recorded machine's capture is about 150 KB; this bounds what a replaced file can make the demo read.
MAX_CAPTURE_BYTES = 16 * 1024 * 1024


def load_capture(path: str | os.PathLike[str]) -> Capture:
    """Read and parse a capture file from disk: a regular file of at most :data:`MAX_CAPTURE_BYTES` (the demo
    reads it on the event loop, where a FIFO in its place would block everything)."""
    data = read_regular_file(path, MAX_CAPTURE_BYTES)
    with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as handle:
        text = handle.read()  # universal newlines, as open() in text mode reads it
    return parse_capture(text, name=os.path.basename(os.fspath(path)))


def render_capture(capture: Capture) -> str:
    """Write a capture back in the file format (round-trips through :func:`parse_capture`)."""
    blocks: list[str] = []
    if capture.metadata:
        blocks.append(f"{FENCE}\n# nvidia_gpu_exporter GPU capture\n{FENCE}\n{capture.metadata}\n")
    for section in capture.sections:
        heading = f"# {section.state} :: {section.label}\n"
        if section.command:
            heading += f"# $ {section.command}\n"
        blocks.append(f"{FENCE}\n{heading}{FENCE}\n{section.body}\n")
    return "\n\n".join(blocks)

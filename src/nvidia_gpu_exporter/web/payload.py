"""Response bodies: a cached middle block (the ``nvidia_smi_*`` families) between small per-request parts.

The middle block is rendered and deflated once per snapshot. A per-request gzip body is then built by
deflating only the small prefix and suffix: each part is an independent deflate sequence ended by a full
flush (byte-aligned, no back-references across parts), so the parts concatenate into one valid deflate
stream under a single gzip header and trailer.

A body is served as its parts (:func:`parts`, :func:`gzip_parts`), never joined per request: every scraper of a
snapshot then shares the block's bytes, and a client that reads slowly pins only the small per-request parts.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, mtime 0, unknown OS
_RAW_DEFLATE = -15
_LEVEL = 6


@dataclass(frozen=True, slots=True)
class Block:
    """A rendered block and its precompressed form."""

    text: bytes
    deflated: bytes
    crc: int


def _deflate(data: bytes, mode: int) -> bytes:
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, _RAW_DEFLATE)
    return compressor.compress(data) + compressor.flush(mode)


def make_block(text: bytes) -> Block:
    return Block(text, _deflate(text, zlib.Z_FULL_FLUSH), zlib.crc32(text))


def parts(prefix: bytes, block: Block, suffix: bytes) -> tuple[bytes, ...]:
    """The plain body, in order."""
    return (prefix, block.text, suffix)


def gzip_parts(prefix: bytes, block: Block, suffix: bytes) -> tuple[bytes, ...]:
    """The gzip body of ``prefix + block + suffix`` in order, reusing the block's deflated bytes."""
    crc = zlib.crc32(prefix)
    crc = zlib.crc32(block.text, crc) if prefix else block.crc
    crc = zlib.crc32(suffix, crc)
    size = (len(prefix) + len(block.text) + len(suffix)) & 0xFFFFFFFF
    return (
        _GZIP_HEADER,
        _deflate(prefix, zlib.Z_FULL_FLUSH) if prefix else b"",
        block.deflated,
        _deflate(suffix, zlib.Z_FINISH),
        struct.pack("<II", crc, size),
    )


def assemble(prefix: bytes, block: Block, suffix: bytes) -> bytes:
    """The plain body in one piece."""
    return b"".join(parts(prefix, block, suffix))


def assemble_gzip(prefix: bytes, block: Block, suffix: bytes) -> bytes:
    """The gzip body in one piece."""
    return b"".join(gzip_parts(prefix, block, suffix))

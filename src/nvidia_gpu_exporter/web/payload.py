"""Gzip bodies: a snapshot's cached block (the ``nvidia_smi_*`` families) between small per-scrape parts.

Nothing is compressed until a scrape asks for gzip (docs/architecture.md, "Gzip on demand"). The block is then
deflated once (:func:`deflate_block`) and every gzip body of its snapshot reuses those bytes; the per-scrape parts
go through one long-lived deflate stream (:class:`PartDeflater`) that deflates a part only when its text changed.

A gzip body is one gzip member, whatever the client (curl and ``zlib.decompress`` read only a first member):
every piece of its deflate stream is an independent deflate sequence ended by a full flush (byte-aligned, no
back-reference to anything before it), so the pieces splice into one stream under one header, closed by an empty
final block. The trailer's CRC-32 of the whole body is combined from the pieces' CRCs (:meth:`DeflatedBlock.crc_after`),
so a scrape never reads the block's bytes.

A body is served as its parts, never joined per request: every scraper of a snapshot then shares the block's
bytes, and a client that reads slowly pins only the small per-scrape parts.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Sequence

_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, mtime 0, unknown OS
_FINAL_BLOCK = b"\x03\x00"  # an empty final block (fixed Huffman codes): what ends every stream here
_RAW_DEFLATE = -15
_LEVEL = 6
_CRC_POLYNOMIAL = 0xEDB88320  # CRC-32's, bits reflected as zlib's
# From this size a block's CRC is combined with what precedes it (about 20 us in Python, plus 0.1-0.2 ms once per
# block, under 5 % of deflating it) rather than continued over its bytes (zlib: about 70 us per 256 KiB).
COMBINE_FROM_BYTES = 256 * 1024


def _multiply(a: int, b: int) -> int:
    """``a * b`` modulo the CRC-32 polynomial, in zlib's reflected bit order (its ``multmodp``)."""
    product = 0
    bit = 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _CRC_POLYNOMIAL if b & 1 else b >> 1
    return product


@functools.cache
def _x_to_the_2_to_the(k: int) -> int:
    """``x^(2^k)`` modulo the polynomial."""
    return 1 << 30 if k == 0 else _multiply(_x_to_the_2_to_the(k - 1), _x_to_the_2_to_the(k - 1))


def _shift_operator(size: int) -> int:
    """``x^(8 * size)`` modulo the polynomial: multiplying a CRC by it moves the CRC past ``size`` bytes of zeros
    (zlib's ``x2nmodp(size, 3)``)."""
    operator = 1 << 31  # x^0
    k = 3
    while size:
        if size & 1:
            operator = _multiply(_x_to_the_2_to_the(k % 32), operator)
        size >>= 1
        k += 1
    return operator


class DeflatedBlock:
    """A block's deflated bytes (full-flushed, not final) and size, and what gives the CRC-32 of the block preceded
    by other bytes from theirs."""

    __slots__ = ("_crc", "_last", "_shift", "_text", "data", "size")

    def __init__(self, text: bytes, data: bytes) -> None:
        self.data = data
        self.size = len(text)
        self._text = text  # the body's own bytes (no copy), read only when its CRC must be continued
        self._shift: int | None = None
        self._crc = 0
        if self.size >= COMBINE_FROM_BYTES:
            self._shift = _shift_operator(self.size)
            self._crc = zlib.crc32(text)
        self._last = (-1, 0)  # the last answer of crc_after, (crc before, result): the bytes before rarely change

    def crc_after(self, crc: int) -> int:
        """The CRC-32 of some bytes followed by this block, from ``crc``, those bytes' own. The bytes before the
        block (the exporter's connection counters) rarely change, so the last answer is kept; otherwise a small
        block's CRC is continued from ``crc``, and a large one's combined with it as zlib's ``crc32_combine`` does
        (CRC-32 is linear: ``crc`` moved past the block's length, xor the block's own CRC)."""
        if self._last[0] == crc:
            return self._last[1]
        combined = zlib.crc32(self._text, crc) if self._shift is None else _multiply(self._shift, crc) ^ self._crc
        self._last = (crc, combined)
        return combined


def deflate_block(text: bytes) -> DeflatedBlock:
    """A block's gzip ingredients: a new deflate stream, made once per block, on the first scrape that asks."""
    compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, _RAW_DEFLATE)
    return DeflatedBlock(text, compressor.compress(text) + compressor.flush(zlib.Z_FULL_FLUSH))


class PartDeflater:
    """The per-scrape parts' deflate: one stream for an endpoint's life, made on its first gzip scrape; each part is
    deflated again only when its text differs from the last one seen under its name. For the event loop only (the
    stream is shared: one part's ``compress`` and ``flush`` must not interleave with another's)."""

    def __init__(self) -> None:
        self._stream = zlib.compressobj(_LEVEL, zlib.DEFLATED, _RAW_DEFLATE)
        self._last: dict[str, tuple[bytes, bytes]] = {}

    def deflate(self, name: str, text: bytes) -> bytes:
        """``text`` as an independent, full-flushed deflate sequence (empty for no text)."""
        last = self._last.get(name)
        if last is not None and last[0] == text:
            return last[1]
        data = self._stream.compress(text) + self._stream.flush(zlib.Z_FULL_FLUSH) if text else b""
        self._last[name] = (text, data)
        return data

    def gzip_parts(
        self, before: Sequence[tuple[str, bytes]], block: DeflatedBlock, after: Sequence[tuple[str, bytes]]
    ) -> tuple[bytes, ...]:
        """The gzip body of the ``before`` texts, the block and the ``after`` texts, in order, as one gzip member;
        each text is named for :meth:`deflate`."""
        pieces = [_GZIP_HEADER]
        crc = 0
        size = block.size
        for name, text in before:
            pieces.append(self.deflate(name, text))
            crc = zlib.crc32(text, crc)
            size += len(text)
        crc = block.crc_after(crc)
        pieces.append(block.data)
        for name, text in after:
            pieces.append(self.deflate(name, text))
            crc = zlib.crc32(text, crc)
            size += len(text)
        pieces += (_FINAL_BLOCK, struct.pack("<II", crc, size & 0xFFFFFFFF))
        return tuple(pieces)

"""A response body written from shared parts in small chunks, waiting for the client between them.

Handed to the transport in one write, a body the socket does not take stays in the transport's buffer: a
client that reads nothing pins a whole copy of it per connection (200 such clients held 370 MB of 1.9 MB
bodies). Written chunk by chunk with flow control (httpserver/protocol.py waits for the transport to drain between
chunks), a connection holds at most about one chunk plus the transport's high-water mark, and the parts
themselves (the cached block above all) stay shared with every other scrape of the same snapshot: a chunk cut
from one part is a ``memoryview`` of it; only pieces smaller than a chunk are joined into one (a copy of at most
a chunk, which the socket usually takes at once).

A body of at most :data:`ONE_WRITE_BYTES` (a scrape of a few GPUs) is written with its head in one write instead:
one system call, not one per chunk. The kernel's send buffer (httpserver/timeouts.py's ``SEND_BUFFER_BYTES``) takes a
response that small whole even from a client that reads nothing, so what such a client can make the process hold
is at most one write: :data:`ONE_WRITE_BYTES` and a head.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

CHUNK_BYTES = 16 * 1024
ONE_WRITE_BYTES = 64 * 1024  # a body up to this size goes out with its head in one write (a copy of it)


def chunks(parts: Sequence[bytes]) -> Iterator[bytes | memoryview]:
    """``parts`` in order as pieces of :data:`CHUNK_BYTES` (the last may be shorter): a view of one part where a
    piece lies within it, the join of the small ends around part boundaries otherwise."""
    pending: list[memoryview] = []
    size = 0
    for part in parts:
        view = memoryview(part)
        while view:
            take = view[: CHUNK_BYTES - size]
            view = view[len(take) :]
            if not pending and len(take) == CHUNK_BYTES:
                yield take  # a whole chunk inside one part: no copy
                continue
            pending.append(take)
            size += len(take)
            if size == CHUNK_BYTES:
                yield b"".join(pending)
                pending, size = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)

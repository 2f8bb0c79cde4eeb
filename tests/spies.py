"""Spies for tests that count what a function is asked: the real function still answers."""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

import pytest

from async_helpers import WAIT_SECONDS


def record_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Replace ``owner.name`` (a one-argument function) for the test by one that records each argument and then
    calls the real one; returns the list the arguments go to."""
    calls: list[Any] = []
    real = getattr(owner, name)

    def recording(argument: Any) -> Any:
        calls.append(argument)
        return real(argument)

    monkeypatch.setattr(owner, name, recording)
    return calls


@dataclass
class DeflateSpy:
    """Every deflate stream made in the process (``zlib.compressobj``, ``zlib.compress``) and what each was fed."""

    streams: int = 0
    fed: list[bytes] = field(default_factory=list)

    def fed_with(self, marker: bytes) -> int:
        """How many times bytes holding ``marker`` were compressed."""
        return sum(marker in data for data in self.fed)


class _Compressor:
    """A real compressor that reports what it is fed."""

    def __init__(self, real: Any, fed: list[bytes]) -> None:
        self._real = real
        self._fed = fed

    def compress(self, data: bytes) -> bytes:
        self._fed.append(bytes(data))
        return bytes(self._real.compress(data))

    def flush(self, mode: int = zlib.Z_FINISH) -> bytes:
        return bytes(self._real.flush(mode))


def spy_deflate(monkeypatch: pytest.MonkeyPatch, gate: threading.Event | None = None) -> DeflateSpy:
    """Count zlib's deflate streams for the test. With ``gate``, a stream made off the main thread (a body
    compressed in a worker thread) waits for the gate first, so a test can hold a compression in progress."""
    spy = DeflateSpy()
    compressobj, compress = zlib.compressobj, zlib.compress

    def spied_compressobj(*args: Any, **kwargs: Any) -> _Compressor:
        spy.streams += 1
        if gate is not None and threading.current_thread() is not threading.main_thread():
            gate.wait(WAIT_SECONDS)
        return _Compressor(compressobj(*args, **kwargs), spy.fed)

    def spied_compress(data: bytes, *args: Any, **kwargs: Any) -> bytes:
        spy.streams += 1
        spy.fed.append(bytes(data))
        return compress(data, *args, **kwargs)

    monkeypatch.setattr(zlib, "compressobj", spied_compressobj)
    monkeypatch.setattr(zlib, "compress", spied_compress)
    return spy

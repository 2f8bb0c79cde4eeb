"""A spy for tests that count what a function is asked: the real function still answers."""

from __future__ import annotations

from typing import Any

import pytest


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

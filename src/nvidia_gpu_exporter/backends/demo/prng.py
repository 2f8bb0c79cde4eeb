"""The demo's source of random numbers: SplitMix64 (Steele, Lea and Flood, 2014), a seeded, repeatable
generator in a few lines, in place of the standard library's ``random``.

Why not ``random``: it loads ``_random``, ``_bisect`` and ``_sha512`` and its own code into every demo process
(about 0.1 MiB of resident memory, issue 35), for draws a simulation needs neither the period nor the
statistical quality of a Mersenne Twister for. The same seed gives the same sequence on every platform and
Python version, which is what the demo's ``seed`` and ``extras.seed`` promise (docs/demo.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

_MASK = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_UNIT = 1.0 / (1 << 53)  # a draw's top 53 bits, scaled into [0, 1): every double there is a multiple of this

T = TypeVar("T")


class SplitMix64:
    """One seeded stream of 64-bit draws; the seed is any int, taken modulo 2**64."""

    __slots__ = ("_state",)

    def __init__(self, seed: int) -> None:
        self._state = seed & _MASK

    def next64(self) -> int:
        """The next 64-bit unsigned draw."""
        self._state = state = (self._state + _GOLDEN_GAMMA) & _MASK
        state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & _MASK
        return state ^ (state >> 31)

    def random(self) -> float:
        """A float in [0, 1): :meth:`next64` written out, as the simulation draws dozens of these per GPU."""
        self._state = state = (self._state + _GOLDEN_GAMMA) & _MASK
        state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & _MASK
        return ((state ^ (state >> 31)) >> 11) * _UNIT

    def uniform(self, low: float, high: float) -> float:
        """A float between ``low`` and ``high`` (:meth:`random` written out too)."""
        self._state = state = (self._state + _GOLDEN_GAMMA) & _MASK
        state = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        state = ((state ^ (state >> 27)) * 0x94D049BB133111EB) & _MASK
        return low + (high - low) * (((state ^ (state >> 31)) >> 11) * _UNIT)

    def below(self, count: int) -> int:
        """An int in [0, count), by multiply-and-shift (Lemire): a bias under count / 2**64, none a demo shows."""
        if count <= 0:
            raise ValueError(f"nothing to draw from: {count} choices")
        return (self.next64() * count) >> 64

    def randrange(self, start: int, stop: int, step: int = 1) -> int:
        """An int of ``range(start, stop, step)``."""
        return start + step * self.below(len(range(start, stop, step)))

    def randint(self, low: int, high: int) -> int:
        """An int in [low, high], both ends included."""
        return low + self.below(high - low + 1)

    def choice(self, items: Sequence[T]) -> T:
        """One item of a non-empty sequence."""
        return items[self.below(len(items))]

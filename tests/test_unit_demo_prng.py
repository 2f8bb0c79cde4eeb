"""The demo's own random source (backends/demo/prng.py): SplitMix64's published sequence, repeatable per seed,
and every kind of draw within its bounds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nvidia_gpu_exporter.backends.demo.prng import SplitMix64


@pytest.mark.parametrize(
    ("seed", "first"),
    [
        # The reference C code's outputs (Vigna, splitmix64.c) for these seeds.
        pytest.param(0, [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F], id="seed-0"),
        pytest.param(1234567, [0x599ED017FB08FC85, 0x2C73F08458540FA5, 0x883EBCE5A3F27C77], id="seed-1234567"),
        # A negative seed is its 64-bit two's complement, as a C caller's int64 would be; these three are from a
        # separate line-by-line transcription of splitmix64.c, not from a published table.
        pytest.param(-1, [0xE4D971771B652C20, 0xE99FF867DBF682C9, 0x382FF84CB27281E9], id="seed-minus-1"),
    ],
)
def test_the_sequence_is_splitmix64s(seed: int, first: list[int]) -> None:
    rng = SplitMix64(seed)
    assert [rng.next64() for _ in first] == first


def test_the_same_seed_repeats_and_another_differs() -> None:
    one, two, other = SplitMix64(42), SplitMix64(42), SplitMix64(43)
    drawn = [one.random() for _ in range(100)]
    assert drawn == [two.random() for _ in range(100)]
    assert drawn != [other.random() for _ in range(100)]


DRAWS = 2000


@pytest.mark.parametrize(
    ("draw", "allowed"),
    [
        pytest.param(lambda rng: rng.randrange(60, 240, 15), set(range(60, 240, 15)), id="randrange-step"),
        pytest.param(lambda rng: rng.randrange(0, 3), {0, 1, 2}, id="randrange"),
        pytest.param(lambda rng: rng.randint(-2, 2), {-2, -1, 0, 1, 2}, id="randint-both-ends"),
        pytest.param(lambda rng: rng.below(4), {0, 1, 2, 3}, id="below"),
        pytest.param(lambda rng: rng.choice("abc"), {"a", "b", "c"}, id="choice"),
    ],
)
def test_a_discrete_draw_reaches_every_value_and_no_other(
    draw: Callable[[SplitMix64], object], allowed: set[object]
) -> None:
    rng = SplitMix64(7)
    assert {draw(rng) for _ in range(DRAWS)} == allowed


@pytest.mark.parametrize(
    ("draw", "low", "high"),
    [
        pytest.param(lambda rng: rng.random(), 0.0, 1.0, id="random"),
        pytest.param(lambda rng: rng.uniform(0.97, 1.03), 0.97, 1.03, id="uniform"),
        pytest.param(lambda rng: rng.uniform(-0.6, 0.6), -0.6, 0.6, id="uniform-around-zero"),
    ],
)
def test_a_float_draw_stays_in_its_range_and_spreads_over_it(
    draw: Callable[[SplitMix64], float], low: float, high: float
) -> None:
    rng = SplitMix64(11)
    values = [draw(rng) for _ in range(DRAWS)]
    assert all(low <= value < high for value in values)
    width = high - low
    assert min(values) < low + width / 10
    assert max(values) > high - width / 10


@pytest.mark.parametrize("count", [0, -1])
def test_nothing_to_draw_from_is_an_error(count: int) -> None:
    with pytest.raises(ValueError, match="nothing to draw from"):
        SplitMix64(1).below(count)

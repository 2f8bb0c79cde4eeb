"""Go's text rules that differ from Python's: ``strings.ToLower`` maps rune by rune, without context."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter._go.text import go_lower
from nvidia_gpu_exporter.model.uuids import normalize_uuid

LOWER_CASES = [
    ("GPU-DF6E", "gpu-df6e", "ascii"),
    ("\u0391\u03a3", "\u03b1\u03c3", "a final capital sigma lowers to sigma, not final sigma"),
    ("\u03a3\u0391\u03a3 \u03a3", "\u03c3\u03b1\u03c3 \u03c3", "every sigma alike, wherever it stands"),
    ("\u0130X", "ix", "dotted capital I is one rune: i"),
    ("ÄÖÜ", "äöü", "latin letters"),
    ("A\udcffB", "a\ufffdb", "a byte that is not UTF-8 becomes U+FFFD, as Go's strings.Map writes it"),
]


@pytest.mark.parametrize(("text", "lowered"), [c[:2] for c in LOWER_CASES], ids=[c[2] for c in LOWER_CASES])
def test_go_lower_maps_each_rune_on_its_own(text: str, lowered: str) -> None:
    assert go_lower(text) == lowered


def test_uuid_labels_lower_a_final_sigma_as_go_does() -> None:
    assert normalize_uuid("GPU-\u0391\u03a3") == "\u03b1\u03c3"  # alpha, capital sigma

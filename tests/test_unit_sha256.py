"""The interpreter's own SHA-256 (support/sha256.py) gives hashlib's digests: the demo's uuids, pods and seeds
do not change with where the hash comes from."""

from __future__ import annotations

import hashlib

import pytest

from nvidia_gpu_exporter.support.sha256 import sha256


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"nvidia_gpu_exporter/demo/gpu/0", id="a-demo-gpu-key"),
        pytest.param(bytes(range(256)) * 5, id="longer-than-a-block"),
    ],
)
def test_digests_equal_hashlibs(data: bytes) -> None:
    assert (sha256(data).digest(), sha256(data).hexdigest()) == (
        hashlib.sha256(data).digest(),
        hashlib.sha256(data).hexdigest(),
    )

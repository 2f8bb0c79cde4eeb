"""The ``uuid`` and ``mig_uuid`` label forms that dashboards and alerts join on."""

from __future__ import annotations

from nvidia_gpu_exporter._go.text import go_lower, go_trim_space


def _strip_prefix(raw: str, prefix: str) -> str:
    text = go_lower(go_trim_space(raw))
    return text[len(prefix) :] if text.startswith(prefix) else text


def normalize_uuid(raw: str) -> str:
    """GPU uuid label: trimmed, lowercased, one leading ``gpu-`` removed (``GPU-DF6E...`` -> ``df6e...``)."""
    return _strip_prefix(raw, "gpu-")


def normalize_mig_uuid(raw: str) -> str:
    """MIG device uuid label: trimmed, lowercased, one leading ``mig-`` removed."""
    return _strip_prefix(raw, "mig-")

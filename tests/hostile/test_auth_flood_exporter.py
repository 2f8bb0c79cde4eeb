"""The issue's bar for a wrong-password flood, on the real exporter (docs/security.md, "Basic auth").

300 clients sending wrong passwords as fast as they are answered, for 8 s, against cost-10 hashes: every
scrape with Prometheus' credential succeeds within a scrape timeout, another user's first login gets in,
the flood is mostly turned away without bcrypt, and the exporter's peak RSS stays under 128 MiB. Latencies
are printed (BENCHMARKS.md has a longer run); they are not asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import StartExporter
from hostile.auth_flood import flood, peak_rss_mib, web_config

MAX_RSS_MIB = 128


@pytest.mark.slow
def test_a_wrong_password_flood_starves_no_scrape_and_stays_small(tmp_path: Path, exporter: StartExporter) -> None:
    handle = exporter("--collect.backend=demo", "--collect.interval=15s", f"--web.config.file={web_config(tmp_path)}")
    result = flood(handle.url, clients=300, seconds=8.0)
    rss = peak_rss_mib(handle.process.pid)
    print(f"flood result: {result}, peak RSS {rss:.1f} MiB")
    assert set(result.statuses) == {200}
    assert [status for status, _ in result.first_login] == [200]
    answers = result.flood_answers
    # 300 connections exceed --web.max-connections (256): the cap closes the idlest (no answer, 0) or says 503.
    assert set(answers) <= {0, 401, 429, 503}
    assert answers.get(429, 0) > answers.get(401, 0)  # turned away at once, not queued behind bcrypt
    assert rss < MAX_RSS_MIB

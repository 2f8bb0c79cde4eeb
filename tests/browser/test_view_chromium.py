"""The live view in a real browser: Debian's Chromium, headless and kept off the network, driven by Playwright.

Against the demo backend: the page renders the GPUs, its values update without a reload, a GPU going hot
shows, nothing is fetched from outside the exporter, the console stays free of errors, and the page fits a
phone's width. Screenshots go to ``$CI_ARTIFACTS/screenshots`` (``build/screenshots`` without it).

Run by ``.ci/steps/80-browser.sh``, which installs Chromium and Playwright; elsewhere it skips, saying which
is missing. No browser is downloaded: Playwright drives Debian's ``/usr/bin/chromium-headless-shell`` (or
``/usr/bin/chromium``, or ``$CHROMIUM``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import REPO, Exporter, start_exporter

# Debian's Chromium: its headless shell (a smaller package, no GTK) or the full browser, or $CHROMIUM.
CANDIDATES = (Path("/usr/bin/chromium-headless-shell"), Path("/usr/bin/chromium"))
CHROMIUM = Path(os.environ.get("CHROMIUM") or next((path for path in CANDIDATES if path.is_file()), CANDIDATES[0]))
playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed (.ci/steps/80-browser.sh installs it)"
)
if not CHROMIUM.is_file() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/steps/80-browser.sh does)", allow_module_level=True
    )

# Keep the browser off the network: every host but loopback resolves to nothing, any proxy-able request goes
# to a closed port, and the background services (updates, sync, metrics, safe browsing) stay off.
OFFLINE_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--no-pings",
    "--safebrowsing-disable-auto-update",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
]
WAIT_MS = 20_000  # every wait on the page is bounded by this
IDLE = "gpus: 2\nstate: idle\nextras:\n  seed: 7\n"
HOT = IDLE + "overrides:\n  temperature.gpu: 95\n"


def _artifacts() -> Path:
    base = os.environ.get("CI_ARTIFACTS")
    directory = (Path(base) if base else REPO / "build") / "screenshots"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Exporter, Path]]:
    """One demo exporter for the module, collecting every second from a config the test can edit."""
    config = tmp_path_factory.mktemp("browser") / "demo.yml"
    config.write_text(IDLE)
    handle = start_exporter(
        ["--collect.backend=demo", f"--demo-config={config}", "--collect.compute-apps", "--collect.interval=1s"]
    )
    yield handle, config
    handle.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=OFFLINE_ARGS)
        yield chromium
        chromium.close()


def test_without_javascript_the_page_is_a_static_table(demo: tuple[Exporter, Path], browser: Any) -> None:
    handle, _ = demo
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:  # bounded: until the first background collection is in
        page.goto(handle.url + "/", timeout=WAIT_MS)
        if page.get_by_role("heading", name="GPU 0: NVIDIA H200").count():
            break
        page.wait_for_timeout(200)
    assert page.get_by_role("rowheader", name="Temperature").count() == 2
    assert page.get_by_role("table").count() >= 2
    context.close()


def test_the_live_view_renders_updates_and_shows_a_hot_gpu(demo: tuple[Exporter, Path], browser: Any) -> None:
    handle, config = demo
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    page = context.new_page()
    errors: list[str] = []
    outside: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))

    def only_the_exporter(route: Any) -> None:
        if route.request.url.startswith(handle.url + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_exporter)
    page.goto(handle.url + "/", wait_until="load", timeout=WAIT_MS)
    page.get_by_role("heading", name="GPU 0: NVIDIA H200").wait_for(timeout=WAIT_MS)
    page.get_by_role("heading", name="GPU 1: NVIDIA H200").wait_for(timeout=WAIT_MS)
    assert page.locator("#gpus").inner_text().count("HOT") == 0

    # Values update without a reload: the script redraws from a newer collection.
    page.wait_for_selector("#view[data-sequence]", timeout=WAIT_MS)
    first = int(page.get_attribute("#view", "data-sequence") or 0)
    page.wait_for_function(
        f"Number(document.getElementById('view').getAttribute('data-sequence')) > {first}", timeout=WAIT_MS
    )
    # Each GPU's verdict heads its card, drawn by the script too (the demo's default scenario is healthy).
    assert page.locator("#gpus p.verdict").all_inner_texts() == ["Health: ok", "Health: ok"]

    # A GPU going hot shows: the demo re-reads its config every collection.
    config.write_text(HOT)
    page.locator("td.hot").first.wait_for(timeout=WAIT_MS)
    assert "95 °C HOT" in page.locator("#gpus").inner_text()
    page.screenshot(path=str(_artifacts() / "live-view-desktop.png"), full_page=True)

    # Usable on a phone: one column, nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(300)  # let the layout settle
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    page.screenshot(path=str(_artifacts() / "live-view-phone.png"), full_page=True)
    context.close()

    assert overflow <= 0
    assert outside == []
    assert errors == []


# The demo's verdict scenarios (docs/demo.md, "Faults on request"): GPU 0 failing, GPU 1 degraded.
FAULTY = IDLE + "  scenarios:\n    - {name: remapped-rows-failure, gpu: 0}\n    - {name: sustained-power-cap, gpu: 1}\n"


def test_a_failing_and_a_degraded_verdict_head_their_gpus_cards(demo: tuple[Exporter, Path], browser: Any) -> None:
    handle, config = demo
    config.write_text(FAULTY)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    page = context.new_page()
    page.goto(handle.url + "/", wait_until="load", timeout=WAIT_MS)
    page.locator("#gpus section.gpu p.verdict.failed").wait_for(timeout=WAIT_MS)
    page.locator("#gpus section.gpu p.verdict.degraded").wait_for(timeout=WAIT_MS)
    # What follows each card's heading: the verdict with its action, then the reasons with their evidence.
    heads = page.evaluate(
        """[...document.querySelectorAll('#gpus section.gpu')].map(card => {
             const verdict = card.querySelector('h3').nextElementSibling;
             const colour = getComputedStyle(verdict).color;
             return [verdict.className, verdict.innerText, verdict.nextElementSibling.innerText, colour];
           })"""
    )
    page.screenshot(path=str(_artifacts() / "live-view-verdicts.png"), full_page=True)
    context.close()
    assert heads[0][3] != heads[1][3]  # degraded is told from failing by its colour too
    assert [(classes, text) for classes, text, _, _ in heads] == [
        ("verdict failed", "Health: FAILING: Drain the GPU and replace the card (RMA)"),
        ("verdict degraded", "Health: DEGRADED: Check the node's power supply and the GPU's power limit and cabling"),
    ]
    assert heads[0][2].startswith("memory: remapped_rows_failure (failing), remapped_rows.failure = Yes, since ")
    assert heads[1][2].startswith(
        "power: sustained_power_cap (degraded), clocks_event_reasons.sw_power_cap = Active, since "
    )


def test_every_gpu_scenario_shows_its_reason_state_and_action_at_the_top_of_its_card(
    browser: Any, tmp_path: Path
) -> None:
    """Each verdict reason's demo scenario on a GPU of its own (as tests/test_verdict_scenarios.py places them): the
    card of that GPU opens with the reason's state and action, then the reason itself."""
    from nvidia_gpu_exporter.backends.demo.extras import REASON_SCENARIOS
    from nvidia_gpu_exporter.model.verdicts import REASONS
    from test_verdict_scenarios import HEALTHY_INDEX, PLACED, config

    path = tmp_path / "scenarios.yml"
    path.write_text(config())
    handle = start_exporter(["--collect.backend=demo", f"--demo-config={path}", "--collect.interval=1s"])
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
        page = context.new_page()
        page.goto(handle.url + "/", wait_until="load", timeout=WAIT_MS)
        page.wait_for_function(
            f"document.querySelectorAll('#gpus section.gpu p.verdict:not(.ok)').length >= {len(PLACED)}",
            timeout=WAIT_MS,
        )
        cards = page.evaluate(
            """Object.fromEntries([...document.querySelectorAll('#gpus section.gpu')].map(card => {
                 const verdict = card.querySelector('h3').nextElementSibling;
                 const reasons = verdict.nextElementSibling;
                 return [card.getAttribute('aria-label'),
                         [verdict.className, verdict.innerText, reasons ? reasons.innerText : '']];
               }))"""
        )
        context.close()
    finally:
        handle.stop()
    expected, seen = {}, {}
    for reason in REASONS:
        scenario = REASON_SCENARIOS[reason.name]
        if scenario not in PLACED:
            continue  # a node's fault (a GPU missing from the driver, a stuck nvidia-smi): no card of its own
        card = f"GPU {PLACED.index(scenario)}"
        state = reason.state.label
        expected[card] = (
            "verdict " + ("failed" if state == "failing" else state),
            f"Health: {state.upper()}: {reason.action.text}",
            f"{reason.subsystem.value}: {reason.name} ({state}), ",
        )
        classes, verdict, reasons = cards[card]
        seen[card] = (classes, verdict, reasons[: len(expected[card][2])])
    assert seen == expected
    assert cards[f"GPU {HEALTHY_INDEX}"][:2] == ["verdict ok", "Health: ok"]

"""``--web.max-connections`` at the cap, without a server (web/connections.py): where each idle connection stands
and which one makes room for a new connection. Issue 13: a connection that never got a response but whose request
the kernel holds unread (``ASKING``) leaves after one just opened (``OPENING``) and before Prometheus' keep-alive
connection between two scrapes (``ANSWERED_SUCCESS``); the hostile tests (tests/hostile/test_web_connections.py)
show it through a real server, these pin the ranking itself."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nvidia_gpu_exporter.exposition.selfmetrics import ConnectionStats
from nvidia_gpu_exporter.web.connections import (
    ANSWERED_ERROR,
    ANSWERED_SUCCESS,
    ASKING,
    OPENING,
    STALE,
    Connections,
)

NOW = 1000.0
GRACE = 2.0


@dataclass(eq=False)  # registered by identity, as the real protocols are
class FakeConnection:
    """A connection as the registry sees it: idle since ``idle`` (None: busy), its latest status, unread bytes."""

    name: str
    idle: float | None = NOW
    status: int | None = None
    waiting: bool = False
    evicted: bool = False

    def idle_since(self) -> float | None:
        return self.idle

    def last_status(self) -> int | None:
        return self.status

    def request_waiting(self) -> bool:
        return self.waiting

    def evict(self) -> None:
        self.evicted = True


def registry(limit: int) -> Connections:
    return Connections(limit, ConnectionStats(), grace=GRACE, clock=lambda: NOW)


def idle_for(seconds: float, *, status: int | None = None, waiting: bool = False, name: str = "") -> FakeConnection:
    return FakeConnection(name, NOW - seconds, status, waiting)


@pytest.mark.parametrize(
    ("connection", "standing"),
    [
        pytest.param(idle_for(GRACE + 1), STALE, id="never-answered-and-silent-past-the-grace-is-stale"),
        pytest.param(idle_for(GRACE), STALE, id="silent-for-exactly-the-grace-is-stale"),
        pytest.param(idle_for(1, status=401), ANSWERED_ERROR, id="latest-response-401-is-an-error"),
        pytest.param(idle_for(1, status=404), ANSWERED_ERROR, id="latest-response-404-is-an-error"),
        pytest.param(idle_for(1, status=400), ANSWERED_ERROR, id="400-is-the-first-error-status"),
        pytest.param(idle_for(1, status=503), ANSWERED_ERROR, id="latest-response-503-is-an-error"),
        pytest.param(idle_for(1, status=401, waiting=True), ANSWERED_ERROR, id="an-error-answered-next-request-waits"),
        pytest.param(idle_for(0), OPENING, id="just-opened-is-opening"),
        pytest.param(idle_for(GRACE - 0.1), OPENING, id="silent-within-the-grace-is-opening"),
        pytest.param(idle_for(0, waiting=True), ASKING, id="never-answered-request-unread-is-asking"),
        pytest.param(idle_for(GRACE + 60, waiting=True), ASKING, id="an-unread-request-is-asking-past-the-grace"),
        pytest.param(idle_for(60, status=200), ANSWERED_SUCCESS, id="latest-response-200-is-a-success"),
        pytest.param(idle_for(60, status=399), ANSWERED_SUCCESS, id="399-is-the-last-success-status"),
        pytest.param(
            idle_for(1, status=200, waiting=True), ANSWERED_SUCCESS, id="a-success-answered-next-request-waits"
        ),
    ],
)
def test_an_idle_connection_stands_by_its_latest_response_or_its_first_request(
    connection: FakeConnection, standing: int
) -> None:
    assert connection.idle is not None
    assert registry(1).standing(connection, connection.idle, NOW) == standing


# Each pair: the connection that must leave first, idle the shorter time, and the one that stays, idle the longer
# (so that the tie-break among equals, the idlest first, would pick the wrong one if the standings were equal).
@pytest.mark.parametrize(
    ("leaves", "stays"),
    [
        pytest.param(idle_for(GRACE + 1), idle_for(GRACE + 60, status=401), id="stale-before-error-answered"),
        pytest.param(idle_for(0.5, status=429), idle_for(GRACE - 0.5), id="error-answered-before-just-opened"),
        pytest.param(idle_for(0), idle_for(1, waiting=True), id="just-opened-before-asking"),
        pytest.param(idle_for(0), idle_for(GRACE + 60, waiting=True), id="just-opened-before-asking-past-the-grace"),
        pytest.param(idle_for(30, status=401), idle_for(GRACE + 60, waiting=True), id="error-answered-before-asking"),
        pytest.param(idle_for(0, waiting=True), idle_for(60, status=200), id="asking-before-success-answered"),
    ],
)
def test_at_the_cap_the_lower_standing_makes_room(leaves: FakeConnection, stays: FakeConnection) -> None:
    connections = registry(2)
    assert connections.admit(stays)
    assert connections.admit(leaves)
    assert connections.admit(FakeConnection("new", idle=None))
    assert (leaves.evicted, stays.evicted) == (True, False)


@pytest.mark.parametrize(
    ("status", "waiting", "idle"),
    [
        pytest.param(None, False, GRACE + 1, id="stale"),
        pytest.param(401, False, 1.0, id="error-answered"),
        pytest.param(None, False, 0.5, id="just-opened"),
        pytest.param(None, True, 0.5, id="asking"),
        pytest.param(200, False, 1.0, id="success-answered"),
    ],
)
def test_among_equals_the_idlest_makes_room(status: int | None, waiting: bool, idle: float) -> None:
    idlest = idle_for(idle + 0.5, status=status, waiting=waiting)
    other = idle_for(idle, status=status, waiting=waiting)
    connections = registry(2)
    assert connections.admit(other)
    assert connections.admit(idlest)
    assert connections.admit(FakeConnection("new", idle=None))
    assert (idlest.evicted, other.evicted) == (True, False)


def test_connections_leave_in_the_order_of_their_standing() -> None:
    """One connection of each standing; busy newcomers make room one by one, in the order of the standings, not of
    the idle times (the success-answered one, the idlest, leaves last)."""
    standings = {
        "stale": idle_for(GRACE + 1),
        "error-answered": idle_for(GRACE + 10, status=401),
        "just-opened": idle_for(GRACE - 1),
        "asking": idle_for(GRACE + 20, waiting=True),
        "success-answered": idle_for(GRACE + 30, status=200),
    }
    connections = registry(len(standings))
    for connection in reversed(standings.values()):
        assert connections.admit(connection)
    order = []
    for count in range(len(standings)):
        assert connections.admit(FakeConnection(f"new-{count}", idle=None))
        (evicted,) = [name for name, connection in standings.items() if connection.evicted and name not in order]
        order.append(evicted)
    assert order == list(standings)
    assert connections.stats.closed["evicted"] == len(standings)
    assert connections.stats.open == len(connections) == len(standings)


def test_when_every_connection_is_busy_the_new_one_is_refused() -> None:
    busy = FakeConnection("busy", idle=None)
    connections = registry(1)
    assert connections.admit(busy)
    assert not connections.admit(idle_for(0))
    assert not busy.evicted
    assert connections.stats.closed == {"evicted": 0, "header_timeout": 0, "refused": 1}

"""``--web.max-connections`` at the cap, without a server (httpserver/connections.py): where each idle connection stands
and which one makes room for a new connection. Issue 13: a connection that never got a response but whose request
the kernel holds unread (``ASKING``) leaves after one just opened (``OPENING``) and before Prometheus' keep-alive
connection between two scrapes (``ANSWERED_SUCCESS``); the hostile tests (tests/hostile/test_web_connections.py)
show it through a real server, these pin the ranking itself."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nvidia_gpu_exporter.httpserver.connections import (
    ANSWERED_ERROR,
    ANSWERED_SUCCESS,
    ASKING,
    EVICTION_BATCH,
    MAX_HANDSHAKES,
    OPENING,
    RANKING_REUSE_SECONDS,
    STALE,
    STALLED_BODY,
    STALLED_HANDSHAKE,
    STALLED_HEAD,
    Connections,
)
from nvidia_gpu_exporter.httpserver.stats import ConnectionStats

NOW = 1000.0
GRACE = 2.0


@dataclass(eq=False)  # registered by identity, as the real protocols are
class FakeConnection:
    """A connection as the registry sees it: idle since ``idle`` (None: busy), its latest status, unread bytes, and
    bytes of a response still in the kernel; ``kernel_asked`` counts the questions to the kernel (syscalls)."""

    name: str
    idle: float | None = NOW
    status: int | None = None
    waiting: bool = False
    unsent: bool = False
    evicted: bool = False
    kernel_asked: int = 0
    stall: int | None = None
    ranked: int = 0  # how often the registry asked where it stands

    def idle_since(self) -> float | None:
        self.ranked += 1
        return self.idle

    def stalled(self) -> int | None:
        return self.stall

    def last_status(self) -> int | None:
        return self.status

    def request_waiting(self) -> bool:
        self.kernel_asked += 1
        return self.waiting

    def unsent_in_kernel(self) -> bool:
        self.kernel_asked += 1
        return self.unsent

    def evict(self) -> None:
        self.evicted = True


def registry(limit: int) -> Connections:
    return Connections(limit, ConnectionStats(), grace=GRACE, clock=lambda: NOW)


def idle_for(
    seconds: float,
    *,
    status: int | None = None,
    waiting: bool = False,
    unsent: bool = False,
    name: str = "",
    stall: int | None = None,
) -> FakeConnection:
    return FakeConnection(name, NOW - seconds, status, waiting, unsent, stall=stall)


@pytest.mark.parametrize(
    ("connection", "standing"),
    [
        pytest.param(idle_for(GRACE, stall=STALLED_HEAD), STALLED_HEAD, id="a-head-begun-the-grace-ago-is-stalled"),
        pytest.param(
            idle_for(GRACE, stall=STALLED_HEAD, status=200), STALLED_HEAD, id="a-stalled-head-after-a-success"
        ),
        pytest.param(idle_for(GRACE + 5, stall=STALLED_BODY, status=200), STALLED_BODY, id="a-body-owed-after-a-200"),
        pytest.param(idle_for(GRACE + 5, stall=STALLED_HANDSHAKE), STALLED_HANDSHAKE, id="a-handshake-stalled"),
        pytest.param(idle_for(GRACE - 0.1, stall=STALLED_HEAD), OPENING, id="a-head-begun-within-the-grace-is-opening"),
        pytest.param(idle_for(0, stall=STALLED_HANDSHAKE), OPENING, id="a-handshake-just-begun-is-opening"),
        pytest.param(
            idle_for(GRACE + 5, stall=STALLED_HEAD, waiting=True), ASKING, id="more-of-a-head-unread-is-asking"
        ),
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
        pytest.param(
            idle_for(GRACE, stall=STALLED_HEAD), idle_for(GRACE + 60, stall=STALLED_BODY), id="head-before-body"
        ),
        pytest.param(
            idle_for(GRACE, stall=STALLED_BODY),
            idle_for(GRACE + 60, stall=STALLED_HANDSHAKE),
            id="body-before-handshake",
        ),
        pytest.param(idle_for(GRACE, stall=STALLED_HANDSHAKE), idle_for(GRACE + 60), id="handshake-before-stale"),
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
    """One more connection of a standing than a batch, each idle a little longer than the one before: those that
    leave are the idlest (one of most standings, a batch of stale or error-answered ones), the least idle stays."""
    equals = [idle_for(idle + number / 100, status=status, waiting=waiting) for number in range(EVICTION_BATCH + 1)]
    connections = registry(len(equals))
    for connection in equals:
        assert connections.admit(connection)
    assert connections.admit(FakeConnection("new", idle=None))
    evicted = [connection.evicted for connection in reversed(equals)]  # the idlest first
    batched = (status is None and not waiting and idle > GRACE) or status == 401  # stale or error-answered
    count = EVICTION_BATCH if batched else 1
    assert evicted == [True] * count + [False] * (len(equals) - count)


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
    assert connections.stats.closed == {"body_timeout": 0, "evicted": 0, "header_timeout": 0, "refused": 1}


def test_a_connection_whose_response_the_kernel_still_holds_is_busy() -> None:
    """Idle as far as the process knows (its buffer empty), but its client has not taken the response from the
    kernel: it is not evicted, the next idle one is, even of a higher standing."""
    unsent = idle_for(GRACE + 60, unsent=True)
    success = idle_for(1, status=200)
    connections = registry(2)
    assert connections.admit(unsent)
    assert connections.admit(success)
    assert connections.admit(FakeConnection("new", idle=None))
    assert (unsent.evicted, success.evicted) == (False, True)


def test_a_full_cap_asks_the_kernel_about_a_few_candidates_not_every_connection() -> None:
    """The ranking is by what the process knows; the kernel (a syscall each) is asked only about the connections
    that would leave. Asking about each of 256 connections per new one was most of the event loop's time in a
    wrong-password flood over the cap (BENCHMARKS.md)."""
    connections = registry(256)
    flood = [idle_for(1 + number / 1000, status=401) for number in range(256)]
    for connection in flood:
        assert connections.admit(connection)
    assert connections.admit(FakeConnection("new", idle=None))
    assert sum(connection.kernel_asked for connection in flood) <= 2 * EVICTION_BATCH


def test_connections_answered_an_error_leave_in_a_batch_those_answered_a_success_one_by_one() -> None:
    """A flood over the cap reconnects as fast as its connections are closed: making room for the next ones
    with the same ranking pays one ranking per batch. A success-answered connection (Prometheus') is never
    closed for room not needed yet."""
    connections = registry(EVICTION_BATCH + 4)
    errors = [idle_for(10 + number, status=429) for number in range(EVICTION_BATCH + 2)]
    successes = [idle_for(100 + number, status=200) for number in range(2)]
    for connection in [*errors, *successes]:
        assert connections.admit(connection)
    assert connections.admit(FakeConnection("new", idle=None))
    assert (
        sorted(connection.idle or 0 for connection in errors if connection.evicted)
        == sorted(connection.idle or 0 for connection in errors)[:EVICTION_BATCH]
    )
    assert not any(connection.evicted for connection in successes)
    assert connections.stats.closed["evicted"] == EVICTION_BATCH
    assert len(connections) == 5
    only_successes = registry(2)
    for connection in (successes := [idle_for(100, status=200), idle_for(50, status=200)]):
        assert only_successes.admit(connection)
    assert only_successes.admit(FakeConnection("new", idle=None))
    assert [connection.evicted for connection in successes] == [True, False]


@pytest.mark.parametrize(
    ("stalled_for", "oldest_leaves"),
    [
        pytest.param(GRACE, True, id="past-the-grace-the-oldest-handshake-leaves"),
        pytest.param(GRACE - 0.5, False, id="within-the-grace-a-slow-client-keeps-its-handshake"),
    ],
)
def test_past_the_handshake_bound_the_oldest_stalled_handshake_makes_room(
    stalled_for: float, oldest_leaves: bool
) -> None:
    connections = registry(0)  # no cap: the handshake bound holds on its own
    handshakes = [idle_for(stalled_for, stall=STALLED_HANDSHAKE, name=str(n)) for n in range(MAX_HANDSHAKES)]
    for handshake in handshakes:
        assert connections.admit_handshake(handshake)
    newcomer = idle_for(0, stall=STALLED_HANDSHAKE, name="new")
    assert connections.admit_handshake(newcomer)
    assert [handshake.evicted for handshake in handshakes[:2]] == [oldest_leaves, False]
    assert len(connections) == MAX_HANDSHAKES + (0 if oldest_leaves else 1)


def test_a_finished_handshake_no_longer_counts_against_the_handshake_bound() -> None:
    connections = registry(0)
    done = idle_for(GRACE + 5, stall=None, name="done")
    assert connections.admit_handshake(done)
    connections.handshake_done(done)
    for number in range(MAX_HANDSHAKES):
        assert connections.admit_handshake(idle_for(GRACE + 5, stall=STALLED_HANDSHAKE, name=str(number)))
    assert not done.evicted


def test_a_burst_of_new_connections_at_the_cap_ranks_the_open_ones_once() -> None:
    """A flood reconnects as fast as its connections leave, a batch of accepts at a time: ranking every open
    connection again for each newcomer was most of the event loop's time in a flood of stalled heads (each one
    within the grace, so leaving one by one: BENCHMARKS.md, "Stalled connections"). The ranking is reused by the
    admits that follow it, each candidate checked again as it comes up."""
    connections = registry(256)
    flood = [idle_for(number / 1000, stall=STALLED_HEAD) for number in range(256)]  # all within the grace
    for connection in flood:
        assert connections.admit(connection)
    for number in range(32):
        assert connections.admit(FakeConnection(f"new-{number}", idle=None))
    assert sum(connection.evicted for connection in flood) == 32
    assert sum(connection.ranked for connection in flood) <= len(flood) + 2 * 32


def test_a_connection_busy_since_the_ranking_is_not_the_one_to_leave() -> None:
    oldest, busy_later, newest = (idle_for(seconds, name=str(seconds)) for seconds in (1.5, 1.0, 0.5))
    connections = registry(3)
    for connection in (oldest, busy_later, newest):
        assert connections.admit(connection)
    assert connections.admit(FakeConnection("new-1", idle=None))
    busy_later.idle = None  # a request came in after the ranking
    assert connections.admit(FakeConnection("new-2", idle=None))
    assert (oldest.evicted, busy_later.evicted, newest.evicted) == (True, False, True)


def test_a_connection_admitted_since_the_ranking_is_ranked_with_the_others() -> None:
    """A newcomer that stands lower than what the ranking holds leaves first: Prometheus' keep-alive connection
    (answered a success) is not taken for the room a stale newcomer can give."""
    prometheus, opened = idle_for(30, status=200, name="prometheus"), idle_for(1, name="opened")
    connections = registry(2)
    for connection in (prometheus, opened):
        assert connections.admit(connection)
    stale_newcomer = idle_for(GRACE + 1, name="stale")
    assert connections.admit(stale_newcomer)  # ranked here: "opened" leaves
    assert connections.admit(FakeConnection("new", idle=None))
    assert (opened.evicted, stale_newcomer.evicted, prometheus.evicted) == (True, True, False)


def test_a_ranking_older_than_its_reuse_window_is_made_again() -> None:
    """A standing moves with time (the grace runs out): a ranking serves only the admits right after it."""
    clock = [NOW]
    connections = Connections(4, ConnectionStats(), grace=GRACE, clock=lambda: clock[0])
    opened = [idle_for(1 + number / 10) for number in range(4)]
    for connection in opened:
        assert connections.admit(connection)
    assert connections.admit(FakeConnection("new-1", idle=None))
    clock[0] += RANKING_REUSE_SECONDS + 0.01
    assert connections.admit(FakeConnection("new-2", idle=None))
    assert [connection.ranked for connection in opened if not connection.evicted] == [2, 2]


# At the cap, a new connection that has shown only the start of a request (listener.py closes it before a protocol
# is made) leaves in place of an open one only when nothing open stands below one just opened: a flood reconnecting
# over the cap pays no transport per connection, and nothing lower is kept in its place.
@pytest.mark.parametrize(
    ("open_ones", "leaves"),
    [
        pytest.param([idle_for(0.5, stall=STALLED_HEAD)] * 2, True, id="every-one-a-head-begun-within-the-grace"),
        pytest.param([idle_for(0.5, stall=STALLED_HANDSHAKE), idle_for(0)], True, id="young-handshakes-and-silent"),
        pytest.param([idle_for(60, status=200), idle_for(0.1, waiting=True)], True, id="answered-and-asking"),
        pytest.param([idle_for(0.5), idle_for(GRACE, stall=STALLED_HEAD)], False, id="a-head-stalled-past-the-grace"),
        pytest.param([idle_for(0.5), idle_for(GRACE + 1)], False, id="one-silent-past-the-grace"),
        pytest.param([idle_for(0.5), idle_for(1, status=401)], False, id="one-error-answered"),
        pytest.param([FakeConnection("busy", None)] * 2, False, id="every-one-busy-the-newcomer-gets-503"),
        pytest.param([idle_for(0.5)], False, id="below-the-cap"),
    ],
)
def test_a_stalled_newcomer_at_the_cap_leaves_only_when_nothing_stands_below_one_just_opened(
    open_ones: list[FakeConnection], leaves: bool
) -> None:
    connections = registry(2)
    for template in open_ones:
        connections.admit(
            FakeConnection(template.name, template.idle, template.status, template.waiting, stall=template.stall)
        )
    assert connections.stalled_newcomer_leaves() is leaves
    assert len(connections) == len(open_ones)  # nobody was made to leave


def test_an_entry_left_since_the_ranking_does_not_decide_for_a_stalled_newcomer() -> None:
    connections = registry(3)
    stalled = idle_for(GRACE, stall=STALLED_HEAD)
    for connection in (stalled, idle_for(0.5, stall=STALLED_HEAD), idle_for(0.5, stall=STALLED_HEAD)):
        connections.admit(connection)
    assert not connections.stalled_newcomer_leaves()  # ranked: the stalled head is below one just opened
    connections.release(stalled)  # its entry stays in the ranking, which serves the admits that follow
    connections.admit(idle_for(0.1, stall=STALLED_HEAD))
    assert connections.stalled_newcomer_leaves()

"""The open connections of every listener, and ``--web.max-connections``: who makes room when it is reached.

Every open connection costs a file descriptor and memory, and the process has only so many descriptors
(systemd's default soft limit is 1,024): without a cap one client could open them all, and every later ``accept()``
would fail. Every connection counts from the moment it is accepted, a TLS one while its handshake is still under
way. At the cap a new connection takes the place of one that owes nothing (no request being answered, nothing left
to send), so a flood of stalled or idle connections cannot lock Prometheus out; when every connection is busy the
new one is answered ``503`` and closed. The connection that leaves is, in this order: one stalled in a request head
(begun :data:`NEW_CONNECTION_GRACE_SECONDS` ago or more and not complete), one stalled in a request body, one stalled
in its TLS handshake; one that never got a response and sent nothing for the grace (opened and left); one whose
latest response was an error (a 401, a 429, a 404: a flood of wrong passwords); one just opened, or with a head or
handshake begun within the grace; one whose request the kernel holds unread (accepted in the same batch as a
flood's connections, its bytes not read yet); and only then one whose latest response was a success (Prometheus'
keep-alive connection between two scrapes). Among equals, the one idle (or stalled) the longest; but a new
connection that has sent only part of a request by its accept leaves itself, before anything is made for it, when
nothing open stands below one just opened (:meth:`Connections.stalled_newcomer_leaves`, listener.py).

A connection of a standing up to error-answered leaves with up to :data:`EVICTION_BATCH` - 1 others of its
standing: a flood over the cap reconnects as fast as its connections close, and the ranking (a pass over every open
connection) is then paid once per batch instead of once per connection. Those of a higher standing leave one at a
time, so the ranking is kept for the admits that follow within :data:`RANKING_REUSE_SECONDS` (a flood's accepts come
in batches): each candidate is checked again as it comes up (still open, nothing new shown since), and connections
admitted since are ranked in. The ranking is by what the process knows; the kernel is asked (a syscall each: unsent
response bytes, an unread request) only about the connections about to leave.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import Protocol

from nvidia_gpu_exporter.httpserver.stats import ConnectionStats

log = logging.getLogger(__name__)

ACCEPT_BATCH = 16  # connections accepted per event-loop turn, at most (listener.py)
# Descriptors kept free beyond the cap: connections accepted and not yet admitted or closed (a connection reaches
# the cap's check two loop iterations after its accept, so about three batches are in flight in a flood), plus
# nvidia-smi's pipes, the kernel log, listeners and the loop.
FD_RESERVE = 3 * ACCEPT_BATCH + 64
# How long a connection that never got a response counts as a client about to send its request.
NEW_CONNECTION_GRACE_SECONDS = 2.0
# A connection's standing at the cap (see the module docstring); the lowest leaves first.
STALLED_HEAD, STALLED_BODY, STALLED_HANDSHAKE, STALE, ANSWERED_ERROR, OPENING, ASKING, ANSWERED_SUCCESS = range(8)
# TLS handshakes under way at once, whatever the cap: one OpenSSL has begun holds about 42 KiB of its state (Go
# 45-81 KiB measured here; one whose first record is not whole yet, about 3 KiB: tlsbuffer.py), and a real one ends in
# milliseconds, so past this the oldest one under way for longer than the grace (a client on a slow link keeps it)
# leaves for a new one.
MAX_HANDSHAKES = 64
# How many connections of a standing up to ANSWERED_ERROR one new connection at the cap may make leave, at most.
EVICTION_BATCH = 16
# How long a ranking of the open connections serves the admits at the cap that follow it. A ranking pass per admit
# was most of the event loop's time in a flood of stalled heads (BENCHMARKS.md, "Stalled connections"); a standing
# moves with time only when the grace runs out, so one this recent differs from a fresh one by milliseconds.
RANKING_REUSE_SECONDS = 0.25

Ranked = tuple[int, float, int, bool, "Connection"]  # standing, idle since, a serial (ties), checked with the kernel


def fit_to_fd_limit(limit: int, soft_limit: int | None) -> int:
    """The cap actually applied: ``limit``, lowered (with a warning) to what the open-file limit leaves room for."""
    if limit <= 0 or soft_limit is None or soft_limit <= 0:
        return limit
    room = max(soft_limit - FD_RESERVE, 1)
    if limit > room:
        log.warning(
            "--web.max-connections exceeds the open-file limit: capping connections lower",
            extra={"max_connections": limit, "open_file_limit": soft_limit, "applied": room},
        )
        return room
    return limit


def open_file_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None where there is none (Windows) or it is unlimited."""
    try:
        import resource  # noqa: PLC0415 - POSIX only
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class Connection(Protocol):
    """What the registry needs of a connection (``timeouts.DeadlineProtocol``)."""

    def idle_since(self) -> float | None:
        """Since when it owes nothing (no request being answered, nothing in the process's buffer) and has shown
        nothing new: its latest response, its start, or the start of the head, body or handshake it is stalled in;
        None while it is busy."""

    def stalled(self) -> int | None:
        """What it waits for from its client: ``STALLED_HEAD``, ``STALLED_BODY`` or ``STALLED_HANDSHAKE`` (since
        :meth:`idle_since`), or None (idle between requests, or new and silent)."""

    def last_status(self) -> int | None:
        """The HTTP status of its latest finished response, or None when it has had none."""

    def request_waiting(self) -> bool:
        """Whether bytes from the client wait unread in the kernel."""

    def unsent_in_kernel(self) -> bool:
        """Whether bytes of a response wait in the kernel for the client: an idle connection that is not."""

    def evict(self) -> None:
        """Close it to make room for a new connection."""


class Connections:
    """The open connections; ``limit`` 0 means no cap."""

    def __init__(
        self,
        limit: int,
        stats: ConnectionStats,
        *,
        grace: float = NEW_CONNECTION_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,  # the event loop's clock, that of ``idle_since``
    ) -> None:
        self.limit = limit
        self.stats = stats
        self.grace = grace
        self.clock = clock
        self._open: dict[Connection, None] = {}  # insertion-ordered: the oldest first
        self._handshaking: dict[Connection, None] = {}  # TLS handshakes under way, the oldest first
        self.released = 0  # connections that have left, over the server's life (for the heap's trim policy)
        self._ranking: list[Ranked] = []  # a heap: the latest ranking, what is left of it
        self._ranked_at = float("-inf")
        self._since_ranking: list[Connection] = []  # admitted after the latest ranking
        self._serial = 0

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, connection: Connection) -> bool:
        """Register a new connection, evicting idle ones at the cap (see the module docstring); False: refuse it
        (all are busy)."""
        if self.limit > 0 and len(self._open) >= self.limit:
            victims = self._victims()
            if not victims:
                self.stats.closed["refused"] += 1
                log.warning("refused a connection: every connection is busy", extra={"limit": self.limit})
                return False
            for victim in victims:
                self.release(victim)
                self.stats.closed["evicted"] += 1
                victim.evict()
        self._open[connection] = None
        if self._ranking and not self._ranking_stale():
            self._since_ranking.append(connection)
        self.stats.open = len(self._open)
        return True

    def full(self) -> bool:
        """Whether a new connection would find the cap reached."""
        return 0 < self.limit <= len(self._open)

    def stalled_newcomer_leaves(self) -> bool:
        """At the cap, whether a new connection that has shown only the start of a request (a head without its
        end, part of a TLS record) is closed rather than admitted: when no open connection stands below one just
        opened, it would make an equal leave, and closing it before anything is made for it (listener.py) is a
        fraction of the cost; the flood it belongs to reconnects either way. False when no connection is idle (the
        newcomer is refused with a 503 as any other)."""
        if not self.full():
            return False
        now = self.clock()
        ranked = self._current_ranking(now)
        while ranked:
            standing, since, _, _, connection = ranked[0]
            current = connection.idle_since() if connection in self._open else None
            if current is None:
                heapq.heappop(ranked)  # left or busy since the ranking
            elif current != since:
                heapq.heapreplace(ranked, self._entry(connection, current, now))
            else:
                return standing >= OPENING  # a lower bound: the kernel can only raise it
        return False

    def admit_handshake(self, connection: Connection) -> bool:
        """:meth:`admit` a TLS connection whose handshake starts now; past :data:`MAX_HANDSHAKES` under way, the
        oldest of them leaves if it has been under way for the grace (stalled: a real handshake is over in
        milliseconds)."""
        if len(self._handshaking) >= MAX_HANDSHAKES:
            oldest = next(iter(self._handshaking))
            since = oldest.idle_since()
            if since is not None and self.clock() - since >= self.grace:
                self.release(oldest)
                self.stats.closed["evicted"] += 1
                oldest.evict()
        if not self.admit(connection):
            return False
        self._handshaking[connection] = None
        return True

    def handshake_done(self, connection: Connection) -> None:
        """The connection's TLS handshake is over (it is served now, or gone)."""
        self._handshaking.pop(connection, None)

    def release(self, connection: Connection) -> None:
        self._handshaking.pop(connection, None)
        if connection in self._open:
            del self._open[connection]
            self.released += 1
        self.stats.open = len(self._open)
        if self._ranking and (len(self._open) <= self.limit // 2 or self._ranking_stale()):
            self._forget_ranking()  # the burst is over: the connections it holds are let go

    def _ranking_stale(self) -> bool:
        return self.clock() - self._ranked_at > RANKING_REUSE_SECONDS

    def _forget_ranking(self) -> None:
        self._ranking = []
        self._since_ranking = []
        self._ranked_at = float("-inf")

    def _entry(self, connection: Connection, since: float, now: float) -> Ranked:
        self._serial += 1
        return (self.standing(connection, since, now, ask_kernel=False), since, self._serial, False, connection)

    def _current_ranking(self, now: float) -> list[Ranked]:
        """The latest ranking with what was admitted since, or a new one when it is too old or used up."""
        if not self._ranking or self._ranking_stale():
            self._forget_ranking()
            self._ranked_at = now
            self._ranking = [
                self._entry(connection, since, now)
                for connection in self._open
                if (since := connection.idle_since()) is not None
            ]
            heapq.heapify(self._ranking)
            return self._ranking
        for connection in self._since_ranking:
            since = connection.idle_since()
            if since is not None and connection in self._open:
                heapq.heappush(self._ranking, self._entry(connection, since, now))
        self._since_ranking = []
        return self._ranking

    def standing(self, connection: Connection, idle_since: float, now: float, *, ask_kernel: bool = True) -> int:
        """Where a connection that owes nothing stands at the cap: what it is stalled in, its latest response, or
        whether its first request is coming. Without ``ask_kernel`` an unread request is not seen: a lower bound,
        ``ASKING`` taken for the others."""
        stalled = connection.stalled()
        if stalled is not None:
            if ask_kernel and connection.request_waiting():
                return ASKING  # more of it has arrived, unread yet
            return stalled if now - idle_since >= self.grace else OPENING
        status = connection.last_status()
        if status is not None:
            return ANSWERED_SUCCESS if status < 400 else ANSWERED_ERROR
        if ask_kernel and connection.request_waiting():
            return ASKING
        return OPENING if now - idle_since < self.grace else STALE

    def _victims(self) -> list[Connection]:
        """The idle connection of the lowest standing, idle the longest among those, and when that standing is at
        most error-answered, more of it up to :data:`EVICTION_BATCH`; empty when none is idle.

        Ranked by what the process knows, each a lower bound of the true key (the kernel can only make a
        connection busy, or raise it to ``ASKING``): candidates are taken lowest first and checked with the kernel,
        one found higher going back in its true place."""
        now = self.clock()
        ranked = self._current_ranking(now)
        victims: list[Connection] = []
        first = STALLED_HEAD  # the first victim's standing: the batch is of that standing only
        while ranked and len(victims) < EVICTION_BATCH:
            entry = heapq.heappop(ranked)
            standing, since, _, checked, connection = entry
            if connection not in self._open:
                continue  # left since the ranking
            current = connection.idle_since()
            if current is None:
                continue  # busy since the ranking
            if current != since:  # it has shown something since: ranked again
                heapq.heappush(ranked, self._entry(connection, current, now))
                continue
            if victims and standing != first:
                heapq.heappush(ranked, entry)  # not this time: it stays ranked for the next admit
                break
            if not checked:
                if connection.unsent_in_kernel():
                    continue  # its client has not taken the response yet: busy
                true_standing = self.standing(connection, since, now)
                if true_standing != standing:
                    heapq.heappush(ranked, (true_standing, since, entry[2], True, connection))
                    continue
            victims.append(connection)
            first = standing
            if standing > ANSWERED_ERROR:
                break  # one at a time for the others: their room is not taken before it is needed
        return victims

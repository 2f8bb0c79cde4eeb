"""The tests' one hand-written backend: its collections are steered by the test, not by wall-clock luck."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nvidia_gpu_exporter.model.snapshot import (
    GpuTable,
    QueryField,
    Readings,
    StatusFamily,
    StuckChildren,
    SupplementFailures,
    XidRecord,
)

FIELDS = (QueryField("uuid", "uuid"), QueryField("temperature.gpu", "temperature.gpu"))
READINGS = Readings(GpuTable((("GPU-0000", "40"),)), None, "12.4")


class FakeBackend:
    """A :class:`~nvidia_gpu_exporter.backends.Backend` whose ``collect()`` waits for ``gate``, then answers.

    Call ``i`` returns ``outcomes[i]`` (``Readings``) or raises it (an exception); calls past the list return
    ``readings``. ``delays[i]`` is slept by call ``i`` once the gate is open. ``gated=True`` keeps the gate
    shut until the test sets it (a collection that never ends on its own).
    """

    def __init__(
        self,
        outcomes: Sequence[Readings | BaseException] = (),
        *,
        gated: bool = False,
        delays: Sequence[float] = (),
        fields: Sequence[QueryField] = FIELDS,
        readings: Readings = READINGS,
    ) -> None:
        self.outcomes = list(outcomes)
        self.delays = list(delays)
        self._fields = tuple(fields)
        self.readings = readings
        self.gate = asyncio.Event()
        if not gated:
            self.gate.set()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.start_times: list[float] = []
        self.closed = False
        self.stuck: StuckChildren | None = None  # what stuck_children() reports (None: runs no children)

    @property
    def status_family(self) -> StatusFamily:
        return StatusFamily.COMMAND_EXIT_CODE

    @property
    def fields(self) -> tuple[QueryField, ...]:
        return self._fields

    async def collect(self) -> Readings:
        index = self.calls
        self.calls += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.start_times.append(asyncio.get_running_loop().time())
        self.started.set()
        try:
            await self.gate.wait()
            if index < len(self.delays) and self.delays[index] > 0:
                await asyncio.sleep(self.delays[index])
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        finally:
            self.active -= 1
        outcome = self.outcomes[index] if index < len(self.outcomes) else self.readings
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def xid_records(self) -> tuple[XidRecord, ...]:
        return ()

    def stuck_children(self) -> StuckChildren | None:
        return self.stuck

    def supplement_failures(self) -> SupplementFailures | None:
        return None

    async def aclose(self) -> None:
        self.closed = True

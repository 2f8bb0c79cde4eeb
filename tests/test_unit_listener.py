"""The listening socket (httpserver/listener.py), issue 26: a kernel queue deep enough that a flood reconnecting over
the cap does not make the kernel drop a new client's SYN (resent 1 s later), accepted a few connections per event-loop
turn so that a keep-alive scrape is read between them, and out of descriptors, a pause instead of a busy loop."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from typing import Any

from async_helpers import run
from nvidia_gpu_exporter.httpserver.connections import ACCEPT_BATCH
from nvidia_gpu_exporter.httpserver.listener import ACCEPT_RETRY_SECONDS, Listener

QUEUED = 300  # more than asyncio's (and aiohttp's) 128, less than the 4,096 asked and Linux's default somaxconn


class Counting(asyncio.Protocol):
    made = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counting.made += 1


def listener_on_loopback(sock: socket.socket | None = None) -> Listener:
    sock = sock or socket.create_server(("127.0.0.1", 0))
    Counting.made = 0
    return Listener(sock, Counting, connections=None, stalled=lambda _: False)


def accepted_of(listener: Listener, count: int) -> int:
    """How many of ``count`` connections opened at once (non-blocking) the kernel queues for ``listener`` while
    nobody accepts them: what it holds a second later."""
    port = listener.sock.getsockname()[1]
    clients = []
    for _ in range(count):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(("127.0.0.1", port))
        clients.append(client)
    time.sleep(1)
    held = 0
    try:
        while True:
            try:
                listener.sock.accept()[0].close()
            except BlockingIOError:
                return held
            held += 1
    finally:
        for client in clients:
            client.close()


def test_connections_nobody_has_accepted_yet_wait_in_the_kernel_queue() -> None:
    async def main() -> int:
        listener = listener_on_loopback()
        listener.start()
        loop = asyncio.get_running_loop()
        loop.remove_reader(listener.sock.fileno())  # nobody accepts
        try:
            return await loop.run_in_executor(None, accepted_of, listener, QUEUED)
        finally:
            listener.close()

    assert run(main) == QUEUED


def test_one_turn_of_the_event_loop_accepts_one_batch() -> None:
    async def main() -> list[int]:
        listener = listener_on_loopback()
        listener.sock.listen(QUEUED)
        listener.sock.setblocking(False)
        port = listener.sock.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3 * ACCEPT_BATCH)]
        made = []
        try:
            for _ in range(2):
                listener.accept()
                for _ in range(3):  # the transports are made and their protocols told
                    await asyncio.sleep(0)
                made.append(Counting.made)
        finally:
            listener.close()
            for client in clients:
                client.close()
        return made

    assert run(main) == [ACCEPT_BATCH, 2 * ACCEPT_BATCH]


class OutOfDescriptors(socket.socket):
    def accept(self) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")


def test_out_of_descriptors_it_says_so_once_and_stops_accepting_for_a_while() -> None:
    async def main() -> tuple[list[str], bool, float]:
        loop = asyncio.get_running_loop()
        said: list[str] = []
        loop.set_exception_handler(lambda _, context: said.append(context["message"]))
        sock = OutOfDescriptors(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        listener = listener_on_loopback(sock)
        listener.start()
        try:
            listener.accept()
            watched = loop.remove_reader(sock.fileno())  # False: accepting is paused
            retry = listener._retry
            return said, watched, retry.when() - loop.time() if retry is not None else 0.0
        finally:
            listener.close()

    said, watched, retry_in = run(main)
    assert said == ["socket.accept() out of system resource"]
    assert not watched
    assert 0 < retry_in <= ACCEPT_RETRY_SECONDS

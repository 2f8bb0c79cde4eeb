"""systemd socket activation (``--web.systemd-socket``): serve on the sockets systemd passes in.

systemd hands over listening sockets as file descriptors 3, 4, ... and announces them with the
``LISTEN_PID`` and ``LISTEN_FDS`` environment variables (sd_listen_fds(3)).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

FIRST_FD = 3


class SocketActivationError(OSError):
    """No usable socket-activation descriptors were passed."""


def activation_sockets(environ: Mapping[str, str] | None = None) -> list[socket.socket]:
    """The listening sockets systemd passed to this process."""
    env = os.environ if environ is None else environ
    try:
        listen_pid = int(env.get("LISTEN_PID", ""))
        count = int(env.get("LISTEN_FDS", ""))
    except ValueError:
        raise SocketActivationError("no socket activation file descriptors found") from None
    if listen_pid != os.getpid() or count <= 0:
        raise SocketActivationError("no socket activation file descriptors found")
    sockets = []
    for fd in range(FIRST_FD, FIRST_FD + count):
        os.set_inheritable(fd, False)
        sock = socket.socket(fileno=fd)
        if sock.type != socket.SOCK_STREAM:
            raise SocketActivationError(f"socket activation file descriptor {fd} is not a stream socket")
        sock.setblocking(False)
        sockets.append(sock)
    return sockets

"""Windows: the ``install``/``uninstall`` subcommands (:mod:`.scm`) and running as a service (:mod:`.service`)."""

from __future__ import annotations

from collections.abc import Sequence

from nvidia_gpu_exporter.windows.scm import SUBCOMMANDS, run_subcommand
from nvidia_gpu_exporter.windows.service import run_if_started_by_scm


def dispatch(arguments: Sequence[str], *, process_argv: bool) -> int | None:
    """``cli.main``'s Windows hook: an exit status when this handled the invocation, ``None`` to run normally.

    ``process_argv`` is true when the arguments are the process's own (``main()`` without ``argv``); only
    then can the process have been started by the SCM.
    """
    if arguments and arguments[0] in SUBCOMMANDS:
        return run_subcommand(arguments[0], arguments[1:])
    if process_argv:
        return run_if_started_by_scm(arguments)
    return None

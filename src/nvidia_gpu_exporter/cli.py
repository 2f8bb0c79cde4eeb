"""The ``nvidia_gpu_exporter`` command: subcommands (``doctor``, ``npd-plugin``; ``install``/``uninstall`` on
Windows), ``--help``, ``--version``, else the exporter itself through :mod:`nvidia_gpu_exporter.app`.

Up to the decision whether ``ssl`` may load (:func:`main`, ``preflight.needs_ssl``), nothing imported here
imports asyncio, which would import ``ssl``: ``app`` is imported after it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from nvidia_gpu_exporter import __version__, logs, preflight
from nvidia_gpu_exporter.flags import (
    Action,
    Parsed,
    bash_completion_script,
    completions,
    man_page,
    usage,
    zsh_completion_script,
)
from nvidia_gpu_exporter.support import buildinfo
from nvidia_gpu_exporter.support.buildinfo import BuildInfo
from nvidia_gpu_exporter.support.sslgate import keep_ssl_out

log = logging.getLogger("nvidia_gpu_exporter.main")

PROGRAM = "nvidia_gpu_exporter"


def version_text(build: BuildInfo | None = None) -> str:
    """kingpin's version block as the Go exporter prints it, from the metadata baked in at build time
    (``support/buildinfo.py``); what a build did not record (an editable install, a build without git) reads
    ``unknown``."""
    info = buildinfo.installed() if build is None else build
    return (
        f"{PROGRAM}, version {__version__} (branch: {info.branch}, revision: {info.revision})\n"
        f"  build user:       {buildinfo.UNKNOWN}\n"
        f"  build date:       {info.date}\n"
        f"  python version:   {buildinfo.python_version()}\n"
        f"  platform:         {buildinfo.operating_system()}/{buildinfo.machine()}\n"
        f"  tags:             {buildinfo.UNKNOWN}\n"
    )


def windows_only(subcommand: str) -> str:
    verb = "registers" if subcommand == "install" else "removes"
    return (
        f"{subcommand!r} is a Windows-only command (it {verb} the Windows service); on Linux the service is the "
        "systemd unit nvidia_gpu_exporter.service that the deb and rpm packages install (see INSTALL.md)"
    )


def informational(parsed: Parsed) -> None:
    """Print what an informational flag asks for where kingpin prints it: ``--help`` and ``--version`` on
    stderr, the generated texts (long help, man page, completions) on stdout."""
    action = parsed.action
    if action is Action.HELP:
        sys.stderr.write(usage(PROGRAM))
    elif action is Action.VERSION:
        sys.stderr.write(version_text())
    elif action is Action.HELP_LONG:
        sys.stdout.write(usage(PROGRAM))
    elif action is Action.HELP_MAN:
        sys.stdout.write(man_page(PROGRAM, __version__))
    elif action is Action.COMPLETION_BASH:
        sys.stdout.write("\n".join(completions(parsed.words)))
    elif action is Action.COMPLETION_SCRIPT_BASH:
        sys.stdout.write(bash_completion_script(PROGRAM))
    else:
        sys.stdout.write(zsh_completion_script(PROGRAM))


def dcgm_exporter_main(argv: Sequence[str] | None = None) -> int:
    """The ``dcgm-exporter`` console script: dcgm-exporter's defaults (the DCGM profile on :9400) even with no
    option given, for a manifest that runs its command by name (docs/dcgm.md, "Swapping the image")."""
    return main(argv, dcgm_exporter=True)


def log_dcgm_invocation(parsed: Parsed) -> None:
    """Say once at startup that dcgm-exporter's options were read, and each one accepted without effect."""
    if not parsed.dcgm_exporter:
        return
    config = parsed.config
    log.info(
        "started the dcgm-exporter way (its flags, environment or name): dcgm-exporter's defaults apply",
        extra={"profile": config.metrics_profile.value, "address": ",".join(config.listen_addresses)},
    )
    for notice in parsed.notices:
        log.warning("dcgm-exporter option accepted without effect", extra={"option": notice.option, "why": notice.why})


def main(argv: Sequence[str] | None = None, *, dcgm_exporter: bool = False) -> int:
    """Console entry point; returns the process exit status. dcgm-exporter's ``DCGM_*`` variables are read
    from the environment (``flags.dcgm_invocation``), so its DaemonSets run this with only the image changed."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["doctor"]:  # `nvidia_gpu_exporter doctor`: the node checklist, exit 0/1/2
        from nvidia_gpu_exporter.doctor import main as doctor_main  # noqa: PLC0415 - a separate command

        return doctor_main(arguments[1:])
    if arguments[:1] == ["npd-plugin"]:  # node-problem-detector's custom plugin on /-/health: exit 0/1/2
        from nvidia_gpu_exporter.doctor.npd import main as npd_main  # noqa: PLC0415 - a separate command

        return npd_main(arguments[1:])
    if sys.platform == "win32":  # `install`/`uninstall`, and running under the Service Control Manager
        from nvidia_gpu_exporter import windows  # noqa: PLC0415 - Windows only

        handled = windows.dispatch(arguments, process_argv=argv is None)
        if handled is not None:
            return handled
    logs.configure()
    if arguments[:1] and not arguments[0].startswith("-"):  # a bare word: only Windows has subcommands to run
        from nvidia_gpu_exporter.windows.scm import SUBCOMMANDS  # noqa: PLC0415 - not loaded for a plain start

        if arguments[0] in SUBCOMMANDS:  # elsewhere kingpin's "unexpected install" says nothing
            log.error("failed to run", extra={"err": windows_only(arguments[0])})
            return 1
    try:
        parsed = preflight.parse(arguments, os.environ, dcgm_exporter=dcgm_exporter)
    except preflight.StartupError as error:
        logs.go_default_logger_error("failed to run", str(error))
        return 1
    if parsed.action is not Action.RUN:
        informational(parsed)
        return 0
    config = parsed.config
    logs.configure(config.log_level, config.log_format)
    logs.capture_process_output()
    log_dcgm_invocation(parsed)
    try:
        web_config = preflight.web_config(preflight.checked(config))
    except preflight.StartupError as error:
        log.error("failed to run", extra={"err": str(error)})
        return 1
    if not preflight.needs_ssl(config, web_config):
        keep_ssl_out()  # before asyncio, which would import it (issue 16: support/sslgate.py)
    from nvidia_gpu_exporter import app  # noqa: PLC0415 - imports asyncio: after the decision above

    return app.run(config, web_config)


if __name__ == "__main__":
    sys.exit(main())

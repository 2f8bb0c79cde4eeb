"""The fleet's targets file (``--fleet.targets-file``): which hosts ``/probe?target=<name>`` may reach, and how.

Strict YAML (:mod:`~nvidia_gpu_exporter.support.strictyaml`): an unknown key, a wrong type or a duplicate
name is an error naming its line and key path, and the whole file is refused (a reload keeps the previous
targets). The schema, documented in docs/fleet.md::

    defaults: {<settings>}                  # optional, for every target
    groups:                                 # optional
      <group>: {<settings>, targets: {<name>: {<settings>, host: ...}}}
    targets:                                # optional
      <name>: {<settings>, host: ...}

A target's own setting wins over its group's, which wins over ``defaults``, which win over the built-in
defaults below. A target is only ever a configured name: nothing in a request picks an address.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from nvidia_gpu_exporter._go.durations import DurationError, parse_duration, to_seconds
from nvidia_gpu_exporter._go.text import go_quote
from nvidia_gpu_exporter.backends.fleet.command import RemoteShell, program_problem
from nvidia_gpu_exporter.support.files import read_regular_file

if TYPE_CHECKING:
    from nvidia_gpu_exporter.support.strictyaml import YamlNode

MAX_FILE_BYTES = 1024 * 1024
MAX_TARGETS = 10_000
MAX_TIMEOUT_SECONDS = 300.0
MAX_CONCURRENT_PER_HOST = 64
TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class TargetsError(ValueError):
    """A targets file that cannot be read or breaks its schema; the message names the file and the line."""


class HostKeyPolicy(str, Enum):
    """``host_key_policy``: how the server's host key is checked."""

    STRICT = "strict"  # it must be in known_hosts (a changed or unknown key fails the connection)
    INSECURE_ACCEPT_ANY = "insecure-accept-any"  # no check at all: only for a lab, never across a network


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings a target inherits (``defaults``, a group, the target itself); every field a YAML key."""

    user: str = ""  # "" = the user the exporter runs as
    port: int = 22
    identity_file: str = ""  # "" = the SSH client's default keys
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    host_key_policy: HostKeyPolicy = HostKeyPolicy.STRICT
    jump_host: str = ""  # [user@]host[:port], reached with the same keys and known_hosts
    command: str = "nvidia-smi"  # run by the remote user's shell, the nvidia-smi arguments appended
    shell: RemoteShell = RemoteShell.POSIX  # how `command` is written for the remote shell (fleet/command.py)
    timeout_seconds: float = 10.0  # one collection (field discovery included), as --collect.timeout
    connect_timeout_seconds: float = 5.0  # TCP, key exchange and authentication
    fields: str = "AUTO"  # as --query-field-names
    max_concurrent: int = 2  # nvidia-smi runs at once over one SSH connection


SETTING_KEYS = {
    "user": "user",
    "port": "port",
    "identity_file": "identity_file",
    "known_hosts": "known_hosts",
    "host_key_policy": "host_key_policy",
    "jump_host": "jump_host",
    "command": "command",
    "shell": "shell",
    "timeout": "timeout_seconds",
    "connect_timeout": "connect_timeout_seconds",
    "fields": "fields",
    "max_concurrent": "max_concurrent",
}
"""YAML key -> :class:`Settings` field."""
assert set(SETTING_KEYS.values()) == {field.name for field in fields(Settings)}


@dataclass(frozen=True, slots=True)
class Target:
    """One probe-able host: its name (the ``target`` parameter), address and settings."""

    name: str
    host: str
    settings: Settings


@dataclass(frozen=True, slots=True)
class Targets:
    """A parsed targets file: the targets by name, in file order."""

    by_name: Mapping[str, Target]
    source: str = ""


def _duration_seconds(node: YamlNode) -> float:
    try:
        ns = parse_duration(node.text())
    except DurationError as error:
        raise node.fail(str(error)) from error
    seconds = to_seconds(ns)
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise node.fail(f"must be positive and at most {MAX_TIMEOUT_SECONDS:.0f}s, got {node.text()}")
    return seconds


def _nonempty_text(node: YamlNode) -> str:
    text = node.text()
    if not text.strip():
        raise node.fail("must not be empty")
    if any(char in text for char in "\0\r\n"):
        raise node.fail("must be one line without NUL")
    return text


def _choice(kind: type[Enum]) -> Callable[[YamlNode], object]:
    """A reader of one of ``kind``'s values (``host_key_policy``, ``shell``); anything else names them all."""

    def read(node: YamlNode) -> object:
        text = node.text()
        try:
            return kind(text)
        except ValueError:
            allowed = ", ".join(member.value for member in kind)
            raise node.fail(f"must be one of {allowed}, got {go_quote(text)}") from None

    return read


def _port(node: YamlNode) -> int:
    return node.integer(1, 65535)


def _per_host(node: YamlNode) -> int:
    return node.integer(1, MAX_CONCURRENT_PER_HOST)


_READERS: dict[str, Callable[[YamlNode], object]] = {
    "user": _nonempty_text,
    "port": _port,
    "identity_file": _nonempty_text,
    "known_hosts": _nonempty_text,
    "host_key_policy": _choice(HostKeyPolicy),
    "jump_host": _nonempty_text,
    "command": _nonempty_text,
    "shell": _choice(RemoteShell),
    "timeout": _duration_seconds,
    "connect_timeout": _duration_seconds,
    "fields": _nonempty_text,
    "max_concurrent": _per_host,
}
assert _READERS.keys() == SETTING_KEYS.keys()


def _settings(entries: Mapping[str, YamlNode], inherited: Settings) -> Settings:
    """``inherited`` with the setting keys present in ``entries`` applied."""
    changes: dict[str, Any] = {
        SETTING_KEYS[key]: _READERS[key](node) for key, node in entries.items() if key in SETTING_KEYS
    }
    return replace(inherited, **changes)


_TARGET_KEYS = ("host", *SETTING_KEYS)
_GROUP_KEYS = ("targets", *SETTING_KEYS)
_TOP_LEVEL_KEYS = ("defaults", "groups", "targets")


def _targets(node: YamlNode, inherited: Settings, found: dict[str, Target]) -> None:
    for key, value in node.pairs("a mapping of target names"):
        name = key.written
        if not TARGET_NAME.fullmatch(name):
            raise key.fail(
                f"target name {go_quote(name)} must be letters, digits and _.:- (starting with a letter or digit)"
            )
        if name in found:
            raise key.fail(f"target {go_quote(name)} is defined twice")
        if len(found) >= MAX_TARGETS:
            raise key.fail(f"more than {MAX_TARGETS} targets")
        entries = {} if value.is_null else value.mapping(_TARGET_KEYS, "a mapping of target settings")
        host = _nonempty_text(entries["host"]) if "host" in entries else name
        settings = _settings(entries, inherited)
        problem = program_problem(settings.shell, settings.command)
        if problem is not None:
            raise key.fail(f"target {go_quote(name)}: {problem}")
        found[name] = Target(name, host, settings)


def parse_targets(text: str, source: str = "<targets>") -> Targets:
    """Strictly parse a targets file; an error names ``source`` and the line."""
    # config.py reads this module's default; the YAML parser is loaded only when a targets file is read.
    from nvidia_gpu_exporter.support.strictyaml import StrictYamlError, load_yaml  # noqa: PLC0415

    found: dict[str, Target] = {}
    try:
        root = load_yaml(text)
        if root is None or root.is_null:
            raise TargetsError(f"{source}: the targets file is empty: it must list at least one target")
        entries = root.mapping(_TOP_LEVEL_KEYS)
        defaults = Settings()
        if "defaults" in entries:
            defaults = _settings(entries["defaults"].mapping(tuple(SETTING_KEYS)), defaults)
        if "groups" in entries:
            for _, group in entries["groups"].pairs("a mapping of group names"):
                group_entries = group.mapping(_GROUP_KEYS, "a mapping of group settings")
                if "targets" in group_entries:
                    _targets(group_entries["targets"], _settings(group_entries, defaults), found)
        if "targets" in entries:
            _targets(entries["targets"], defaults, found)
    except StrictYamlError as error:
        raise TargetsError(f"{source}: {error}") from None
    if not found:
        raise TargetsError(f"{source}: no targets: list them under targets: or groups.<name>.targets:")
    return Targets(found, source)


def load_targets(path: str) -> Targets:
    """Read (a regular file of at most :data:`MAX_FILE_BYTES`) and parse the targets file."""
    try:
        text = read_regular_file(path, MAX_FILE_BYTES).decode("utf-8")
    except OSError as error:
        raise TargetsError(f"cannot read targets file {path!r}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise TargetsError(f"cannot read targets file {path!r}: not UTF-8 text ({error.reason})") from error
    return parse_targets(text, path)


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """What tells that the file changed (mtime, size, inode); ``None`` when it cannot be read."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size, status.st_ino)

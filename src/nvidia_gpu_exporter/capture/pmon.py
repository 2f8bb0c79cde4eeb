"""``nvidia-smi pmon`` answered from a scenario that records no pmon section (docs/fake-nvidia-smi.md, "pmon").

The rows are the state's per-process rows (``query-compute-apps``) after replication and overrides, laid out as
drivers from about 535 on print them: two ``#`` header lines that sit right of the data and end with a space, then
``%5s %10s %5s``, `` %6s`` per metric and the name cut and padded to 15 characters. A GPU's utilization, memory,
encoder and decoder percentages are split among its processes in proportion to their memory, so the processes' sums
match the GPU's (within rounding); a share of 0 prints ``-``, as pmon prints a process without a sample, and so does
every utilization of a GPU in MIG mode (NVIDIA: not supported there). A GPU without processes gets the all-``-`` row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

NO_VALUE = "-"
NAME_CHARACTERS = 15
# -s letters: u = utilization, m = framebuffer memory; each group's columns and their units, in -s order.
GROUPS = {
    "u": (("sm", "%"), ("mem", "%"), ("enc", "%"), ("dec", "%"), ("jpg", "%"), ("ofa", "%")),
    "m": (("fb", "MB"), ("ccpm", "MB")),
}
_SPLIT = {"sm": "utilization.gpu", "mem": "utilization.memory", "enc": "utilization.encoder"}
_SPLIT["dec"] = "utilization.decoder"
_GPU_FIELDS = (*_SPLIT.values(), "mig.mode.current")
_APPS = ("--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory", "--format=csv")
_USAGE = (
    "\n    Usage: nvidia-smi pmon [options]\n\n    Options include:\n"
    "    [-c | --count]:       Collect specified number of samples and exit\n"
    "    [-s | --select]:      One or more metrics [default=u]\n"
)

Query = Callable[[Sequence[str]], tuple[str, int]]  # CSV query args -> (stdout, exit code)


@dataclass(frozen=True, slots=True)
class _Process:
    pid: str
    name: str
    memory_mib: int | None  # None: the driver did not say ([N/A])


def _options(args: Sequence[str]) -> tuple[int, str] | str:
    """``(cycles, -s letters)``, or the word nvidia-smi would refuse."""
    cycles, select = 1, "u"
    words = list(args[1:])
    while words:
        word = words.pop(0)
        if word in ("-c", "--count", "-s", "--select", "-d", "--delay", "-i", "--id", "-o", "--options") and words:
            value = words.pop(0)
            if word in ("-c", "--count"):
                if not value.isdigit() or int(value) < 1:
                    return word
                cycles = int(value)
            elif word in ("-s", "--select"):
                if not value or any(letter not in GROUPS for letter in value):
                    return value
                select = "".join(dict.fromkeys(value))
        else:
            return word
    return cycles, select


def _csv_rows(stdout: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in stdout.splitlines()[1:] if line.strip()]


def _leading_int(text: str) -> int | None:
    digits = text.split(" ", 1)[0]
    return int(digits) if digits.isascii() and digits.isdigit() else None


def _gpus(query: Query) -> list[tuple[str, str, dict[str, str]]] | None:
    """``(index, uuid, {field: cell})`` per GPU; the fields the capture does not record are left out."""
    stdout, code = query(("--query-gpu=index,uuid", "--format=csv"))
    if code != 0:
        return None
    gpus: list[tuple[str, str, dict[str, str]]] = [(row[0], row[1], {}) for row in _csv_rows(stdout) if len(row) == 2]
    for field in _GPU_FIELDS:
        stdout, code = query((f"--query-gpu={field}", "--format=csv"))
        if code == 0:
            for gpu, row in zip(gpus, _csv_rows(stdout), strict=False):
                gpu[2][field] = row[0]
    return gpus


def _processes(query: Query) -> dict[str, list[_Process]]:
    stdout, code = query(_APPS)
    by_gpu: dict[str, list[_Process]] = {}
    if code != 0:
        return by_gpu
    for cells in _csv_rows(stdout):
        if len(cells) >= 4 and cells[1].isdigit():
            process = _Process(cells[1], ",".join(cells[2:-1]).strip(), _leading_int(cells[-1]))
            by_gpu.setdefault(cells[0], []).append(process)
    return by_gpu


def _shares(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (equally when they are all 0), rounded half up."""
    if not weights:
        return []
    if not any(weights):
        weights = [1] * len(weights)
    whole = sum(weights)
    return [int(total * weight / whole + 0.5) for weight in weights]


def _header(columns: Sequence[tuple[str, str]]) -> str:
    names = "# gpu" + f"{'pid':>12}" + f"{'type':>7}" + "".join(f"{name:>7}" for name, _ in columns)
    units = "# Idx" + f"{'#':>12}" + f"{'C/G':>7}" + "".join(f"{unit:>7}" for _, unit in columns)
    return f"{names}    command \n{units}    name \n"


def _line(index: str, pid: str, kind: str, cells: Sequence[str], name: str) -> str:
    metrics = "".join(f" {cell:>6}" for cell in cells)
    return f"{index:>5} {pid:>10} {kind:>5}{metrics}    {name[:NAME_CHARACTERS]:<{NAME_CHARACTERS}}\n"


def _gpu_lines(index: str, cells: dict[str, str], processes: list[_Process], columns: Sequence[str]) -> list[str]:
    if not processes:
        return [_line(index, NO_VALUE, NO_VALUE, [NO_VALUE] * len(columns), NO_VALUE)]
    mig = cells.get("mig.mode.current", "") == "Enabled"
    weights = [process.memory_mib or 0 for process in processes]
    split = {
        column: _shares(0 if mig else _leading_int(cells.get(field, "")) or 0, weights)
        for column, field in _SPLIT.items()
    }
    lines = []
    for number, process in enumerate(processes):
        values = {column: str(shares[number]) if shares[number] else NO_VALUE for column, shares in split.items()}
        if process.memory_mib is not None:
            values.update(fb=str(process.memory_mib), ccpm="0")
        lines.append(_line(index, process.pid, "C", [values.get(column, NO_VALUE) for column in columns], process.name))
    return lines


def render_pmon(args: Sequence[str], query: Query) -> tuple[str, int]:
    """pmon's answer to ``args`` (``pmon`` first) from what ``query`` answers: ``(stdout, exit code)``."""
    options = _options(args)
    if isinstance(options, str):
        return f'Option "{options}" is not recognized.\n{_USAGE}', 1
    cycles, select = options
    gpus = _gpus(query)
    if gpus is None:
        return "Failed to process command line\n", 1
    groups = [column for letter in select for column in GROUPS[letter]]
    columns = [name for name, _ in groups]
    processes = _processes(query)
    cycle = [line for index, uuid, cells in gpus for line in _gpu_lines(index, cells, processes.get(uuid, []), columns)]
    return _header(groups) + "".join(cycle * cycles), 0

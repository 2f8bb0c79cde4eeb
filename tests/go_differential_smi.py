"""Our fake nvidia-smi with its CSV answers reshaped the ways a real driver's output may vary and the fake's own
projection never prints: blanks and tabs around cells, CRLF line ends, blank lines before and after; or, for some
seeds, garbage instead of CSV (what a broken driver, a wrong binary or a wrapper's banner prints).

    python tests/go_differential_smi.py SEED <fake flags...> <nvidia-smi arguments...>

The fake answers as usual; a CSV answer (``--format=csv``) is then reshaped by ``random.Random(SEED)``. Every
reshaping keeps what each cell means, so the Go exporter and ours must still agree on it.
"""

from __future__ import annotations

import random
import sys

from nvidia_gpu_exporter.fakesmi.cli import UsageError, parse_flags, resolve, run

PADDING = ("", "", "", " ", "  ", "\t", " \t ")
GARBAGE = (
    "",
    "\n",
    "No devices were found\n",
    "Failed to initialize NVML: Driver/library version mismatch\n",
    "\x00\x01\udcff\udcfe binary\n",
    "Welcome to host-7\n",
    "a,b\n1,2,3\n",
)


def garbage(rng: random.Random, stdout: str) -> str:
    """Something that is not the CSV asked for: a fixed text, the header alone, or the answer cut mid-line."""
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(GARBAGE)
    if roll < 0.8:
        return stdout.split("\n", 1)[0] + "\n"
    return stdout[: rng.randrange(len(stdout) + 1)]


def reshape(rng: random.Random, stdout: str) -> str:
    """The CSV text with its cells padded, its line ends and its surrounding blank lines varied."""
    lines = stdout.rstrip("\n").split("\n")
    padded = [
        ",".join(rng.choice(PADDING) + cell.strip(" ") + rng.choice(PADDING) for cell in line.split(","))
        for line in lines
    ]
    end = "\r\n" if rng.random() < 0.3 else "\n"
    before = rng.choice(("", "", "\n", " \n"))
    after = rng.choice(("", end, end * 2, " " + end))
    return before + end.join(padded) + end + after


def main(argv: list[str]) -> int:
    rng = random.Random(int(argv[0]))
    try:
        flags, rest = parse_flags(argv[1:])
        answer = run(resolve(flags, rest))
    except UsageError as error:
        sys.stderr.write(f"{error}\n")
        return 2
    stdout = answer.stdout
    if answer.exit_code == 0 and "--format=csv" in rest:
        stdout = garbage(rng, stdout) if rng.random() < 0.1 else reshape(rng, stdout)
    sys.stdout.buffer.write(stdout.encode("utf-8", "surrogateescape"))
    sys.stderr.write(answer.stderr)
    return answer.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Parsing ``nvidia-smi pmon -c 1 -s um``: by header names, in the old (<535) and new layouts real drivers print."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.backends.exec.pmon import PmonShapeError, parse_pmon
from nvidia_gpu_exporter.model.snapshot import ProcessUsageRow

UUIDS = {str(index): f"GPU-{index}" for index in range(8)}
MIB = 1_048_576.0

# The new layout (drivers from about 535 on): the header sits right of the data, and keeps a trailing space.
NEW_UM = (
    "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command \n"
    "# Idx           #    C/G      %      %      %      %      %      %     MB     MB    name \n"
    "    0       2479     G      -      -      -      -      -      -      1      0    kwalletd6      \n"
    "    0     100949     C     45     12      3      -      -      -    624      0    python         \n"
    "    1          -     -      -      -      -      -      -      -      -      -    -              \n"
)
# The old layout with fb first (-s mu order) and a repeated header pair, as one public capture has it.
OLD_MU = (
    "# gpu        pid  type    sm   mem   enc   dec   command\n"
    "# Idx          #   C/G     %     %     %     %   name\n"
    "# gpu        pid  type    fb    sm   mem   enc   dec   command\n"
    "# Idx          #   C/G    MB     %     %     %     %   name\n"
    "    3    2233469     C 15771    90    23     0     0   python3        \n"
)
# -o DT glues the "#" to the first word, and rows start with a date and a time.
DATED = (
    "#Date       Time        gpu         pid   type     sm    mem    enc    dec     fb    command\n"
    "#YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %     MB    name\n"
    " 20260102   19:12:31      2       7338   M+C     10      2      -      -    100    cuda app\n"
)

# Extra columns (a MIG GPU's gi and ci, which no public capture shows yet) are read past by name.
MIG_COLUMNS = (
    "# gpu   gi   ci         pid   type     sm    mem    enc    dec     fb    command\n"
    "    1    2    0        1001     C      -      -      -      -   1024    python3\n"
)


@pytest.mark.parametrize(
    ("stdout", "rows"),
    [
        (
            NEW_UM,
            (
                ProcessUsageRow("GPU-0", "2479", "kwalletd6", None, None, None, None, 1 * MIB),
                ProcessUsageRow("GPU-0", "100949", "python", 45.0, 12.0, 3.0, None, 624 * MIB),
            ),
        ),
        (OLD_MU, (ProcessUsageRow("GPU-3", "2233469", "python3", 90.0, 23.0, 0.0, 0.0, 15771 * MIB),)),
        (DATED, (ProcessUsageRow("GPU-2", "7338", "cuda app", 10.0, 2.0, None, None, 100 * MIB),)),
        (MIG_COLUMNS, (ProcessUsageRow("GPU-1", "1001", "python3", None, None, None, None, 1024 * MIB),)),
        ("", ()),
    ],
    ids=["new-layout", "old-layout-repeated-header", "date-time-prefix", "mig-columns", "empty"],
)
def test_rows_are_read_by_header_names(stdout: str, rows: tuple[ProcessUsageRow, ...]) -> None:
    assert parse_pmon(stdout, UUIDS) == rows


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ("    9       5555     C     45     12      -      -      -      -    624      0    python", "gpu index"),
        ("    0        abc     C     45     12      -      -      -      -    624      0    python", "pid"),
        ("    0       5555     C     45", "too few"),
    ],
)
def test_unusable_rows_are_skipped(row: str, why: str) -> None:
    header = "".join(NEW_UM.splitlines(keepends=True)[:2])
    assert parse_pmon(header + row + "\n", UUIDS) == (), why


@pytest.mark.parametrize(
    ("cell", "value"),
    [("37100", None), ("-1", None), ("12.5", 12.5), ("100", 100.0), ("0x10", None), ("[N/A]", None)],
)
def test_a_percentage_outside_0_to_100_is_no_value(cell: str, value: float | None) -> None:
    header = "".join(NEW_UM.splitlines(keepends=True)[:2])
    row = f"    0       5555     C {cell:>6}      -      -      -      -      -      5      0    app\n"
    assert parse_pmon(header + row, UUIDS)[0].sm_percent == value


@pytest.mark.parametrize(
    "stdout",
    [
        "Not supported on the device(s)\nFailed to process command line\n",
        "    0       5555     C     45     12      -      -    python\n",
        "# Idx           #    C/G      %      %\n    0       5555     C     45     12\n",
    ],
    ids=["not-supported", "no-header", "units-only"],
)
def test_output_without_a_column_header_is_an_error(stdout: str) -> None:
    with pytest.raises(PmonShapeError):
        parse_pmon(stdout, UUIDS)

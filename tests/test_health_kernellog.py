"""The kernel-log lines the NVIDIA driver writes, parsed (docs/health.md, "What is read")."""

from __future__ import annotations

import pytest

from nvidia_gpu_exporter.health.kernellog import (
    FallenOffBus,
    GpuIdentity,
    KernelEvent,
    LogLine,
    SxidEvent,
    XidEvent,
    parse_line,
    parse_message,
)
from nvidia_gpu_exporter.model.pci import PciAddress, parse_pci_address

GPU = PciAddress(0, 0x3B, 0)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("6,1203,5123456789,-;NVRM: Xid", LogLine("NVRM: Xid", 5123456789, 1203), id="kmsg-record"),
        pytest.param("4,7,42,c,caller=T1;text", LogLine("text", 42, 7), id="kmsg-record-with-more-flags"),
        pytest.param("[24128.828315] NVRM: Xid", LogLine("NVRM: Xid", 24128828315), id="dmesg-seconds"),
        pytest.param("<4>[    3.5] x", LogLine("x", 3500000), id="dmesg-raw-with-level"),
        pytest.param(
            "Sep 12 14:25:44 host kernel: NVRM: Xid",
            LogLine("Sep 12 14:25:44 host kernel: NVRM: Xid"),
            id="syslog-untimed",
        ),
        pytest.param("", LogLine(""), id="empty"),
    ],
)
def test_a_line_splits_into_kernel_time_and_message(line: str, expected: LogLine) -> None:
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
            XidEvent(GPU, 79, 1234, "python3", text="GPU has fallen off the bus."),
            id="current-driver-with-process",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7)",
            XidEvent(PciAddress(0, 0xCB, 0), 13, None, "", text="Graphics SM Warp Exception on (GPC 7)"),
            id="current-driver-process-unknown",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000",
            XidEvent(PciAddress(0, 1, 0), 31, text="Ch 00000003, engmask 00000101, intr 10000000"),
            id="old-driver-no-process",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.",
            XidEvent(PciAddress(0, 2, 0), 79, text="GPU has fallen off the bus."),
            id="old-driver-fallen-off",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 43, pid=77, name=train, Ch 00000010",
            XidEvent(GPU, 43, 77, "train", 1, 2, "Ch 00000010"),
            id="mig-gpu-and-compute-instance",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 43, pid=77, name=train, x",
            XidEvent(GPU, 43, 77, "train", 5, None, "x"),
            id="mig-gpu-instance-only",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)",
            XidEvent(PciAddress(0x19, 1, 0), 149, text="NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000)"),
            id="nonzero-domain",
        ),
        pytest.param(
            "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=pt_main_thread, Ch 00000001",
            XidEvent(PciAddress(0, 0xDC, 0), 45, 1818990, "pt_main_thread", text="Ch 00000001"),
            id="process-name-with-underscores",
        ),
        pytest.param(
            "Sep 12 14:25:44 host kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=9, name=a, DBE",
            XidEvent(GPU, 48, 9, "a", text="DBE"),
            id="syslog-prefix",
        ),
        pytest.param(
            "NVRM: GPU at PCI:0000:3b:00: GPU-2f8e4c1a-5b6d-7e8f-9a0b-1c2d3e4f5a6b",
            GpuIdentity(GPU, "GPU-2f8e4c1a-5b6d-7e8f-9a0b-1c2d3e4f5a6b"),
            id="gpu-identity",
        ),
        pytest.param("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", FallenOffBus(GPU), id="fallen-off-the-bus"),
        pytest.param(
            "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
            SxidEvent(PciAddress(0, 5, 0), 12028, "nvidia-nvswitch3", False, "Link 32 egress non-posted PRIV error"),
            id="sxid-non-fatal",
        ),
        pytest.param(
            "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 sourcetrack timeout error",
            SxidEvent(PciAddress(0, 0xC3, 0), 24007, "nvidia-nvswitch0", True, "Link 30 sourcetrack timeout error"),
            id="sxid-fatal",
        ),
    ],
)
def test_a_driver_message_becomes_its_event(message: str, expected: KernelEvent) -> None:
    assert parse_message(message) == expected


@pytest.mark.parametrize(
    "message",
    [
        pytest.param("EXT4-fs (nvme0n1p9): re-mounted", id="other-kernel-message"),
        pytest.param("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15", id="other-nvrm-message"),
        pytest.param("NVRM: Xid (PCI:0000:3b:00): garbled", id="xid-without-code"),
        pytest.param("NVRM: Xid (PCI:zzzz:3b:00): 79, x", id="xid-with-bad-address"),
        pytest.param("NVRM: Xid (PCI:0000:3b:ff): 79, x", id="xid-device-out-of-range"),
        pytest.param("nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): garbled, Fatal", id="sxid-without-code"),
        pytest.param("NVRM: Xid " + "(" * 10000, id="pathological-parentheses"),
    ],
)
def test_anything_else_is_no_event(message: str) -> None:
    assert parse_message(message) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("00000000:3B:00.0", PciAddress(0, 0x3B, 0), id="nvidia-smi-form"),
        pytest.param("0000:3b:00", PciAddress(0, 0x3B, 0), id="kernel-form"),
        pytest.param("0000:3b:00.0", PciAddress(0, 0x3B, 0), id="sysfs-form"),
        pytest.param("3b:00.0", PciAddress(0, 0x3B, 0), id="lspci-form-without-domain"),
        pytest.param("0001:3b:1f.1", PciAddress(1, 0x3B, 0x1F), id="function-ignored"),
        pytest.param("0000:3b:20.0", None, id="device-out-of-range"),
        pytest.param("GPU-1234", None, id="not-an-address"),
    ],
)
def test_every_spelling_of_a_pci_address_is_one_key(text: str, expected: PciAddress | None) -> None:
    assert parse_pci_address(text) == expected


def test_the_label_is_nvidia_smis_form_so_series_join_with_gpu_info() -> None:
    assert PciAddress(0x19, 0x3B, 0).label == "00000019:3B:00.0"

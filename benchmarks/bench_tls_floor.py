"""The RSS floor of a TLS + basic-auth start in CPython (issue 31, item 3): a bare interpreter loading, one
step at a time, only what such a start cannot do without (asyncio, ssl with one server context and its
certificate, PyYAML, bcrypt, h11), none of this project's code. Each step's VmRSS is read from
``/proc/self/status`` in a fresh interpreter, so the figures are the floor under the exporter's own.

    python benchmarks/bench_tls_floor.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = (
    ("bare interpreter", "pass"),
    ("`import asyncio` (with `ssl` kept out)", "sys.modules['ssl'] = None\nimport asyncio\ndel sys.modules['ssl']"),
    ("`import ssl`", "import ssl"),
    ("one `SSLContext(PROTOCOL_TLS_SERVER)`", "context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)"),
    ("its certificate and key loaded", "context.load_cert_chain(CERT, KEY)"),
    ("`import yaml`", "import yaml"),
    ("`import bcrypt`", "import bcrypt"),
    ("`import h11`", "import h11"),
)

PROBE = """
import sys
CERT, KEY = sys.argv[1], sys.argv[2]
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
for code in sys.argv[3:]:
    exec(code)
    print(rss())
"""


def key_pair(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        cert, key = key_pair(Path(temporary))
        output = subprocess.run(
            [sys.executable, "-c", PROBE, str(cert), str(key), *(code for _, code in STEPS)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    readings = [float(line) for line in output.split()]
    print("| step | RSS | added |\n|---|---:|---:|")
    previous = None
    for (name, _), rss in zip(STEPS, readings, strict=True):
        added = "" if previous is None else f"+{rss - previous:.1f}"
        print(f"| {name} | {rss:.1f} MiB | {added} |")
        previous = rss


if __name__ == "__main__":
    main()

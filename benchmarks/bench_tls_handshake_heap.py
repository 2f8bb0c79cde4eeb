"""What OpenSSL holds for one server-side TLS handshake stalled after the client's ClientHello (issue 26): the C heap's
bytes per handshake (glibc's ``mallinfo2``), in one process, ``--handshakes`` of them held through ``ssl.MemoryBIO``
for each way of setting up the server's context that Python's ``ssl`` offers and that could matter, none of this
project's code.

With ``--allocations`` it lists instead the C allocations one such handshake leaves live, largest first, each with
its callers (an ``LD_PRELOAD`` library compiled with gcc records them; callers named by ``addr2line``, so a static
function shows as the exported one before it). Linux with glibc; ``--allocations`` needs gcc and binutils.

    python benchmarks/bench_tls_handshake_heap.py [--handshakes 300]
    python benchmarks/bench_tls_handshake_heap.py --allocations
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

# Each variant: how the server's context differs from PROTOCOL_TLS_SERVER with an ECDSA certificate.
VARIANTS: dict[str, Callable[[ssl.SSLContext], None]] = {
    "PROTOCOL_TLS_SERVER with its defaults": lambda context: None,
    "OP_NO_TICKET": lambda context: setattr(context, "options", context.options | ssl.OP_NO_TICKET),
    "TLS 1.2 at most": lambda context: setattr(context, "maximum_version", ssl.TLSVersion.TLSv1_2),
}

# Records every malloc, calloc, realloc and free between rec_on() and rec_off() (the caller chain of each) to the
# file named by REC_LOG.
RECORDER_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *(*real_malloc)(size_t), *(*real_calloc)(size_t, size_t), *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int on, fd = -1;
static __thread int inside;
static char early[65536];
static size_t early_used;
void rec_on(void) { fd = open(getenv("REC_LOG"), O_CREAT | O_WRONLY | O_TRUNC, 0644); on = 1; }
void rec_off(void) { on = 0; close(fd); }
static void find(void) {
    real_malloc = dlsym(RTLD_NEXT, "malloc"); real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc"); real_free = dlsym(RTLD_NEXT, "free");
}
static void record(char op, void *p, size_t size, void *old) {
    if (!on || inside) return;
    inside = 1;
    void *frames[8];
    int count = backtrace(frames, 8);
    char line[512];
    int n = snprintf(line, sizeof line, "%c %p %zu %p", op, p, size, old);
    for (int i = 2; i < count; i++) n += snprintf(line + n, sizeof line - n, " %p", frames[i]);
    line[n++] = '\n';
    write(fd, line, n);
    inside = 0;
}
void *malloc(size_t size) { if (!real_malloc) find(); void *p = real_malloc(size); record('+', p, size, 0); return p; }
void *calloc(size_t count, size_t size) {
    if (!real_calloc) { void *p = early + early_used; early_used += (count * size + 15) & ~15UL; return p; }
    void *p = real_calloc(count, size); record('+', p, count * size, 0); return p;
}
void *realloc(void *old, size_t size) {
    if (!real_realloc) find(); void *p = real_realloc(old, size); record('r', p, size, old); return p;
}
void free(void *p) {
    if ((char *)p >= early && (char *)p < early + sizeof early) return;
    if (!real_free) find(); record('-', p, 0, 0); real_free(p);
}
"""


def certificate(directory: Path) -> tuple[Path, Path]:
    import trustme

    authority = trustme.CA()
    leaf = authority.issue_cert("127.0.0.1")
    cert, key = directory / "cert.pem", directory / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def client_hellos(count: int) -> list[bytes]:
    """``count`` ClientHellos as Python's client sends them (each its own random and key share)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    hellos = []
    for _ in range(count):
        client = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO())
        with contextlib.suppress(ssl.SSLWantReadError):
            client.do_handshake()
        hellos.append(outgoing.read())
    return hellos


def stalled(context: ssl.SSLContext, hello: bytes) -> tuple[ssl.MemoryBIO, ssl.MemoryBIO, ssl.SSLObject]:
    """A server handshake that read ``hello``, wrote its answer (read out, as the exporter sends it) and waits."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = context.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(hello)
    with contextlib.suppress(ssl.SSLWantReadError):
        server.do_handshake()
    outgoing.read()
    return incoming, outgoing, server


def heap_bytes() -> int:
    names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in names]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def per_handshake(count: int, cert: Path, key: Path) -> None:
    hellos = client_hellos(count)
    print(f"KiB of C heap per server handshake stalled after a ClientHello, {count} held; {ssl.OPENSSL_VERSION}")
    print("| server context | after wrap_bio | after the ClientHello | in all |\n|---|---:|---:|---:|")
    for name, adjust in VARIANTS.items():
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        adjust(context)
        gc.collect()
        start = heap_bytes()
        wrapped = [context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_side=True) for _ in hellos]
        after_wrap = heap_bytes()
        del wrapped
        gc.collect()
        start_held = heap_bytes()
        held = [stalled(context, hello) for hello in hellos]
        grown = heap_bytes() - start_held
        wrap_kib = (after_wrap - start) / count / 1024
        print(f"| {name} | {wrap_kib:.1f} | {grown / count / 1024 - wrap_kib:.1f} | {grown / count / 1024:.1f} |")
        del held
        gc.collect()


ALLOCATIONS_CHILD = """
import ctypes, ssl, sys
sys.path.insert(0, sys.argv[1])
import bench_tls_handshake_heap as bench
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
hellos = bench.client_hellos(4)
warm = [bench.stalled(context, hello) for hello in hellos[:3]]
recorder = ctypes.CDLL(sys.argv[4])
recorder.rec_on()
held = bench.stalled(context, hellos[3])
recorder.rec_off()
print(open("/proc/self/maps").read())
"""


def allocations(directory: Path, cert: Path, key: Path) -> None:
    library, log = directory / "recorder.so", directory / "allocations.log"
    (directory / "recorder.c").write_text(RECORDER_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", library, directory / "recorder.c", "-ldl"], check=True)
    maps = subprocess.run(
        [sys.executable, "-c", ALLOCATIONS_CHILD, str(Path(__file__).parent), cert, key, library],
        env={**os.environ, "LD_PRELOAD": str(library), "REC_LOG": str(log)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    regions = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[5].startswith("/"):
            low, high = (int(bound, 16) for bound in fields[0].split("-"))
            regions.append((low, high, int(fields[2], 16), fields[5]))
    live: dict[str, tuple[int, list[str]]] = {}
    for line in log.read_text().splitlines():
        op, pointer, size, old, *frames = line.split()
        if op in "-r":
            live.pop(old if op == "r" else pointer, None)
        if op in "+r":
            live[pointer] = (int(size), frames)

    def name(address: str) -> str:
        where = int(address, 16)
        for low, high, offset, path in regions:
            if low <= where < high:
                found = subprocess.run(
                    ["addr2line", "-f", "-e", path, hex(where - low + offset)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                return f"{Path(path).name}:{found.stdout.split()[0] if found.stdout else '?'}"
        return "?"

    total = sum(size for size, _ in live.values())
    print(f"{len(live)} C allocations live after one stalled handshake, {total / 1024:.1f} KiB in all; the largest:")
    for bytes_held, frames in sorted(live.values(), key=lambda entry: -entry[0])[:8]:
        print(f"{bytes_held:>7} B  " + " <- ".join(name(frame) for frame in frames[:4]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--allocations", action="store_true", help="list one handshake's live C allocations")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-tls-heap-"))
    cert, key = certificate(directory)
    if args.allocations:
        allocations(directory, cert, key)
    else:
        per_handshake(args.handshakes, cert, key)


if __name__ == "__main__":
    main()

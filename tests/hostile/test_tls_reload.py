"""TLS settings at reload (docs/security.md): a client CA taken out of ``client_ca_file`` stops working.

``load_verify_locations`` only ever adds to a context's trust store, so after CA1 was replaced by CA2 a
client certificate from CA1 still got 200 until a restart.

Each reload builds a new context, which new handshakes switch to: the one it replaces must go once its
connections have closed, or every reload keeps a context (its certificate, key and OpenSSL state) for good,
the candidate issue 35's loaded soak looked at for its slope.
"""

from __future__ import annotations

import gc
import os
import ssl
import weakref
from pathlib import Path

import aiohttp
import pytest
import trustme

from async_helpers import WAIT_SECONDS, run
from hostile.web_hostile import serving_hello
from nvidia_gpu_exporter.httpserver.security import Security

MTLS = (
    "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_ca_file: clients.pem\n"
    "  client_auth_type: RequireAndVerifyClientCert\n"
)


async def status(url: str, server_ca: trustme.CA, client: trustme.LeafCert) -> int | str:
    context = ssl.create_default_context()
    server_ca.configure_trust(context)
    client.configure_cert(context)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_SECONDS)) as session,
            session.get(url, ssl=context) as response,
        ):
            return response.status
    except (aiohttp.ClientError, ssl.SSLError, ConnectionError):
        return "refused"


def replace_file(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    status_now = path.stat()
    os.utime(path, ns=(status_now.st_atime_ns, status_now.st_mtime_ns + 1_000_000_000))


TLS_ONLY = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
RELOADS = 4


def test_a_context_a_reload_replaced_is_freed_once_its_handshakes_are_over(tmp_path: Path) -> None:
    server_ca = trustme.CA()
    leaf = server_ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    config = tmp_path / "web.yml"
    config.write_text(TLS_ONLY)
    security = Security.from_file(str(config))
    built: list[weakref.ref[ssl.SSLContext]] = []

    async def main() -> list[int | str]:
        context = ssl.create_default_context()
        server_ca.configure_trust(context)
        answers: list[int | str] = []
        async with serving_hello(security) as url:
            for generation in range(1, RELOADS + 1):
                replace_file(config, f"{TLS_ONLY}# generation {generation}\n".encode())
                assert security.reload_if_changed()
                assert security._live_context is not None
                built.append(weakref.ref(security._live_context))
                async with (
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_SECONDS)) as session,
                    session.get(url, ssl=context) as response,
                ):
                    answers.append(response.status)
        return answers

    assert run(main) == [200] * RELOADS
    gc.collect()
    assert [reference() is not None for reference in built] == [False] * (RELOADS - 1) + [True]


@pytest.mark.parametrize("change", ["replaced", "config-points-elsewhere"])
def test_a_client_ca_removed_at_reload_stops_being_trusted(tmp_path: Path, change: str) -> None:
    server_ca, first_ca, second_ca = trustme.CA(), trustme.CA(), trustme.CA()
    leaf = server_ca.issue_cert("127.0.0.1")
    leaf.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    (tmp_path / "clients.pem").write_bytes(first_ca.cert_pem.bytes())
    config = tmp_path / "web.yml"
    config.write_text(MTLS)
    first_client, second_client = first_ca.issue_cert("scraper"), second_ca.issue_cert("scraper")
    security = Security.from_file(str(config))

    async def main() -> list[int | str]:
        async with serving_hello(security) as url:
            before = [await status(url, server_ca, first_client), await status(url, server_ca, second_client)]
            if change == "replaced":
                replace_file(tmp_path / "clients.pem", second_ca.cert_pem.bytes())
            else:
                (tmp_path / "new-clients.pem").write_bytes(second_ca.cert_pem.bytes())
                replace_file(config, MTLS.replace("clients.pem", "new-clients.pem").encode())
            assert security.reload_if_changed()
            after = [await status(url, server_ca, first_client), await status(url, server_ca, second_client)]
            return before + after

    assert run(main) == [200, "refused", "refused", 200]

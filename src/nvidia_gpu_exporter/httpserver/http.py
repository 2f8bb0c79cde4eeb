"""The web layer's own request/response API and router: what every handler sees, whatever parses the bytes.

:class:`Request` is a parsed HTTP/1.x request (method, percent-decoded path, query, headers, the client's
address and certificate); :class:`Response` a status, headers and a body held as parts (``bytes`` each) that
the server writes in order without joining them (httpserver/body.py). :class:`App` routes GET (and the HEAD it
implies) by exact path, runs the middlewares around the chosen handler and applies the response hooks; an
unknown path raises :class:`NotFound`, a known path asked with another method :class:`MethodNotAllowed` and a
path that is not clean (``//x``, ``/a/../x``) :class:`Redirect`, for a middleware (``server.go_style_errors``) to
answer as Go's ServeMux does. The connection side is httpserver/protocol.py.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, overload

Handler = Callable[["Request"], Awaitable["Response"]]
Middleware = Callable[["Request", Handler], Awaitable["Response"]]
ResponseHook = Callable[["Request", "Response"], None]


class Headers:
    """Request headers, looked up by name whatever its case; values decoded as UTF-8 (undecodable bytes kept as
    surrogate escapes, so nothing a client sends can make a lookup raise)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items: list[tuple[str, str]] = [(name.lower(), value) for name, value in items]

    @classmethod
    def lowered(cls, items: list[tuple[str, str]]) -> Headers:
        """Headers from ``items`` whose names are lower-case already (kept, not copied)."""
        headers = cls.__new__(cls)
        headers._items = items
        return headers

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name``, or ``default``."""
        key = name.lower()
        for item_name, value in self._items:
            if item_name == key:
                return value
        return default

    def getall(self, name: str) -> list[str]:
        key = name.lower()
        return [value for item_name, value in self._items if item_name == key]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def items(self) -> list[tuple[str, str]]:
        """Every header in arrival order, names lower-cased."""
        return list(self._items)


class Query:
    """The query string's parameters in order; a key may repeat (``?target=a&target=b``)."""

    __slots__ = ("_pairs",)

    def __init__(self, query_string: str) -> None:
        if query_string:
            from urllib.parse import parse_qsl  # noqa: PLC0415 - with ipaddress, 0.4 MiB a start without queries skips

            self._pairs: list[tuple[str, str]] = parse_qsl(query_string, keep_blank_values=True)
        else:
            self._pairs = []

    @overload
    def get(self, key: str) -> str | None: ...
    @overload
    def get(self, key: str, default: str) -> str: ...
    def get(self, key: str, default: str | None = None) -> str | None:
        """The first value of ``key``, or ``default``."""
        for name, value in self._pairs:
            if name == key:
                return value
        return default

    def getall(self, key: str) -> list[str]:
        return [value for name, value in self._pairs if name == key]

    def __contains__(self, key: object) -> bool:
        return any(name == key for name, _ in self._pairs)


class Request:
    """One request, as a handler sees it. ``transport`` is the connection's (None for an in-process request)."""

    __slots__ = ("_query", "headers", "method", "path", "query_string", "target", "transport", "version")

    def __init__(
        self,
        method: str,
        target: str,
        headers: Headers,
        *,
        version: str = "1.1",
        transport: asyncio.BaseTransport | None = None,
    ) -> None:
        self.method = method
        self.target = target  # as sent: origin form ``/path?query`` or absolute form ``http://host/path?query``
        self.headers = headers
        self.version = version
        self.transport = transport
        path, _, self.query_string = _origin_form(target).partition("?")
        self.path = _percent_decoded(path) if "%" in path else path
        self._query: Query | None = None

    @property
    def query(self) -> Query:
        if self._query is None:
            self._query = Query(self.query_string)
        return self._query

    @property
    def remote(self) -> str | None:
        """The client's IP address (None when unknown)."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        if isinstance(peer, (tuple, list)) and peer:
            return str(peer[0])
        return None

    @property
    def peercert(self) -> dict[str, Any] | None:
        """The client's verified TLS certificate (``ssl.SSLSocket.getpeercert()``'s form), None without one."""
        certificate = self.transport.get_extra_info("peercert") if self.transport is not None else None
        return certificate if isinstance(certificate, dict) and certificate else None


def _percent_decoded(path: str) -> str:
    """``path`` with its ``%XX`` escapes decoded (an invalid UTF-8 byte kept as a surrogate), for a path that has
    one: only then is ``urllib.parse`` (and the ``ipaddress`` it loads) imported."""
    from urllib.parse import unquote  # noqa: PLC0415 - see the docstring

    return unquote(path, errors="surrogateescape")


def _origin_form(target: str) -> str:
    """The ``/path?query`` of a request target (an absolute-form target's authority dropped)."""
    if target.startswith("/"):
        return target
    scheme, separator, rest = target.partition("://")
    if separator and scheme.lower() in ("http", "https"):
        slash = rest.find("/")
        if slash < 0:
            question = rest.find("?")
            return "/" if question < 0 else "/" + rest[question:]
        return rest[slash:]
    return target  # ``*`` (OPTIONS) or anything else: matches no route


def make_request(method: str, path: str, headers: Mapping[str, str] | None = None) -> Request:
    """A request built in process (tests, tools): no connection behind it."""
    return Request(method, path, Headers((headers or {}).items()))


class Response:
    """A status, headers (in order, names as written) and the body's parts.

    ``text`` is encoded with ``charset`` (UTF-8 by default) and typed ``text/plain`` unless ``content_type`` says
    otherwise; ``body`` is bytes or a sequence of parts, typed only when ``content_type`` is given. A
    ``Content-Type`` in ``headers`` wins over both. ``Content-Length`` and ``Date`` are the server's to add.
    """

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        *,
        text: str | None = None,
        body: bytes | Sequence[bytes] = b"",
        content_type: str | None = None,
        charset: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.headers: dict[str, str] = dict(headers or {})
        if text is not None:
            charset = charset or "utf-8"
            content_type = content_type or "text/plain"
            self.body: tuple[bytes, ...] = (text.encode(charset),)
        else:
            self.body = (body,) if isinstance(body, bytes) else tuple(body)
        if content_type is not None and not any(name.lower() == "content-type" for name in self.headers):
            self.headers["Content-Type"] = f"{content_type}; charset={charset}" if charset else content_type

    @property
    def content_length(self) -> int:
        return sum(len(part) for part in self.body)

    @property
    def content_type(self) -> str:
        """The media type, without parameters (``text/plain``); empty when untyped."""
        for name, value in self.headers.items():
            if name.lower() == "content-type":
                return value.split(";", 1)[0].strip()
        return ""

    def joined(self) -> bytes:
        """The whole body in one piece (for a caller that reads it in process, not for the wire)."""
        return b"".join(self.body)

    @property
    def text(self) -> str:
        return self.joined().decode("utf-8", "replace")


class NotFound(Exception):
    """No route has this path."""


class MethodNotAllowed(Exception):
    """The path is routed, not for this method."""

    def __init__(self, allowed: Iterable[str]) -> None:
        super().__init__("method not allowed")
        self.allowed = tuple(sorted(allowed))


class Redirect(Exception):
    """The path is not clean: Go's ServeMux sends the client to the clean one, whether it is routed or not."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def go_clean_path(path: str) -> str:
    """Go's ``net/http`` ``cleanPath``: ``path.Clean`` (no ``//``, ``.`` or ``..`` segments, ``..`` stopping at the
    root), keeping a trailing slash."""
    cleaned = posixpath.normpath(path if path.startswith("/") else "/" + path)
    if cleaned.startswith("//"):  # POSIX keeps two leading slashes; Go's path.Clean does not
        cleaned = "/" + cleaned.lstrip("/")
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


_PATH_SAFE = "$&+,/:;=@"  # what net/url leaves unescaped in a path besides letters, digits and -_.~
_VALID_ENCODED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~$&+,/:;=@!'()*[]%")


def _escaped_path(raw: str) -> str:
    """``url.URL.EscapedPath()`` of a request's path as sent: itself when it is a valid encoding, else the decoded
    path escaped again (``<`` becomes ``%3C``, a raw UTF-8 byte ``%C3``)."""
    sent = raw.encode("utf-8", "surrogateescape")
    if all(byte in _VALID_ENCODED for byte in sent):
        return raw
    from urllib.parse import quote, unquote_to_bytes  # noqa: PLC0415 - only for a path sent not validly encoded

    return quote(unquote_to_bytes(sent), safe=_PATH_SAFE)


def _location(path: str, query: str) -> str:
    """The clean path and the query as sent, bytes beyond ASCII escaped as ``http.Redirect`` escapes them."""
    if not query:
        return path
    raw = query.encode("utf-8", "surrogateescape")
    return path + "?" + "".join(chr(byte) if byte < 0x80 else f"%{byte:02x}" for byte in raw)


class App:
    """Exact-path routes, middlewares (the first listed is the outermost) and hooks run on every response."""

    def __init__(self, middlewares: Iterable[Middleware] = ()) -> None:
        self.middlewares: list[Middleware] = list(middlewares)
        self.on_response_prepare: list[ResponseHook] = []
        self._routes: dict[str, dict[str, Handler]] = {}
        self._chain: tuple[tuple[Middleware, ...], Handler] | None = None  # the middlewares composed, once

    def add_get(self, path: str, handler: Handler, *, allow_head: bool = True) -> None:
        """Route GET ``path`` to ``handler``, and HEAD too unless ``allow_head`` is False (answered without a body)."""
        methods = self._routes.setdefault(path, {})
        if "GET" in methods:
            raise ValueError(f"a GET route for {path} already exists")
        methods["GET"] = handler
        if allow_head:
            methods["HEAD"] = handler

    def routes(self) -> dict[str, tuple[str, ...]]:
        """Each routed path and its methods."""
        return {path: tuple(methods) for path, methods in self._routes.items()}

    async def _route(self, request: Request) -> Response:
        sent = _origin_form(request.target).partition("?")[0]
        if request.path.startswith("/") and request.method != "CONNECT":  # Go cleans the path as sent, not decoded
            escaped = _escaped_path(sent)
            clean = go_clean_path(escaped)
            if clean != escaped:
                raise Redirect(_location(clean, request.query_string))
        # Go's ServeMux splits the path as sent and unescapes each segment: an escaped slash stays inside its
        # segment, which no route's segments can equal, so the path routes nowhere (``/-%2Fhealthy``).
        if request.path.count("/") != sent.count("/"):
            raise NotFound
        methods = self._routes.get(request.path)
        if methods is None:
            raise NotFound
        handler = methods.get(request.method)
        if handler is None:
            raise MethodNotAllowed(methods)
        return await handler(request)

    async def handle(self, request: Request) -> Response:
        """The response to ``request``: routed through every middleware, then through the response hooks."""
        middlewares = tuple(self.middlewares)
        if self._chain is None or self._chain[0] != middlewares:  # composed again only if the list changed
            handler: Handler = self._route
            for middleware in reversed(middlewares):
                handler = _bind(middleware, handler)
            self._chain = (middlewares, handler)
        response = await self._chain[1](request)
        for hook in self.on_response_prepare:
            hook(request, response)
        return response


def _bind(middleware: Middleware, handler: Handler) -> Handler:
    async def bound(request: Request) -> Response:
        return await middleware(request, handler)

    return bound

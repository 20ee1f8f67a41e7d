"""Which route a request target names, and the route table (pure; SPEC §5, §5.1).

The contract must not be escapable through the spelling of the path: an engine behind the router
(Starlette/uvicorn in SGLang) routes on the percent-decoded path, so ``/v1/chat%2Fcompletions``
would reach its chat handler. The router therefore classifies the *canonical* path
(percent-decoded, dot-segments resolved, repeated and trailing slashes removed) and forwards
judged requests with that canonical path, so what it judged is what the engine serves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote_to_bytes

from dataplane.errors import SettingsError
from dataplane.router.contract.dialects import (
    CHAT,
    COMPLETIONS,
    DIALECTS,
    GENERATE,
    MESSAGES,
    OLLAMA,
    RESPONSES,
    TRANSCRIPTION,
    VERTEX,
    Dialect,
)


def split_target(target: bytes) -> tuple[bytes, bytes]:
    """``/p?q`` -> (``/p``, ``?q``); the query keeps its ``?`` (or is empty).

    The path also ends at a ``#``: a fragment has no place in a request target (RFC 9112
    §3.2), but the engine's URL parser (httptools under uvicorn) drops it and routes
    ``/v1/chat/completions#x`` to chat, so it must be judged as that path too.

    An absolute-form target (``http://host/p?q``, RFC 9112 §3.2.2: a server must accept it, and
    the engine routes it on its path) is reduced to its origin form first.
    """
    if target[:1] != b"/":
        target = _origin_form(target)
    cut = target.find(b"?")
    fragment = target.find(b"#", 0, None if cut < 0 else cut)
    if fragment >= 0:
        return target[:fragment], b""
    if cut < 0:
        return target, b""
    return target[:cut], target[cut:]


def _origin_form(target: bytes) -> bytes:
    """``scheme://authority/p?q`` -> ``/p?q`` (``/`` when the path is empty); other targets as is."""
    scheme_end = target.find(b"://")
    if scheme_end <= 0:
        return target
    start = scheme_end + 3
    ends = [i for i in (target.find(c, start) for c in (b"/", b"?", b"#")) if i >= 0]
    if not ends:
        return b"/"
    rest = target[min(ends) :]
    return rest if rest[:1] == b"/" else b"/" + rest


def canonical_path(path: bytes) -> bytes:
    """The path as a decoding, normalising server would route it.

    Fast path: an ordinary path (no ``%``, no empty or dot segment, no trailing slash) is
    returned as is.
    """
    if b"%" not in path and b"//" not in path and b"/." not in path and not path.endswith(b"/"):
        return path
    # Decode until stable: a server decoding twice must not see more than we did.
    for _ in range(4):
        decoded = unquote_to_bytes(path)
        if decoded == path:
            break
        path = decoded
    segments: list[bytes] = []
    for segment in path.split(b"/"):
        if segment in (b"", b"."):
            continue
        if segment == b"..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    return b"/" + b"/".join(segments)


# -- the route table (SPEC §5.1: default-deny) ------------------------------------------------

# The router's own GET surface (SPEC §5; ``path.endpoints``), never mapped to a worker route;
# and ``/v1/models/{model}`` under this prefix.
ROUTER_PATHS: Final = ("/v1/models", "/health", "/readiness", "/metrics", "/contract")
MODELS_PREFIX: Final = "/v1/models/"

POST: Final = frozenset((b"POST",))
POST_PUT: Final = frozenset((b"POST", b"PUT"))
ANY_METHOD: Final = frozenset((b"GET", b"HEAD", b"POST", b"PUT", b"PATCH", b"DELETE", b"OPTIONS"))
_ID: Final = b"{id}"  # one path segment (Starlette's ``{response_id}``)


class RouteError(SettingsError):
    """A ``--route``/``--unjudged-route`` value the router cannot start with."""


@dataclass(frozen=True, slots=True)
class Route:
    """One entry of the table: the path as listed (and as the metrics label), the dialect it is
    judged by (None: forwarded unjudged) and the methods it serves."""

    path: str
    dialect: Dialect | None
    methods: frozenset[bytes]
    origin: str = "default"  # or "--route" / "--unjudged-route"

    @property
    def allow(self) -> list[tuple[bytes, bytes]]:
        """The ``allow`` header of a 405 on this route (RFC 9110 §15.5.6)."""
        return [(b"allow", b", ".join(sorted(self.methods)))]

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "methods": sorted(m.decode() for m in self.methods),
            "dialect": self.dialect.name if self.dialect is not None else None,
            "judged": self.dialect is not None,
            "origin": self.origin,
        }


def _judged(path: str, dialect: Dialect, methods: frozenset[bytes] = POST) -> Route:
    return Route(path, dialect, methods)


def _unjudged(path: str, methods: frozenset[bytes] = POST) -> Route:
    return Route(path, None, methods)


# SGLang 0.5.23's routes (``http_server.py``), SPEC §5.1: every route that lets a client choose
# how tokens are sampled, judged at its own field paths; the routes that sample nothing,
# forwarded unjudged; nothing else.
DEFAULT_ROUTES: Final[tuple[Route, ...]] = (
    _judged("/v1/chat/completions", CHAT),
    _judged("/invocations", CHAT),  # SageMaker: a full ChatCompletionRequest
    _judged("/v1/completions", COMPLETIONS),
    _judged("/generate", GENERATE, POST_PUT),
    _judged("/v1/responses", RESPONSES),
    _judged("/v1/messages", MESSAGES),
    _judged("/api/chat", OLLAMA),  # SGLANG_OLLAMA_CHAT_ROUTE
    _judged("/api/generate", OLLAMA),  # SGLANG_OLLAMA_GENERATE_ROUTE
    _judged("/vertex_generate", VERTEX),  # AIP_PREDICT_ROUTE
    _judged("/v1/audio/transcriptions", TRANSCRIPTION),
    _unjudged("/v1/embeddings"),
    _unjudged("/v1/classify"),
    _unjudged("/classify", POST_PUT),
    _unjudged("/encode", POST_PUT),
    _unjudged("/v1/tokenize"),
    _unjudged("/tokenize"),
    _unjudged("/v1/detokenize"),
    _unjudged("/detokenize"),
    _unjudged("/v1/rerank", POST_PUT),
    # Their temperature scales a scoring softmax: no token is sampled.
    _unjudged("/v1/score"),
    _unjudged("/v1/decisions"),
    _unjudged("/v1/systemone"),  # scores candidates; the engine refuses a temperature there
    _unjudged("/v1/messages/count_tokens"),
    _unjudged("/v1/responses/{id}", frozenset((b"GET", b"HEAD"))),
    _unjudged("/v1/responses/{id}/cancel"),
)


class RouteTable:
    """The routes the router serves towards workers, built once at start-up (SPEC §5.1).

    ``lookup`` takes a canonical path (``canonical_path``) and returns its route, or None: the
    path is refused (``404 route_not_found``). Paths are matched exactly (case included, as the
    engine's router does); ``{id}`` stands for one non-empty path segment.
    """

    __slots__ = ("_exact", "_templates", "routes")

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes: tuple[Route, ...] = tuple(routes)
        self._exact: dict[bytes, Route] = {}
        self._templates: list[tuple[bytes, bytes, Route]] = []
        for route in self.routes:
            path = route.path.encode()
            if _ID in path:
                prefix, _, suffix = path.partition(_ID)
                self._templates.append((prefix, suffix, route))
            else:
                self._exact[path] = route

    def lookup(self, path: bytes) -> Route | None:
        route = self._exact.get(path)
        if route is not None or not self._templates:
            return route
        for prefix, suffix, template in self._templates:
            if path.startswith(prefix) and path.endswith(suffix):
                segment = path[len(prefix) : len(path) - len(suffix)]
                if segment and b"/" not in segment:
                    return template
        return None

    def judged(self) -> tuple[Route, ...]:
        return tuple(r for r in self.routes if r.dialect is not None)

    def to_json(self) -> list[dict[str, object]]:
        """The table as ``GET /contract`` lists it."""
        return [route.to_json() for route in self.routes]


def _operator_path(flag: str, value: str) -> str:
    if not value.startswith("/"):
        raise RouteError(f"{flag} {value!r}: the path must start with '/', e.g. /ollama/chat")
    if "?" in value or "#" in value or any(c.isspace() for c in value):
        raise RouteError(f"{flag} {value!r}: a path only (no query, fragment or spaces)")
    path = canonical_path(value.encode()).decode("utf-8", "replace")
    if _ID.decode() in path:
        raise RouteError(f"{flag} {value!r}: a fixed path (no {{id}} templates)")
    return path


def build_route_table(routes: Sequence[str] = (), unjudged: Sequence[str] = ()) -> RouteTable:
    """SPEC §5.1's table plus the operator's ``--route PATH=DIALECT`` and
    ``--unjudged-route PATH`` values; raises ``RouteError`` naming the flag and the value.

    An operator maps moved or extra engine routes; the default judged routes keep their dialect
    (judging one by another dialect's rules, or not at all, would let values through that the
    engine reads): re-stating one is accepted, changing it is refused; the router's own
    paths cannot be mapped.
    """
    table: dict[str, Route] = {route.path: route for route in DEFAULT_ROUTES}
    added: set[str] = set()

    def add(flag: str, value: str, route: Route) -> None:
        if route.path in ROUTER_PATHS or route.path.startswith(MODELS_PREFIX):
            raise RouteError(f"{flag} {value!r}: {route.path} is the router's own endpoint")
        old = table.get(route.path)
        if route.path in added:
            raise RouteError(f"{flag} {value!r}: {route.path} is mapped twice")
        if old is not None and old.dialect is not None:
            if old.dialect is route.dialect:
                return  # the default already says so
            now = "forwarded unjudged" if route.dialect is None else f"judged as {route.dialect.name}"
            raise RouteError(
                f"{flag} {value!r}: {route.path} carries sampling fields and is judged as "
                f"{old.dialect.name}; it cannot be {now}"
            )
        added.add(route.path)
        table[route.path] = route

    for value in routes:
        path, sep, name = value.rpartition("=")
        if not sep or not path:
            raise RouteError(f"--route {value!r}: expected PATH=DIALECT, e.g. /ollama/chat=ollama")
        dialect = DIALECTS.get(name)
        if dialect is None:
            raise RouteError(f"--route {value!r}: unknown dialect {name!r} (one of: {', '.join(DIALECTS)})")
        methods = POST_PUT if dialect is GENERATE else POST
        add("--route", value, Route(_operator_path("--route", path), dialect, methods, "--route"))
    for value in unjudged:
        path = _operator_path("--unjudged-route", value)
        add("--unjudged-route", value, Route(path, None, ANY_METHOD, "--unjudged-route"))
    return RouteTable(list(table.values()))

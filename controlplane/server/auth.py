"""Bearer tokens and roles (SPEC §6 Auth): who may call which method.

The tokens file (``--auth-tokens FILE``) is a JSON object mapping each token's *name* to its
secret and role::

    {
      "ops":      {"token": "s3cr3t-admin",  "role": "admin"},
      "router-a": {"token": "s3cr3t-router", "role": "router"},
      "grafana":  {"token": "s3cr3t-viewer", "role": "viewer"}
    }

``{"NAME": ["TOKEN", "ROLE"]}``, a list of ``{"name", "token", "role"}`` objects and plain
lines of ``NAME TOKEN ROLE`` (spaces, commas or colons between; ``#`` comments) are read too:
SPEC §6 only says the file maps names to (token, role).

The name is what history records as the author of a change. Roles (SPEC §6), by method-name
verb: ``admin`` may call everything; ``router`` watch, report, and get/list of contracts, workers
and loads (``Get*``, ``List*``, ``Watch*`` of ContractService and LoadService, ``Report*`` of
RouterService: not ``GetRejectionStats`` nor ``ListRouters``), and only for router ids of its
own namespace, the token's name or ``NAME/...`` (``may_report_as``); ``viewer`` ``Get*``,
``List*`` and ``Watch*`` of every ``controlplane.*`` service (which covers
``GetRejectionStats``). Health and reflection are open to everyone. Without a tokens file every
caller is the admin ``anonymous`` (the control plane then only listens on loopback).

Pure: no gRPC here; the interceptor adapts it.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import json
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

OPEN_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)
PROTECTED_PACKAGE = "controlplane."


class Role(enum.Enum):
    ADMIN = "admin"
    ROUTER = "router"
    VIEWER = "viewer"


_READ = ("Get", "List", "Watch")
# The verbs a role may call, by service (None: any controlplane.* service).
_VERBS: Mapping[Role, Mapping[str | None, tuple[str, ...]]] = {
    Role.ROUTER: {
        "controlplane.v1.ContractService": _READ,
        "controlplane.v1.LoadService": _READ,
        "controlplane.v1.RouterService": ("Report",),
    },
    Role.VIEWER: {None: _READ},
}


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: the token's name (the author of its changes) and role."""

    name: str
    role: Role


ANONYMOUS = Principal("anonymous", Role.ADMIN)

# Set by the interceptor for the duration of each call (each RPC runs in its own task).
CURRENT_PRINCIPAL: ContextVar[Principal] = ContextVar("fleetplane_principal", default=ANONYMOUS)


def current_principal() -> Principal:
    """The caller of the RPC being served."""
    return CURRENT_PRINCIPAL.get()


def split_method(full_method: str) -> tuple[str, str]:
    """``/controlplane.v1.ContractService/GetContract`` -> (service, method)."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service, method


def is_open(full_method: str) -> bool:
    return split_method(full_method)[0] in OPEN_SERVICES


def allows(role: Role, full_method: str) -> bool:
    """Whether ``role`` may call ``full_method`` (see the module docstring)."""
    if role is Role.ADMIN:
        return True
    service, method = split_method(full_method)
    if not service.startswith(PROTECTED_PACKAGE):
        return False
    verbs = _VERBS[role]
    return method.startswith(verbs.get(service, verbs.get(None, ())))


def may_report_as(principal: Principal, router_id: str) -> bool:
    """Whether ``principal`` may report status as ``router_id``: a router token only for its own
    name or ``NAME/...`` (SPEC §6), so one router's token cannot move another's counts."""
    if principal.role is not Role.ROUTER:
        return principal.role is Role.ADMIN
    return router_id == principal.name or router_id.startswith(principal.name + "/")


def http_token(authorization: str | None) -> str | None:
    """The token of an HTTP ``Authorization`` value: ``Bearer T``, or ``Basic`` with T as the password.

    Basic (RFC 7617) so that a browser can log in to the status page: any user name, the token
    as the password.
    """
    if authorization is None:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return credentials.strip() or None
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, colon, password = decoded.partition(":")
    return password if colon and password else None


class TokenFileError(ValueError):
    """The tokens file cannot be used; the message says why (never quoting a secret)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    secret: bytes
    principal: Principal


class TokenTable:
    """Looks a presented token up in constant time per entry."""

    def __init__(self, entries: Mapping[str, tuple[str, Role]]) -> None:
        self._entries = tuple(
            _Entry(token.encode(), Principal(name, role)) for name, (token, role) in entries.items()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, presented: str) -> Principal | None:
        # Compare against every entry (no early exit) with hmac.compare_digest so timing says
        # nothing about which, or how much of, a secret matched.
        candidate = presented.encode()
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.secret, candidate):
                found = entry.principal
        return found


def parse_tokens(text: str) -> TokenTable:
    """Parse the tokens file (see the module docstring): JSON, or one ``NAME TOKEN ROLE`` per line."""
    entries = _json_entries(text) if text.lstrip()[:1] in ("{", "[") else _line_entries(text)
    if not entries:
        raise TokenFileError(f"names no token; expected {_SHAPES}")
    roles = ", ".join(r.value for r in Role)
    table: dict[str, tuple[str, Role]] = {}
    seen: dict[str, str] = {}
    for name, token, role in entries:
        if not isinstance(name, str) or not name:
            raise TokenFileError("a token name is empty")
        if name in table:
            raise TokenFileError(f"{name!r}: listed twice")
        if not isinstance(token, str) or not token or not token.isprintable() or " " in token:
            raise TokenFileError(f"{name!r}: token must be a non-empty printable string without spaces")
        if not isinstance(role, str) or role.lower() not in {r.value for r in Role}:
            raise TokenFileError(f"{name!r}: role must be one of {roles}, got {role!r}")
        if token in seen:
            raise TokenFileError(f"{name!r}: same token as {seen[token]!r}")
        seen[token] = name
        table[name] = (token, Role(role.lower()))
    return TokenTable(table)


_SHAPES = (
    '{"NAME": {"token": "...", "role": "admin|router|viewer"}} (or {"NAME": ["TOKEN", "ROLE"]}, '
    '[{"name": ..., "token": ..., "role": ...}], or lines of NAME TOKEN ROLE)'
)
_Entry3 = tuple[object, object, object]


def _json_entries(text: str) -> list[_Entry3]:
    """``{name: {"token", "role"}}``, ``{name: [token, role]}`` or ``[{"name", "token", "role"}]``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenFileError(f"not valid JSON ({exc.msg} at line {exc.lineno}); expected {_SHAPES}") from None
    entries: list[_Entry3] = []
    if isinstance(doc, dict):
        for name, spec in doc.items():
            if isinstance(spec, dict) and set(spec) == {"token", "role"}:
                entries.append((name, spec["token"], spec["role"]))
            elif isinstance(spec, list) and len(spec) == 2:
                entries.append((name, spec[0], spec[1]))
            else:
                raise TokenFileError(f'{name!r}: must be {{"token": ..., "role": ...}} or [TOKEN, ROLE]')
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            if not isinstance(item, dict) or set(item) != {"name", "token", "role"}:
                raise TokenFileError(f'entry {i}: must be {{"name": ..., "token": ..., "role": ...}}')
            entries.append((item["name"], item["token"], item["role"]))
    return entries


def _line_entries(text: str) -> list[_Entry3]:
    """``NAME TOKEN ROLE`` per line, separated by spaces, commas or colons; ``#`` starts a comment."""
    entries: list[_Entry3] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        sep = next((c for c in ",:" if c in line), None)
        if sep is None:
            fields = line.split()
        else:  # the token may hold the separator: the name is first and the role last
            name, _, rest = line.partition(sep)
            token, _, role = rest.rpartition(sep)
            fields = [name, token, role] if token else []
        fields = [f.strip() for f in fields]
        if len(fields) != 3:
            raise TokenFileError(f"line {lineno}: not valid JSON, nor NAME TOKEN ROLE; expected {_SHAPES}")
        if [f.lower() for f in fields] != ["name", "token", "role"]:  # a CSV header line
            entries.append((fields[0], fields[1], fields[2]))
    return entries


def load_tokens(path: Path) -> TokenTable:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenFileError(f"cannot read: {exc.strerror}") from None
    return parse_tokens(text)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` value (scheme case-insensitive)."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()

"""The router's client API keys (``--api-keys FILE``): the key file's format and who a request is.

The file is a JSON object ``{"NAME": {"key": "..."}}``: each client has a name (what metrics,
the access log and ``GetRejectionStats`` ``by_client`` show) and a key (what it sends). A
client sends its key as ``Authorization: Bearer KEY`` (the OpenAI clients' ``api_key``) or as
``x-api-key: KEY`` (the Anthropic clients'; SGLang-compatible routers accept both).

Keys are compared with ``hmac.compare_digest`` against every key of the file, so how long a
refusal takes tells nothing about how close a guess was. A key never appears in an error
message, a log line or ``repr``. Pure: parsing is fed the file's text.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence

from dataplane.errors import RouterError

# Names become metric label values and stats keys: short, printable, no spaces (as router ids).
MAX_NAME_CHARS = 64
# A key shorter than this is guessable; OpenAI's own keys are far longer.
MIN_KEY_CHARS = 16
MAX_KEY_CHARS = 4096
MAX_CLIENTS = 1000
_BEARER = b"bearer "


class ApiKeysError(ValueError):
    """The key file is unusable: the message names the problem (never a key)."""


class InvalidApiKey(RouterError):
    """No key, or not one of ``--api-keys`` (OpenAI's own code for a wrong key)."""

    status, code, default_message = (
        401,
        "invalid_api_key",
        "missing or invalid API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
    )


class _Duplicate(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # json.loads keeps the last of two equal names: a client named twice would lose a key silently.
    seen: dict[str, object] = {}
    for name, value in pairs:
        if name in seen:
            raise _Duplicate(name)
        seen[name] = value
    return seen


def parse_api_keys(text: str) -> ClientKeys:
    """The clients of a key file's text; raises ``ApiKeysError`` saying what is wrong."""
    try:
        document = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as exc:
        raise ApiKeysError(f"client {exc.args[0]!r} is named twice") from None
    except json.JSONDecodeError as exc:
        raise ApiKeysError(f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    if not isinstance(document, dict):
        raise ApiKeysError('must be a JSON object {"NAME": {"key": "..."}}')
    if not document:
        raise ApiKeysError("names no client: every request would be refused")
    if len(document) > MAX_CLIENTS:
        raise ApiKeysError(f"{len(document)} clients: at most {MAX_CLIENTS}")
    clients: list[tuple[str, bytes]] = []
    seen: dict[bytes, str] = {}
    for name, entry in document.items():
        if not name or len(name) > MAX_NAME_CHARS or not name.isprintable() or any(c.isspace() for c in name):
            raise ApiKeysError(
                f"client name {name[:MAX_NAME_CHARS]!r}: must be 1..{MAX_NAME_CHARS} printable characters "
                "without spaces"
            )
        if not isinstance(entry, dict) or "key" not in entry:
            raise ApiKeysError(f'client {name!r}: must be an object {{"key": "..."}}')
        unknown = sorted(set(entry) - {"key"})
        if unknown:
            raise ApiKeysError(f"client {name!r}: unknown field {unknown[0]!r} (only 'key')")
        key = entry["key"]
        if not isinstance(key, str):
            raise ApiKeysError(f"client {name!r}: key must be a string")
        if not MIN_KEY_CHARS <= len(key) <= MAX_KEY_CHARS:
            raise ApiKeysError(
                f"client {name!r}: key must be {MIN_KEY_CHARS}..{MAX_KEY_CHARS} characters, has {len(key)}"
            )
        if not key.isascii() or not key.isprintable() or " " in key:
            raise ApiKeysError(f"client {name!r}: key must be printable ASCII without spaces")
        raw = key.encode("ascii")
        if raw in seen:
            raise ApiKeysError(f"clients {seen[raw]!r} and {name!r} have the same key")
        seen[raw] = name
        clients.append((name, raw))
    return ClientKeys(clients)


class ClientKeys:
    """The clients of ``--api-keys`` and their request counts (names bounded by the file)."""

    __slots__ = ("_keys", "names", "requests")

    def __init__(self, clients: Sequence[tuple[str, bytes]]) -> None:
        self._keys = tuple((key, name) for name, key in clients)
        self.names = tuple(name for name, _ in clients)
        # Requests let through, by client (fleetplane_client_requests_total).
        self.requests: dict[str, int] = dict.fromkeys(self.names, 0)

    def client_of(self, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
        """The name of the client whose key the request carries, or None (then: 401)."""
        presented = None
        for name, value in headers:
            if name == b"authorization":
                if value[:7].lower() == _BEARER:
                    presented = value[7:].strip()
                break
            if name == b"x-api-key":
                presented = value.strip()
                break
        if not presented:
            return None
        found = None
        for key, client in self._keys:
            # Every key is compared, matched or not: the time does not depend on which one matched.
            if hmac.compare_digest(key, presented):
                found = client
        if found is not None:
            self.requests[found] += 1
        return found

    def __repr__(self) -> str:
        return f"<ClientKeys {len(self._keys)} clients>"  # never the keys

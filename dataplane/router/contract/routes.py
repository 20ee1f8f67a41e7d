"""Which endpoint a request target names (pure; SPEC §5).

The contract must not be escapable through the spelling of the path: an engine behind the router
(Starlette/uvicorn in SGLang) routes on the percent-decoded path, so ``/v1/chat%2Fcompletions``
would reach its chat handler. The router therefore classifies the *canonical* path
(percent-decoded, dot-segments resolved, repeated and trailing slashes removed) and forwards
judged requests with that canonical path, so what it judged is what the engine serves.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import unquote_to_bytes

CHAT: Final = b"/v1/chat/completions"
COMPLETIONS: Final = b"/v1/completions"
GENERATE: Final = b"/generate"

# Judged endpoints -> whether the sampling fields live under ``sampling_params``.
JUDGED: Final[dict[bytes, bool]] = {CHAT: False, COMPLETIONS: False, GENERATE: True}


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

"""The one spelling of a worker URL, shared by both planes (SPEC §1 ``--worker``, §6 RegisterWorker).

A worker is known by its URL: the registry's key, ``WorkerLoad.url`` in WatchLoads, the router's
worker set. Both planes must spell one worker alike, or the control plane's load view of it
would never meet the router's worker. Scheme and host are case-insensitive, the default port
may be left out and an empty path is ``/`` (RFC 3986 §6.2.2.1, §6.2.3), so the normal form is
``scheme://host[:port]``: lower case, no port 80, no trailing slash, an IPv6 literal compressed
in brackets. Each plane validates a URL its own way and with its own messages; both then spell
it here.

A shared leaf: pure, standard library only; the data plane imports it (``dataplane.router``
parses ``--worker`` and registry URLs with it).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

WORKER_SCHEMES = ("http", "h2c")
DEFAULT_PORT = 80  # of both schemes: h2c:// is cleartext HTTP/2 on http's port


@dataclass(frozen=True, slots=True)
class WorkerUrl:
    """A worker URL in normal form (build it with ``of``); ``url`` is the registry key."""

    scheme: str
    host: str  # lower case; an IPv6 literal compressed, without brackets
    port: int | None  # None: the default port

    @staticmethod
    def of(scheme: str, host: str, port: int | None) -> WorkerUrl:
        """The normal form of a split URL (``host`` as ``urlsplit(...).hostname`` gives it)."""
        return WorkerUrl(scheme.lower(), _normal_host(host), None if port == DEFAULT_PORT else port)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def connect_port(self) -> int:
        return DEFAULT_PORT if self.port is None else self.port


def worker_url(scheme: str, host: str, port: int | None) -> str:
    """The normal spelling of a worker URL from its parts (see the module docstring)."""
    return WorkerUrl.of(scheme, host, port).url


def _normal_host(host: str) -> str:
    if ":" in host:
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            pass  # not an IPv6 literal: the caller's validation says what it is
    return host.lower()

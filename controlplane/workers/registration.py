"""Worker registration (pure): URL, endpoint, model and protocol validation (SPEC §6).

Validation failures raise ``InvalidArgument`` naming the field, which the server maps to
``INVALID_ARGUMENT``. Worker URLs are ``http://HOST[:PORT]`` or ``h2c://HOST[:PORT]``
(``h2c://`` forces HTTP/2 prior knowledge, SPEC §1); load endpoints are ``tcp://HOST:PORT``
(SPEC §7), where a wildcard host (as an engine's bind address reads) means the worker's own host.
"""

from __future__ import annotations

import ipaddress
from typing import TypeGuard
from urllib.parse import SplitResult, urlsplit

from controlplane.errors import InvalidArgument
from controlplane.store.workers import Protocol
from controlplane.workers.url import WORKER_SCHEMES, WorkerUrl

WILDCARD_HOSTS = frozenset({"*", "0.0.0.0", "::", "[::]"})
MAX_LOAD_ENDPOINTS = 1024
MAX_MODELS = 256
MAX_MODEL_NAME = 256
MAX_HOST_NAME = 253


def parse_worker_url(raw: str, field_name: str = "url") -> WorkerUrl:
    """Validate a worker URL; its normal form (``workers.url``, shared with the router) is the key."""
    text = raw.strip()
    if not text:
        raise InvalidArgument(
            f"{field_name}: is required (http://HOST:PORT or h2c://HOST:PORT)", field=field_name
        )
    parts = _split(text, field_name)
    scheme = parts.scheme.lower()
    if scheme not in WORKER_SCHEMES:
        raise InvalidArgument(
            f"{field_name}: scheme must be http or h2c, got {_shown(raw)}", field=field_name
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidArgument(
            f"{field_name}: must be a base URL without path, query or credentials, got {_shown(raw)}",
            field=field_name,
        )
    host, port = _host_port(parts, raw, field_name)
    # http://h:80 and http://h are one worker (RFC 3986 §6.2.3)
    return WorkerUrl.of(scheme, host, port)


def parse_load_endpoint(raw: str, worker: WorkerUrl, field_name: str = "load_endpoints") -> str:
    """Validate a ``tcp://HOST:PORT`` endpoint; a wildcard host becomes the worker's host."""
    text = raw.strip()
    parts = _split(text, field_name)
    if parts.scheme.lower() != "tcp":
        raise InvalidArgument(f"{field_name}: must be tcp://HOST:PORT, got {_shown(raw)}", field=field_name)
    if parts.path or parts.query or parts.fragment or parts.username or parts.password:
        raise InvalidArgument(f"{field_name}: must be tcp://HOST:PORT, got {_shown(raw)}", field=field_name)
    netloc = parts.netloc
    wildcard = netloc.rsplit(":", 1)[0] in WILDCARD_HOSTS
    host, port = (
        (worker.host, _wildcard_port(netloc, raw, field_name))
        if wildcard
        else _host_port(parts, raw, field_name)
    )
    if port is None:
        raise InvalidArgument(f"{field_name}: a port is required, got {_shown(raw)}", field=field_name)
    if host in WILDCARD_HOSTS:  # another spelling of one, e.g. [0:0::0]
        host = worker.host
    return tcp_endpoint(host, port)


def tcp_endpoint(host: str, port: int) -> str:
    bracketed = f"[{host}]" if ":" in host else host
    return f"tcp://{bracketed}:{port}"


def parse_load_endpoints(raws: list[str], worker: WorkerUrl) -> tuple[str, ...]:
    if len(raws) > MAX_LOAD_ENDPOINTS:
        raise InvalidArgument(
            f"load_endpoints: at most {MAX_LOAD_ENDPOINTS} (one per dp rank), got {len(raws)}",
            field="load_endpoints",
        )
    endpoints = tuple(parse_load_endpoint(raw, worker, f"load_endpoints[{i}]") for i, raw in enumerate(raws))
    if len(set(endpoints)) != len(endpoints):
        raise InvalidArgument("load_endpoints: an endpoint is listed twice", field="load_endpoints")
    return endpoints


def parse_models(raws: list[str]) -> tuple[str, ...]:
    if len(raws) > MAX_MODELS:
        raise InvalidArgument(f"models: at most {MAX_MODELS}, got {len(raws)}", field="models")
    models: list[str] = []
    for i, name in enumerate(raws):
        if not is_model_name(name):
            raise InvalidArgument(
                f"models[{i}]: must be a printable name of 1..{MAX_MODEL_NAME} characters, got {_shown(name)}",
                field="models",
            )
        if name not in models:
            models.append(name)
    return tuple(models)


def is_model_name(name: object) -> TypeGuard[str]:
    """A model name as RegisterWorker takes it: printable, 1..MAX_MODEL_NAME characters."""
    return isinstance(name, str) and 0 < len(name) <= MAX_MODEL_NAME and name.isprintable()


def advertised_host(host: str) -> str | None:
    """A host as an engine advertises it (``endpoint_host``), unbracketed; None when malformed."""
    bracketed = host.startswith("[") and host.endswith("]")
    text = host[1:-1] if bracketed else host
    if bracketed or ":" in text:
        try:
            address = ipaddress.IPv6Address(text)
        except ValueError:
            return None
        return str(address) if address.scope_id is None else None
    return text.lower() if is_host_name(text) else None


def parse_protocol(value: int, address: WorkerUrl) -> Protocol:
    """The protocol asked for; UNSPECIFIED is AUTO, and ``h2c://`` conflicts with HTTP1."""
    if value == 0:
        return Protocol.AUTO
    try:
        protocol = Protocol(value)
    except ValueError:
        raise InvalidArgument(f"protocol: unknown value {value}", field="protocol") from None
    if address.scheme == "h2c" and protocol is Protocol.HTTP1:
        raise InvalidArgument("protocol: HTTP1 conflicts with an h2c:// url", field="protocol")
    return protocol


def _split(text: str, field_name: str) -> SplitResult:
    try:
        return urlsplit(text)
    except ValueError as exc:
        raise InvalidArgument(f"{field_name}: not a URL ({exc}): {_shown(text)}", field=field_name) from None


def _host_port(parts: SplitResult, raw: str, field_name: str) -> tuple[str, int | None]:
    try:
        host = parts.hostname
        port = parts.port
    except ValueError:
        raise InvalidArgument(
            f"{field_name}: port must be 1..65535, got {_shown(raw)}", field=field_name
        ) from None
    if not host:
        raise InvalidArgument(f"{field_name}: a host is required, got {_shown(raw)}", field=field_name)
    if port == 0:
        raise InvalidArgument(f"{field_name}: port must be 1..65535, got {_shown(raw)}", field=field_name)
    if "[" in parts.netloc or ":" in host:
        host = _ipv6(host, raw, field_name)
    elif not is_host_name(host):
        raise InvalidArgument(
            f"{field_name}: bad host in {_shown(raw)} (an IP address or a DNS name: ASCII labels of 1..63"
            f" characters, {MAX_HOST_NAME} in all)",
            field=field_name,
        )
    return host.lower(), port


def is_host_name(host: str) -> bool:
    """An IPv4 address or a DNS name a resolver accepts (RFC 1123: ASCII labels of 1..63).

    Checked here because a name the resolver refuses (an empty or overlong label, non-ASCII)
    fails inside the socket layer with ``UnicodeError``, not ``OSError``; an internationalised
    name is given in its ``xn--`` form.
    """
    if not host or len(host) > MAX_HOST_NAME or not host.isascii():
        return False
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    return all(0 < len(label) <= 63 and all(c.isalnum() or c in "-_" for c in label) for label in labels)


def _ipv6(host: str, raw: str, field_name: str) -> str:
    # A bracketed host is an IPv6 literal (not IPvFuture); no zone id: it names an interface
    # of the machine that reads the URL, which the control plane and a router do not share.
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        address = None
    if address is None or address.scope_id is not None:
        raise InvalidArgument(f"{field_name}: bad IPv6 address in {_shown(raw)}", field=field_name)
    return str(address)


def _wildcard_port(netloc: str, raw: str, field_name: str) -> int:
    _, _, port_text = netloc.rpartition(":")
    if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise InvalidArgument(f"{field_name}: port must be 1..65535, got {_shown(raw)}", field=field_name)
    return int(port_text)


def _shown(value: str, limit: int = 120) -> str:
    """``value`` quoted for a refusal, cut so the reason after it stays readable."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"… ({len(value)} characters)"

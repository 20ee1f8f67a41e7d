"""Frozen settings of ``fleetplane control`` (SPEC §1), validated at startup.

Every refusal is a ``SettingsError`` whose one-line message names the flag, the value and what
is allowed (SPEC §1: startup errors exit non-zero with one such line).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.envflags import read_key
from controlplane.errors import SettingsError

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_STORE = "sqlite:./.fleetplane/control.db"
DEFAULT_HTTP_LISTEN = "127.0.0.1:9464"


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name other than localhost may resolve anywhere


def parse_address(flag: str, value: str) -> Address:
    """``HOST:PORT`` or ``[V6]:PORT``; port 0 asks the OS for a free port."""
    host, sep, port_text = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise SettingsError(f"{flag} {value!r}: expected HOST:PORT (e.g. 127.0.0.1:50051, [::1]:50051)")
    return Address(host, int(port_text))


DEFAULT_ETCD_PREFIX = "fleetplane"


@dataclass(frozen=True, slots=True)
class EtcdLocation:
    """``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]``: the cluster's client endpoints and a key prefix.

    Several control planes given the same endpoints and prefix share one store (SPEC §6); two
    prefixes on one cluster never see each other's keys.
    """

    endpoints: tuple[Address, ...]
    prefix: str = DEFAULT_ETCD_PREFIX

    def __str__(self) -> str:
        return f"etcd://{','.join(str(e) for e in self.endpoints)}/{self.prefix}"


StoreLocation = Path | EtcdLocation


def parse_store(value: str) -> StoreLocation:
    """``sqlite:PATH`` -> PATH; ``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`` -> ``EtcdLocation``."""
    if value.startswith("sqlite:"):
        path = value[len("sqlite:") :]
        if not path:
            raise SettingsError(
                f"--store {value!r}: sqlite needs a path, e.g. sqlite:./.fleetplane/control.db"
            )
        return Path(path)
    if value.startswith("etcd://"):
        return _parse_etcd(value)
    raise SettingsError(
        f"--store {value!r}: expected sqlite:PATH or etcd://HOST:PORT[,HOST:PORT...][/PREFIX]"
    )


def _parse_etcd(value: str) -> EtcdLocation:
    hosts, _, prefix = value[len("etcd://") :].partition("/")
    prefix = prefix.strip("/") or DEFAULT_ETCD_PREFIX
    if not prefix.isprintable() or any(c.isspace() for c in prefix):
        raise SettingsError(f"--store {value!r}: the prefix must be printable without whitespace")
    endpoints: list[Address] = []
    for host in hosts.split(","):
        try:
            endpoints.append(parse_address("--store", host))
        except SettingsError:
            raise SettingsError(
                f"--store {value!r}: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX], "
                f"e.g. etcd://127.0.0.1:2379/fleetplane"
            ) from None
        if endpoints[-1].port == 0:
            raise SettingsError(f"--store {value!r}: an etcd endpoint needs a port other than 0")
    return EtcdLocation(tuple(endpoints), prefix)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None  # set: mTLS, clients must present a certificate signed by it


@dataclass(frozen=True, slots=True)
class ControlSettings:
    listen: Address
    store: StoreLocation
    auth_tokens: Path | None = None
    tls: TlsFiles | None = None
    http_listen: Address | None = None  # None: no HTTP listener
    load_stale_after_s: float = 3.0
    load_push_interval_ms: int = 50
    shutdown_grace_s: float = 2.0
    # Sent to workers on discovery (SGLang's --api-key); never shown (repr=False).
    worker_api_key: str | None = field(default=None, repr=False)

    @staticmethod
    def build(
        *,
        listen: str = DEFAULT_LISTEN,
        store: str = DEFAULT_STORE,
        auth_tokens: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
        http_listen: str | None = DEFAULT_HTTP_LISTEN,
        load_stale_after_s: float = 3.0,
        load_push_interval_ms: int = 50,
        worker_api_key: str | None = None,
        worker_api_key_file: str | None = None,
    ) -> ControlSettings:
        """Validate raw flag values (``http_listen`` None, "" or "off" disables HTTP)."""
        address = parse_address("--listen", listen)
        if auth_tokens is None and not address.loopback:
            raise SettingsError(
                f"--listen {listen!r}: a non-loopback address needs --auth-tokens FILE "
                "(without tokens, anyone who reaches the port could change contracts)"
            )
        if (tls_cert is None) != (tls_key is None):
            given = f"--tls-cert {tls_cert}" if tls_cert is not None else f"--tls-key {tls_key}"
            missing = "--tls-key" if tls_cert is not None else "--tls-cert"
            raise SettingsError(f"{given}: needs {missing} too (give both or neither)")
        if tls_client_ca is not None and tls_cert is None:
            raise SettingsError(
                f"--tls-client-ca {tls_client_ca}: needs --tls-cert and --tls-key (mTLS is TLS first)"
            )
        tls = None
        if tls_cert is not None and tls_key is not None:
            tls = TlsFiles(Path(tls_cert), Path(tls_key), Path(tls_client_ca) if tls_client_ca else None)
        http = None
        if http_listen not in (None, "", "off"):
            assert http_listen is not None
            http = parse_address("--http-listen", http_listen)
            # /metrics and the status page show the fleet: the same rule as --listen (SPEC §6).
            if auth_tokens is None and not http.loopback:
                raise SettingsError(
                    f"--http-listen {http_listen!r}: a non-loopback address needs --auth-tokens FILE "
                    "(without tokens, anyone who reaches it could read the fleet's state), or 'off'"
                )
        if not 0 < load_stale_after_s < math.inf:
            raise SettingsError(f"--load-stale-after-s {load_stale_after_s}: must be a number of seconds > 0")
        if load_push_interval_ms < 1:
            raise SettingsError(f"--load-push-interval-ms {load_push_interval_ms}: must be >= 1")
        try:
            key = read_key("--worker-api-key", worker_api_key, "--worker-api-key-file", worker_api_key_file)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        return ControlSettings(
            listen=address,
            store=parse_store(store),
            auth_tokens=Path(auth_tokens) if auth_tokens else None,
            tls=tls,
            http_listen=http,
            load_stale_after_s=load_stale_after_s,
            load_push_interval_ms=load_push_interval_ms,
            worker_api_key=key,
        )

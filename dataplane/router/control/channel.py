"""The router's channel to the control plane (SPEC §1 ``--control-plane``): an adapter.

What every control-plane stream of the router (``control``) shares: the checked settings from the
router's flags, TLS or mTLS credentials and the bearer token, one gRPC channel whose own
reconnect backoff stays below ours, one stream attempt at a time with a jittered backoff after
it, a failure logged once per episode, and the connectivity behind
``fleetplane_control_plane_connected`` (SPEC §8). ``grpc.aio.AioRpcError`` never leaves it.

Several control-plane replicas (on one etcd store) are one channel target: gRPC's resolver (a
DNS name's addresses, or an ``ipv4:``/``ipv6:`` list) and its pick_first policy keep every stream
on one replica and connect to the next when it fails; keepalive pings notice a hung one. The
streams then resume where they were: ``WatchContracts`` from ``known_revision`` (nothing is sent
again while the new replica is at that revision); ``WatchLoads`` has no resume token and starts
with a full view, which is right, as each replica holds its own view of the engines. What gRPC
does not offer Python, which replica the channel is on, comes from channelz.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from pathlib import Path

import grpc
import structlog

# gRPC Python's channelz entry points (what grpcio-channelz serves); no stubs for them.
from grpc._cython import cygrpc  # type: ignore[attr-defined]

from controlplane.v1 import contract_pb2_grpc, load_pb2_grpc, router_pb2_grpc
from dataplane.router.control.backoff import Backoff
from dataplane.router.control.convert import (
    ControlClientSettings,
    ControlConfigError,
    ControlTarget,
    check_replicas,
    grpc_target,
    parse_control_plane,
    replica_address,
)

log = structlog.get_logger(__name__)

# The channel's own reconnect backoff (default: up to 120 s) must not outlast ours.
# A full WatchLoads view is ~90 bytes per one-rank worker and ~560 per eight-rank one: past
# gRPC's default 4 MB receive limit at ~7 000 eight-rank workers, where the router would be
# refused every view. The control plane sends without a limit.
MAX_RECEIVE_MESSAGE_BYTES = 256 * 1024 * 1024
# Failover (several --control-plane replicas): a replica killed closes its connections and the
# streams fail at once; a hung one (SIGSTOP, a frozen VM) keeps them open, so HTTP/2 keepalive
# pings notice it: no PING ack within KEEPALIVE_TIMEOUT_MS and gRPC closes the transport, the
# streams fail UNAVAILABLE, and pick_first connects to the next address. A hang is noticed
# within KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS (3 s). The control plane accepts pings this
# often (controlplane.app SERVER_OPTIONS: one per second at most).
KEEPALIVE_TIME_MS = 1500
KEEPALIVE_TIMEOUT_MS = 1500
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # gRPC core waits for a PING ack up to this long whatever keepalive_timeout_ms says
    # (default 60 s): without it a hung replica holds the router for a minute.
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # pick_first (gRPC's default, named so it stays): every stream on one replica, the next
    # address when it fails; channelz tells which one it is on (``_read_replica``).
    ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"pick_first": {}}]})),
    ("grpc.enable_channelz", 1),
)


def _channelz_ids(target: str) -> set[int]:
    """Ids of this process's top-level gRPC channels to ``target`` (channelz)."""
    ids: set[int] = set()
    start = 0
    while True:
        page = json.loads(cygrpc.channelz_get_top_channels(start))
        for channel in page.get("channel", []):
            channel_id = int(channel["ref"]["channelId"])
            start = max(start, channel_id + 1)
            # gRPC shows a target without a scheme with the default one ("dns:///host:port").
            if channel.get("data", {}).get("target") in (target, f"dns:///{target}"):
                ids.add(channel_id)
        if page.get("end", True) or not page.get("channel"):
            return ids


def _read_replica(channel_ids: set[int]) -> str:
    """``HOST:PORT`` of the replica the channel is connected to ("" while none).

    gRPC Python has no API for a client call's peer; channelz (gRPC's own introspection, what
    grpcio-channelz serves) has the READY subchannel picked by pick_first and its address.
    """
    for channel_id in sorted(channel_ids):
        try:
            channel = json.loads(cygrpc.channelz_get_channel(channel_id)).get("channel", {})
        except ValueError:  # gone (closed)
            continue
        for ref in channel.get("subchannelRef", []):
            try:
                sub = json.loads(cygrpc.channelz_get_subchannel(int(ref["subchannelId"])))
            except ValueError:
                continue
            data = sub.get("subchannel", {}).get("data", {})
            if data.get("state", {}).get("state") == "READY" and data.get("target"):
                return replica_address(str(data["target"]))
    return ""


class _Episodes:
    """Log a stream failure once per failure episode, and its recovery once."""

    def __init__(self) -> None:
        self._failing: set[str] = set()

    def failed(self, stream: str, exc: BaseException) -> None:
        if stream not in self._failing:
            self._failing.add(stream)
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
            log.warning("control_plane_stream_failed", stream=stream, code=code, detail=detail)

    def recovered(self, stream: str) -> None:
        if stream in self._failing:
            self._failing.discard(stream)
            log.info("control_plane_stream_recovered", stream=stream)


def _read_pem(flag: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ControlConfigError(f"{flag} {str(path)!r}: cannot read: {exc.strerror}") from None


def _credentials(settings: ControlClientSettings) -> grpc.ChannelCredentials | None:
    """TLS with --tls-ca (None: the system's roots) and, for mTLS, a client certificate."""
    if settings.tls_ca is None and settings.tls_cert is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read_pem("--tls-ca", settings.tls_ca),
        private_key=_read_pem("--tls-key", settings.tls_key),
        certificate_chain=_read_pem("--tls-cert", settings.tls_cert),
    )


def control_settings(
    target: str,
    router_id: str,
    token: str | None,
    tls_ca: str | Path | None,
    *,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
) -> ControlClientSettings:
    """Checked settings from the router's flags; ControlConfigError names the flag."""
    check_replicas(parse_control_plane([target]), tls=bool(tls_ca or tls_cert))
    if token is not None and (not token or not token.isprintable() or " " in token):
        raise ControlConfigError("--token: must be a non-empty printable string without spaces")
    if bool(tls_cert) != bool(tls_key):
        given = f"--tls-cert {str(tls_cert)!r}" if tls_cert else f"--tls-key {str(tls_key)!r}"
        missing = "--tls-key" if tls_cert else "--tls-cert"
        raise ControlConfigError(f"{given}: needs {missing} too (a client certificate and its key)")
    settings = ControlClientSettings(
        target=target,
        router_id=router_id,
        token=token or None,
        tls_ca=Path(tls_ca) if tls_ca else None,
        tls_cert=Path(tls_cert) if tls_cert else None,
        tls_key=Path(tls_key) if tls_key else None,
    )
    _credentials(settings)  # an unreadable file is a startup error, not a reconnect loop
    return settings


class ControlChannel:
    """Base of ``ControlPlaneClient``: the channel, its stubs, the connected state, and the
    attempt-then-backoff step (``_stream``) that every loop of the client repeats."""

    def __init__(self, settings: ControlClientSettings, target: ControlTarget) -> None:
        self._settings = settings
        self._target = target
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {settings.token}"),) if settings.token else ()
        )
        credentials = _credentials(settings)
        # Several replicas in one target: gRPC's resolver and pick_first fail over between them.
        self.addresses = parse_control_plane([settings.target])
        grpc_name = grpc_target(self.addresses)
        before = _channelz_ids(grpc_name)
        self._channel = (
            grpc.aio.secure_channel(grpc_name, credentials, options=_CHANNEL_OPTIONS)
            if credentials is not None
            else grpc.aio.insecure_channel(grpc_name, options=_CHANNEL_OPTIONS)
        )
        # This channel's channelz id: the one to the same target that was not there before.
        self._channelz = _channelz_ids(grpc_name) - before
        # The replica the streams are on ("" while not connected): metrics and reports.
        self.replica = ""
        # The replica a status report names (``report_replica``); None: read channelz first.
        self._reported_replica: str | None = None
        self._contracts = contract_pb2_grpc.ContractServiceStub(self._channel)
        self._loads = load_pb2_grpc.LoadServiceStub(self._channel)
        self._routers = router_pb2_grpc.RouterServiceStub(self._channel)
        self._episodes = _Episodes()
        # fleetplane_control_plane_connected needs both: a READY channel alone is not a
        # subscription (a refused --token leaves the channel up while every stream fails).
        self._channel_ready = False
        self._loads_live = False

    async def close(self) -> None:
        """Close the channel (after ``run()`` was cancelled)."""
        await self._channel.close(grace=None)

    async def _stream(self, name: str, backoff: Backoff, body: Coroutine[object, object, None]) -> None:
        """Run one stream attempt; on any end or failure wait a jittered backoff delay."""
        try:
            await body
            self._episodes.failed(name, ConnectionError("stream ended by the control plane"))
        except grpc.aio.AioRpcError as exc:
            self._episodes.failed(name, exc)
        except Exception as exc:  # a bug must not end the subscription: log it, reconnect
            log.exception("control_plane_stream_error", stream=name)
            self._episodes.failed(name, exc)
        await asyncio.sleep(backoff.next_delay_s())

    def _set_connected(self, *, channel_ready: bool | None = None, loads_live: bool | None = None) -> None:
        # SPEC §8 fleetplane_control_plane_connected: the channel is up AND the router is
        # subscribed: WatchLoads (whose first message is always a full view, so a resumed
        # stream proves itself at once) delivered on the current call.
        self._reported_replica = None  # a connectivity change: the replica may be another one
        if channel_ready is not None:
            self._channel_ready = channel_ready
        if loads_live is not None:
            self._loads_live = loads_live
        connected = self._channel_ready and self._loads_live
        self._target.set_control_plane_connected(connected)
        replica = self.read_replica() if connected else ""
        if replica != self.replica:
            log.info("control_plane_replica", address=replica or None, previous=self.replica or None)
            self.replica = replica
            self._target.set_control_plane_replica(replica)

    def read_replica(self) -> str:
        """The replica the channel is on now, as channelz has it ("" while none)."""
        return _read_replica(self._channelz)

    def report_replica(self) -> str:
        """The replica the channel is on, for a status report ("" while none).

        The report loop looks four times a second, and a channelz read costs ~0.5 ms (gRPC core
        renders its JSON), most of an idle router's CPU. So channelz is read again only when
        the replica may have changed: moving to another one takes the channel out of READY and
        back (``_set_connected`` runs on every connectivity change), and a report stream begins
        on whichever replica the channel is on (``_report`` forgets it). While none, every look
        reads channelz.
        """
        replica = self._reported_replica
        if replica is None:
            replica = self.read_replica()
            self._reported_replica = replica or None
        return replica

    async def _connectivity_loop(self) -> None:
        state = self._channel.get_state(try_to_connect=True)
        while True:
            self._set_connected(channel_ready=state is grpc.ChannelConnectivity.READY)
            await self._channel.wait_for_state_change(state)
            state = self._channel.get_state(try_to_connect=True)

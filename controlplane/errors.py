"""The control plane's two error families: what a client is answered, what stops a start.

``ControlPlaneError``: every domain error carries the gRPC status it maps to. Servicers, stores
and registries raise these; ``controlplane.server.errors.status_for`` is the one place that
turns any exception into a status and message (SPEC §6: validation failures are
``INVALID_ARGUMENT`` naming the field, missing is ``NOT_FOUND``, a version mismatch ``ABORTED``).

``StartupError``: ``fleetplane control`` or ``fleetplane up`` cannot start; the message is the
one line printed before the non-zero exit (SPEC §1).
"""

from __future__ import annotations

from typing import ClassVar

import grpc


class ControlPlaneError(Exception):
    """Root of the control plane's domain errors; ``message`` is shown to the client as is."""

    status: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidArgument(ControlPlaneError):
    """A request field is malformed; the message names the field."""

    status = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ControlPlaneError):
    """The scope, version or worker does not exist (or is deleted)."""

    status = grpc.StatusCode.NOT_FOUND


class VersionMismatch(ControlPlaneError):
    """Optimistic concurrency: ``expected_version`` is not the current version (SPEC §3.2)."""

    status = grpc.StatusCode.ABORTED


class FailedPrecondition(ControlPlaneError):
    """The request is well formed but the system is not in a state to run it."""

    status = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ControlPlaneError):
    """Shutting down, or the store cannot be reached; the client should retry."""

    status = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(ControlPlaneError):
    """Missing or unknown bearer token (SPEC §6 Auth)."""

    status = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ControlPlaneError):
    """The token's role does not allow the method (SPEC §6 Auth)."""

    status = grpc.StatusCode.PERMISSION_DENIED


class UndecodableRequest(ControlPlaneError):
    """A request message that does not parse as its type (INTERNAL, as stock gRPC servers answer)."""


class StartupError(Exception):
    """The control plane, or the fleet ``fleetplane up`` runs, cannot start; the message says why."""


class SettingsError(StartupError, ValueError):
    """A flag value the control plane cannot start with; the message names the flag and the value."""

"""The one exception -> gRPC status mapping of the control plane (SPEC §6).

Domain errors carry their status (``controlplane.errors``); a contract the model refuses is
``INVALID_ARGUMENT`` with the model's message (it names the field); anything else is a bug:
logged with its traceback, answered ``INTERNAL`` without details.
"""

from __future__ import annotations

import grpc
import structlog

from controlplane.contracts import ContractError
from controlplane.errors import ControlPlaneError

log = structlog.get_logger("controlplane.server")


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status and message a client sees for ``exc``."""
    if isinstance(exc, ControlPlaneError):
        return exc.status, exc.message
    if isinstance(exc, ContractError):
        return grpc.StatusCode.INVALID_ARGUMENT, exc.message
    log.error("internal_error", exc_info=exc)
    return grpc.StatusCode.INTERNAL, "internal error (see the control plane's log)"

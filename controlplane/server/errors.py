"""The one exception -> gRPC status mapping of the control plane (SPEC §6).

Domain errors carry their status (``controlplane.errors``); a contract the model refuses
(``ContractError``, from UpdateContract's ``params``) is ``INVALID_ARGUMENT`` with the model's
message, which names the parameter; anything else is a bug: logged with its traceback, answered
``INTERNAL`` without details. Servicers and the interceptor raise; only this module chooses a
status.
"""

from __future__ import annotations

import grpc
import structlog

from controlplane.contracts import ContractError
from controlplane.errors import ControlPlaneError

log = structlog.get_logger("controlplane.server")


# The message travels percent-encoded in the grpc-message trailer; gRPC clients drop a call whose
# metadata passes 8-16 KiB (RESOURCE_EXHAUSTED "Stream removed") and the field name with it. A
# refusal quoting a client's 20 KB value must still reach the client as INVALID_ARGUMENT.
MAX_MESSAGE_BYTES = 1024


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status and message a client sees for ``exc``."""
    if isinstance(exc, ControlPlaneError):
        return exc.status, clip(exc.message)
    if isinstance(exc, ContractError):
        # The few messages that concern the whole map (e.g. empty) name no parameter: they get
        # the request field's name in front, so every refusal names a field (SPEC §6).
        message = exc.message if exc.field else f"params: {exc.message}"
        return grpc.StatusCode.INVALID_ARGUMENT, clip(message)
    log.error("internal_error", exc_info=exc)
    return grpc.StatusCode.INTERNAL, "internal error (see the control plane's log)"


def clip(message: str, max_bytes: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` cut to ``max_bytes`` of UTF-8 (its start names the field), marked when cut."""
    data = message.encode()
    if len(data) <= max_bytes:
        return message
    return data[:max_bytes].decode(errors="ignore") + f"… ({len(data) - max_bytes} more bytes)"

"""The standard ``grpc.health.v1.Health`` service, ``List`` included (SPEC §6: stock tools work).

grpcio-health-checking's asyncio servicer answers ``Check`` and ``Watch`` but leaves ``List``
(added to health.proto in 2024, and advertised by reflection) unimplemented; this adds it.
"""

from __future__ import annotations

from typing import Any

from grpc import aio
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer


class ListingHealthServicer(HealthServicer):  # type: ignore[misc]  # grpc_health ships no types
    """``HealthServicer`` plus ``List``: every service this server set a status for."""

    async def List(
        self, request: health_pb2.HealthListRequest, context: aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthListResponse:
        # The base class keeps the statuses in ``_server_status`` ("" is the server as a whole).
        statuses = dict(self._server_status)
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status) for name, status in statuses.items()
            }
        )

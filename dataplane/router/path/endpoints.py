"""The router's GET surface (SPEC §5): ``/v1/models``, ``/health``, ``/readiness``, ``/metrics``,
``/contract``. Each answer is computed from the current state snapshot; none touches a worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any

import msgspec

from dataplane.errors import (
    ContractUnavailable,
    ModelNotFound,
    NoHealthyWorkers,
)
from dataplane.http import Responder
from dataplane.router.contract.routes import MODELS_PREFIX, ROUTER_PATHS, RouteTable
from dataplane.router.headers import Headers
from dataplane.router.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from dataplane.router.metrics import RouterMetrics, RouteStats
from dataplane.router.state import RouterState

JSON: Headers = [(b"content-type", b"application/json")]
_encode = msgspec.json.Encoder().encode
_OK = b'{"status":"ok"}'
_MODEL_PREFIX = MODELS_PREFIX.encode()

# An answer is given at once (its status), or by a coroutine (/metrics under --processes).
Answer = Callable[[Responder], int | Coroutine[Any, Any, int]]


class Endpoints:
    """Maps a GET path to its stats and answer."""

    def __init__(self, state: RouterState, metrics: RouterMetrics, routes: RouteTable) -> None:
        self._state = state
        self._routes = routes.to_json()
        self._metrics = metrics
        answers: dict[str, Answer] = {
            "/v1/models": self.models,
            "/health": self.health,
            "/readiness": self.readiness,
            "/metrics": self.metrics,
            "/contract": self.contract,
        }
        assert set(answers) == set(ROUTER_PATHS)
        self._table: dict[bytes, tuple[RouteStats, Answer]] = {
            path.encode(): (metrics.route(path), answer) for path, answer in answers.items()
        }

        self._model_stats = metrics.route("/v1/models/{model}")

    def get(self, path: bytes) -> tuple[RouteStats, Answer] | None:
        found = self._table.get(path)
        if found is None and path.startswith(_MODEL_PREFIX) and len(path) > len(_MODEL_PREFIX):
            # OpenAI's GET /v1/models/{model} (client.models.retrieve); ids may hold slashes.
            model = path[len(_MODEL_PREFIX) :].decode("utf-8", "replace")
            return self._model_stats, partial(self.model, model)
        return found

    def models(self, responder: Responder) -> int:
        """OpenAI's model list, for the models at least one healthy worker serves."""
        data = [_model_object(m) for m in self._state.workers.healthy_models()]
        responder.respond(200, JSON, _encode({"object": "list", "data": data}))
        return 200

    def model(self, model: str, responder: Responder) -> int:
        """One model of the list, or 404 model_not_found when no healthy worker serves it."""
        if model not in self._state.workers.healthy_models():
            return responder.answer_error(ModelNotFound(f"no worker serves the model '{model[:200]}'"))
        responder.respond(200, JSON, _encode(_model_object(model)))
        return 200

    def health(self, responder: Responder) -> int:
        """Liveness: the process answers."""
        responder.respond(200, JSON, _OK)
        return 200

    def readiness(self, responder: Responder) -> int:
        """Ready once there is a worker and (with a control plane) a contract snapshot."""
        state = self._state
        if state.contracts is None:
            return responder.answer_error(ContractUnavailable())
        if not any(w.healthy for w in state.workers.workers):
            return responder.answer_error(NoHealthyWorkers())
        body = {"status": "ready", "workers": len(state.workers), "revision": state.contracts.revision}
        responder.respond(200, JSON, _encode(body))
        return 200

    def metrics(self, responder: Responder) -> int | Coroutine[Any, Any, int]:
        aggregate = self._metrics.aggregate
        if aggregate is not None:  # --processes N: the whole router's metrics (process_metrics)
            return self._router_metrics(responder, aggregate)
        responder.respond(200, [(b"content-type", METRICS_CONTENT_TYPE)], self._metrics.render())
        return 200

    async def _router_metrics(self, responder: Responder, aggregate: Callable[[], Awaitable[bytes]]) -> int:
        responder.respond(200, [(b"content-type", METRICS_CONTENT_TYPE)], await aggregate())
        return 200

    def contract(self, responder: Responder) -> int:
        """The contract set and revision applied, and the route table (JSON, SPEC §5, §5.1)."""
        contracts = self._state.contracts
        if contracts is None:
            return responder.answer_error(ContractUnavailable())
        responder.respond(200, JSON, _encode({**contracts.to_json(), "routes": self._routes}))
        return 200


def _model_object(model: str) -> dict[str, object]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "fleetplane"}

"""ContractService (SPEC §3.2, §6): versioned contracts over gRPC.

Validation happens here, before the store (``INVALID_ARGUMENT`` naming the field); the store
enforces ``expected_version``/existence inside its write transaction (``store.changes``). Errors
propagate as domain exceptions (``ContractError`` included) and the interceptor maps them to
statuses with ``server.errors.status_for``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypedDict

import structlog
from grpc import aio

from controlplane.contracts import contract_from_proto
from controlplane.errors import InvalidArgument, Unavailable
from controlplane.metrics import CONTRACT_CHANGES, WATCHERS
from controlplane.server.auth import current_principal
from controlplane.server.component import AppContext, Component, ServiceBinding, StatusSection
from controlplane.server.contract_views import ContractViews
from controlplane.server.convert import version_to_proto
from controlplane.server.status_page import contracts_data, render_contracts
from controlplane.store import ContractVersion, Store, check_page_size, check_scope
from controlplane.v1 import contract_pb2, contract_pb2_grpc

log = structlog.get_logger("controlplane.contracts")

SERVICE_NAME = contract_pb2.DESCRIPTOR.services_by_name["ContractService"].full_name
MAX_COMMENT_CHARS = 4096
MAX_VERSION = 2**63 - 1  # Contract.version is an int64

_Context = aio.ServicerContext[Any, Any]


def _expected_version(request: Any) -> int | None:
    if not request.HasField("expected_version"):
        return None
    if request.expected_version < 0:
        raise InvalidArgument(
            f"expected_version: must be >= 0 (0 = the scope has no version yet), "
            f"got {request.expected_version}",
            field="expected_version",
        )
    return int(request.expected_version)


def _comment(comment: str) -> str:
    if len(comment) > MAX_COMMENT_CHARS:
        raise InvalidArgument(
            f"comment: at most {MAX_COMMENT_CHARS} characters, got {len(comment)}", field="comment"
        )
    return comment


class _ChangeTerms(TypedDict):
    """The keywords every contract write takes from its request (update, delete, rollback)."""

    expected_version: int | None
    author: str
    comment: str


def _change_terms(request: Any) -> _ChangeTerms:
    """The request's checked ``expected_version`` and ``comment``, with the caller as author."""
    return _ChangeTerms(
        expected_version=_expected_version(request),
        author=current_principal().name,
        comment=_comment(request.comment),
    )


def _page_token(token: str) -> int | None:
    """The opaque token is the version the next page starts below."""
    if not token:
        return None
    # What a response gives: a version, ASCII digits of an int64 >= 1. str.isdigit alone also
    # passes "²" (int() then raises: INTERNAL) and digits past int64 (SQLite then overflows).
    if not (token.isascii() and token.isdigit() and 1 <= int(token) <= MAX_VERSION):
        raise InvalidArgument(
            "page_token: not a next_page_token from a previous response", field="page_token"
        )
    return int(token)


class ContractServicer(contract_pb2_grpc.ContractServiceServicer):
    def __init__(self, store: Store, views: ContractViews) -> None:
        self._store = store
        self._views = views

    async def GetContract(
        self, request: contract_pb2.GetContractRequest, context: _Context
    ) -> contract_pb2.GetContractResponse:
        version = await self._store.get(check_scope(request.scope))
        return contract_pb2.GetContractResponse(contract=version_to_proto(version))

    async def ListContracts(
        self, request: contract_pb2.ListContractsRequest, context: _Context
    ) -> contract_pb2.ListContractsResponse:
        view = self._views.current()
        return contract_pb2.ListContractsResponse(contracts=view.response.contracts, revision=view.revision)

    async def UpdateContract(
        self, request: contract_pb2.UpdateContractRequest, context: _Context
    ) -> contract_pb2.UpdateContractResponse:
        scope = check_scope(request.scope)
        contract = contract_from_proto(request.params, request.conflict)  # ContractError: status_for
        written = await self._store.update(
            scope,
            contract,
            allow_missing=request.allow_missing,
            **_change_terms(request),
        )
        self._changed(written)
        return contract_pb2.UpdateContractResponse(contract=version_to_proto(written))

    async def DeleteContract(
        self, request: contract_pb2.DeleteContractRequest, context: _Context
    ) -> contract_pb2.DeleteContractResponse:
        written = await self._store.delete(check_scope(request.scope), **_change_terms(request))
        self._changed(written)
        return contract_pb2.DeleteContractResponse(contract=version_to_proto(written))

    async def RollbackContract(
        self, request: contract_pb2.RollbackContractRequest, context: _Context
    ) -> contract_pb2.RollbackContractResponse:
        written = await self._store.rollback(
            check_scope(request.scope), request.version, **_change_terms(request)
        )
        self._changed(written)
        return contract_pb2.RollbackContractResponse(contract=version_to_proto(written))

    async def ListContractHistory(
        self, request: contract_pb2.ListContractHistoryRequest, context: _Context
    ) -> contract_pb2.ListContractHistoryResponse:
        page = await self._store.history(
            check_scope(request.scope),
            page_size=check_page_size(request.page_size),
            before_version=_page_token(request.page_token),
        )
        return contract_pb2.ListContractHistoryResponse(
            versions=[version_to_proto(v) for v in page.versions],
            next_page_token="" if page.next_before_version is None else str(page.next_before_version),
        )

    async def WatchContracts(
        self, request: contract_pb2.WatchContractsRequest, context: _Context
    ) -> AsyncIterator[contract_pb2.WatchContractsResponse]:
        # known_revision 0 means "nothing yet": even an empty store's revision-0 set is sent.
        sent = request.known_revision if request.known_revision > 0 else -1
        gauge = WATCHERS.labels("contracts")
        log.info("watch_opened", router_id=request.router_id, known_revision=request.known_revision)
        with self._views.broadcast.subscribe() as slot:
            gauge.inc()
            try:
                while True:
                    slot.clear()
                    if slot.closed:
                        raise Unavailable("control plane shutting down; reconnect")
                    view = self._views.current()
                    if view.revision != sent:
                        # No lock is held here: a slow stream only delays its own slot.
                        yield view.response
                        sent = view.revision
                        continue
                    await slot.wait()
            finally:
                gauge.dec()
                log.info("watch_closed", router_id=request.router_id, last_revision=sent)

    @staticmethod
    def _changed(written: ContractVersion) -> None:
        CONTRACT_CHANGES.labels(written.change.value).inc()
        log.info(
            "contract_changed",
            change=written.change.value,
            scope=written.scope,
            version=written.version,
            revision=written.revision,
            author=written.author,
            comment=written.comment,
        )


async def contract_component(ctx: AppContext) -> Component:
    """ContractService, the task that wakes its watchers, and the contracts section."""
    views = ctx.contracts

    async def stop_watchers() -> None:
        views.close()

    return Component(
        services=[
            ServiceBinding(
                contract_pb2_grpc.add_ContractServiceServicer_to_server,
                ContractServicer(ctx.store, views),
                SERVICE_NAME,
            )
        ],
        background=[views.run],
        status_sections=[
            StatusSection(
                "contracts", "Contracts", lambda: contracts_data(views.current().snapshot), render_contracts
            )
        ],
        on_shutdown=[stop_watchers],
    )

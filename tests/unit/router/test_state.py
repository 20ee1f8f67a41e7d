"""Router state: contract table lookup by scope and atomic snapshot swaps (SPEC §3.2, §5)."""

from __future__ import annotations

from controlplane.contracts import parse_contract_json
from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.state import ContractSet, RouterState
from tests.fakes.upstream import FakePool


def test_model_scope_wins_over_fleet_scope() -> None:
    """A request is judged by its model's scope if it exists, else by '*'."""
    contracts = ContractSet(
        7, {"*": parse_contract_json('{"temperature": 1}'), "m1": parse_contract_json('{"top_p": 0.5}')}
    )
    judged_m1 = contracts.for_model("m1")
    judged_m2 = contracts.for_model("m2")
    assert judged_m1 is not None and judged_m1.scope == "m1" and judged_m1.revision == 7
    assert judged_m2 is not None and judged_m2.scope == "*"
    assert contracts.for_model(None) is judged_m2


def test_no_contract_means_not_judged() -> None:
    """Without a matching scope and without '*', nothing judges the request."""
    contracts = ContractSet(3, {"m1": parse_contract_json('{"n": 1}')})
    assert contracts.for_model("m2") is None
    assert contracts.for_model(None) is None


def test_standalone_contract_is_fleet_scope_at_revision_zero() -> None:
    """The flags' contract is scope '*' at revision 0; GET /contract shows it."""
    state = RouterState.standalone(
        parse_contract_json('{"top_k": {"min": 1, "max": 5, "default": 3}}', "reject")
    )
    assert state.contracts is not None
    assert state.contracts.to_json() == {
        "revision": 0,
        "contracts": {"*": {"params": {"top_k": {"min": 1, "max": 5, "default": 3}}, "conflict": "reject"}},
    }
    assert state.contracts.revision_headers == [(b"x-contract-revision", b"0")]


def test_contract_unavailable_until_first_snapshot() -> None:
    """With a control plane the state has no contracts (and is not ready) until one is applied."""
    state = RouterState()
    assert state.contracts is None and not state.ready
    state.apply_contracts(12, {})
    assert state.contracts is not None and state.contracts.revision == 12


def test_snapshot_swap_keeps_the_old_one_intact() -> None:
    """A request holding the old snapshot keeps judging by it after a swap."""
    state = RouterState.standalone(parse_contract_json('{"temperature": 1}'))
    old = state.contracts
    state.apply_contracts(1, {"*": parse_contract_json('{"temperature": 0.2}')})
    assert old is not None and old.revision == 0 and old.for_model("x") is not None
    assert state.contracts is not None and state.contracts.revision == 1


async def test_apply_workers_keeps_live_workers() -> None:
    """Re-applying a worker list keeps unchanged workers (pool, in-flight) and replaces changed ones."""
    state = RouterState.standalone(None)
    state.apply_workers(
        [WorkerSpec("http://a:1", "http1", ("m",)), WorkerSpec("http://b:1", "http1", ("m",))], FakePool
    )
    a = state.workers.by_url["http://a:1"]
    a.inflight = 2
    state.apply_workers(
        [WorkerSpec("http://a:1", "http1", ("m",)), WorkerSpec("http://c:1", "http1", ("n",))], FakePool
    )
    assert state.workers.by_url["http://a:1"] is a and a.inflight == 2
    assert set(state.workers.by_url) == {"http://a:1", "http://c:1"}
    assert state.workers.models == ("m", "n") and state.ready


def test_rejections_are_counted_per_scope_and_field() -> None:
    """Every violated field of a rejected request is counted under its scope."""
    state = RouterState.standalone(None)
    state.count_rejection("*", ("temperature", "top_k"))
    state.count_rejection("*", ("temperature",))
    assert state.rejection_counts() == {("*", "temperature", ""): 2, ("*", "top_k", ""): 1}


async def test_ejected_workers_are_those_out_of_rotation_sorted() -> None:
    """What the router reports as ejected: the workers it has taken out of rotation, by URL."""
    state = RouterState.standalone(None)
    state.apply_workers([WorkerSpec(f"http://{h}:1", "http1", ("m",)) for h in "cab"], FakePool)
    assert state.ejected_workers() == []
    for url in ("http://c:1", "http://b:1"):
        state.workers.by_url[url].healthy = False
    assert state.ejected_workers() == ["http://b:1", "http://c:1"]

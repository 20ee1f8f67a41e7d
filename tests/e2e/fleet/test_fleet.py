"""The fleet end to end (SPEC §1, §5, §6, §8): contracts roll out from the control plane to a
router within about a second, rejections come back as stats, and the router rides out a
control-plane crash with its last contract."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fakes.chat_client import chat as chat_for
from tests.fakes.chat_client import engine_read, error_of, post
from tests.fakes.fleet import MODEL, ROUTER_ID, Fleet, wait_for
from tests.fakes.router import series

CONNECTED = series("fleetplane_control_plane_connected")


def chat(**fields: Any) -> dict[str, Any]:
    """A small chat body for the fleet's model."""
    return chat_for(MODEL, **fields)


def _set_contract(fleet: Fleet, params: dict[str, Any]) -> int:
    """``fleetplane contract set --scope '*' JSON``; returns the revision written."""
    out = fleet.fleetplane_json("contract", "set", "--scope", "*", json.dumps(params))
    return int(out["contract"]["revision"])


def _engine_temperature(fleet: Fleet) -> float | None:
    """The temperature the engine read for a request that omits it."""
    status, headers, _ = post(fleet.router.url, "/v1/chat/completions", chat())
    return engine_read(headers)["temperature"] if status == 200 else None


def _our_router(fleet: Fleet) -> dict[str, Any]:
    listed = fleet.fleetplane_json("routers")
    [ours] = [r for r in listed.get("routers", []) if r["routerId"] == ROUTER_ID]
    ours["currentRevision"] = int(listed.get("currentRevision", 0))
    return ours  # type: ignore[no-any-return]


def _field_counts(fleet: Fleet) -> dict[str, int]:
    stats = fleet.fleetplane_json("stats")
    return {kc["key"]: int(kc["count"]) for kc in stats.get("byField", [])}


def test_router_is_ready_and_up_to_date(fleet: Fleet) -> None:
    """The subscribed router turns ready, serves the fleet's model and shows up to date and connected."""
    _set_contract(fleet, {"temperature": 1})
    wait_for(lambda: fleet.router.get("/readiness")[0] == 200, timeout_s=15)
    status, _, body = fleet.router.get("/v1/models")
    assert status == 200 and MODEL in body.decode()

    def up_to_date() -> bool:
        ours = _our_router(fleet)
        return bool(ours.get("connected") and ours.get("upToDate"))

    wait_for(up_to_date, timeout_s=10, interval_s=0.2)
    assert fleet.router.metrics()[CONNECTED] == 1


def test_contract_set_is_enforced_within_a_second(fleet: Fleet) -> None:
    """After ``contract set`` the router injects the new value and refuses a conflicting one."""
    wait_for(lambda: fleet.router.get("/readiness")[0] == 200, timeout_s=15)
    revision = _set_contract(fleet, {"temperature": 0.3})
    started = time.monotonic()
    wait_for(lambda: _engine_temperature(fleet) == 0.3, timeout_s=5)
    assert time.monotonic() - started < 1.5
    status, headers, body = post(fleet.router.url, "/v1/chat/completions", chat(temperature=0.9))
    assert error_of(status, headers, body)[:2] == (400, "sampling_contract_violation")
    status, headers, _ = post(fleet.router.url, "/v1/chat/completions", chat(temperature=0.3))
    assert status == 200 and headers["x-contract-revision"] == str(revision)


def test_rejections_show_up_in_stats(fleet: Fleet) -> None:
    """Every violated field of a refused request is counted in ``fleetplane stats``."""
    _set_contract(fleet, {"temperature": 0.5, "top_p": 0.9})
    wait_for(lambda: _engine_temperature(fleet) == 0.5, timeout_s=5)
    before = _field_counts(fleet)
    for _ in range(2):
        status, _, _ = post(fleet.router.url, "/v1/chat/completions", chat(temperature=0.1, top_p=0.2))
        assert status == 400

    def counted() -> bool:
        after = _field_counts(fleet)
        return all(after.get(f, 0) - before.get(f, 0) == 2 for f in ("temperature", "top_p"))

    wait_for(counted, timeout_s=10, interval_s=0.2)
    stats = fleet.fleetplane("stats").stdout
    assert "total rejections:" in stats and ROUTER_ID in stats


def test_router_keeps_its_contract_through_a_control_plane_crash(fleet: Fleet) -> None:
    """With the control plane killed the router enforces its last contract; after a restart it
    reconnects, takes new contracts again and reports itself up to date."""
    _set_contract(fleet, {"temperature": 0.4})
    wait_for(lambda: _engine_temperature(fleet) == 0.4, timeout_s=5)
    fleet.control.kill()
    wait_for(lambda: fleet.router.metrics()[CONNECTED] == 0, timeout_s=10, interval_s=0.1)
    assert _engine_temperature(fleet) == 0.4
    status, headers, body = post(fleet.router.url, "/v1/chat/completions", chat(temperature=1.5))
    assert error_of(status, headers, body)[:2] == (400, "sampling_contract_violation")
    assert fleet.router.get("/readiness")[0] == 200

    fleet.control.start()  # same port, same store
    wait_for(lambda: fleet.router.metrics()[CONNECTED] == 1, timeout_s=10, interval_s=0.1)
    revision = _set_contract(fleet, {"temperature": 0.6})
    wait_for(lambda: _engine_temperature(fleet) == 0.6, timeout_s=5)

    def caught_up() -> bool:
        ours = _our_router(fleet)
        return (
            bool(ours.get("connected") and ours.get("upToDate")) and int(ours["appliedRevision"]) == revision
        )

    wait_for(caught_up, timeout_s=10, interval_s=0.2)

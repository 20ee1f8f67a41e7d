"""A whole fleet as real processes: control plane, two engine-sims, one subscribed router.

The control plane listens on a fixed free port so it can be killed and restarted where the
router expects it (SPEC §1 ``--control-plane HOST:PORT``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports
from tests.fakes.fleet import MODEL, ROUTER_ID, Fleet, fleetplane
from tests.fakes.ports import free_port
from tests.fakes.router import RouterProcess


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Control plane + HTTP/1.1 engine (dp 1) + h2c engine (dp 2) + router ``--control-plane``."""
    store = tmp_path_factory.mktemp("fleet") / "control.db"
    port = free_port()
    with (
        ControlPlaneProcess("--listen", f"127.0.0.1:{port}", store_path=store) as control,
        EngineSim(
            "--model",
            MODEL,
            "--load-publish-endpoint",
            "auto",
            "--kv-events-endpoint",
            kv_endpoint_with_free_load_ports(1),
        ) as h1,
        EngineSim(
            "--model",
            MODEL,
            "--http2",
            "--dp-size",
            "2",
            "--load-publish-endpoint",
            "auto",
            "--kv-events-endpoint",
            kv_endpoint_with_free_load_ports(2),
        ) as h2c,
    ):
        for engine in (h1, h2c):
            fleetplane(control.target, "workers", "add", engine.url)
        with RouterProcess("--control-plane", control.target, "--router-id", ROUTER_ID) as router:
            yield Fleet(control, (h1, h2c), router)

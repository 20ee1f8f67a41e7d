"""Ejection and probing flags with real processes (SPEC §5): ``--eject-after-failures`` sets how many
transport failures eject a worker, ``--health-probe-interval-s`` when an ejected one is probed back."""

from __future__ import annotations

import time

from tests.fakes.chat_stream import post_chat
from tests.fakes.engine_sim import EngineSim
from tests.fakes.process_tree import wait_for
from tests.fakes.router import RouterProcess


def _failed_attempts(router: RouterProcess, url: str) -> float:
    """Exchanges with ``url`` that failed at the transport (every outcome but ok)."""
    return sum(
        v
        for k, v in router.metrics().items()
        if k.startswith("fleetplane_upstream_requests_total")
        and f'worker="{url}"' in k
        and 'outcome="ok"' not in k
    )


def _healthy(router: RouterProcess, url: str) -> float | None:
    return router.metrics().get(f'fleetplane_worker_healthy{{worker="{url}"}}')


def test_eject_threshold_and_slow_probing_follow_the_flags() -> None:
    """--eject-after-failures 4: a dead worker is tried exactly 4 times, then ejected; with
    --health-probe-interval-s 60 it stays out for now even once it answers again."""
    with EngineSim() as good, EngineSim() as doomed:
        port = doomed.port
        # Active checks off: this is passive ejection (a failed check would eject it too, and
        # race the requests for the failure that counts).
        flags = (
            "--eject-after-failures",
            "4",
            "--health-probe-interval-s",
            "60",
            "--health-check-interval-s",
            "0",
        )
        with RouterProcess(
            "--policy", "round_robin", "--worker", good.url, "--worker", doomed.url, *flags
        ) as router:
            doomed.stop()
            statuses = [post_chat(router.port)[0] for _ in range(16)]
            assert statuses == [200] * 16  # every failed attempt was retried on the good worker
            assert _failed_attempts(router, doomed.url) == 4
            assert _healthy(router, doomed.url) == 0
            with EngineSim("--listen", f"127.0.0.1:{port}"):
                time.sleep(2.0)
                assert _healthy(router, doomed.url) == 0


def test_eject_on_first_failure_and_fast_probing_follow_the_flags() -> None:
    """--eject-after-failures 1: one failed attempt ejects; --health-probe-interval-s 0.1 (max 0.2)
    brings the worker back within a second of it answering /health again."""
    with EngineSim() as good, EngineSim() as doomed:
        port = doomed.port
        flags = (  # active checks off, as above
            "--health-check-interval-s",
            "0",
            "--eject-after-failures",
            "1",
            "--health-probe-interval-s",
            "0.1",
            "--health-probe-max-interval-s",
            "0.2",
        )
        with RouterProcess(
            "--policy", "round_robin", "--worker", good.url, "--worker", doomed.url, *flags
        ) as router:
            doomed.stop()
            statuses = [post_chat(router.port)[0] for _ in range(8)]
            assert statuses == [200] * 8
            assert _failed_attempts(router, doomed.url) == 1
            assert _healthy(router, doomed.url) == 0
            time.sleep(1.0)  # probes fail every ~0.2 s meanwhile: the interval stays capped
            with EngineSim("--listen", f"127.0.0.1:{port}"):
                started = time.monotonic()
                assert wait_for(lambda: _healthy(router, doomed.url) == 1, timeout_s=5, interval_s=0.05)
                assert time.monotonic() - started < 1.5

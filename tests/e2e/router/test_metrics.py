"""/metrics after a known sequence of requests (SPEC §8)."""

from __future__ import annotations

from tests.fakes.chat_client import chat, post
from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import RouterProcess, series

CHAT = "/v1/chat/completions"


def test_metric_values_after_a_known_sequence(sims: tuple[EngineSim, EngineSim]) -> None:
    """Counters, histogram count and gauges match exactly what was sent."""
    sim = sims[0]
    contract = '{"temperature": 0.5, "top_p": 0.9}'
    with RouterProcess("--worker", sim.url, "--override-sampling-params", contract) as router:
        before = router.metrics()
        assert not [k for k in before if k.startswith("fleetplane_sampling_contract_rejections_total")]
        for _ in range(3):
            assert post(router.url, CHAT, chat())[0] == 200
        assert post(router.url, CHAT, chat(temperature=1, top_p=0.1))[0] == 400
        assert post(router.url, CHAT, chat("missing-model"))[0] == 404
        assert router.get("/health")[0] == 200
        m = router.metrics()
        rejections = {
            k: v for k, v in m.items() if k.startswith("fleetplane_sampling_contract_rejections_total")
        }
        assert rejections == {
            series("fleetplane_sampling_contract_rejections_total", scope="*", param="temperature"): 1,
            series("fleetplane_sampling_contract_rejections_total", scope="*", param="top_p"): 1,
        }
        assert m[series("fleetplane_requests_total", route=CHAT, code="200")] == 3
        assert m[series("fleetplane_requests_total", route=CHAT, code="400")] == 1
        assert m[series("fleetplane_requests_total", route=CHAT, code="404")] == 1
        assert m[series("fleetplane_requests_total", route="/health", code="200")] == 1
        assert m[series("fleetplane_request_duration_seconds_count", route=CHAT)] == 5
        ok = series("fleetplane_upstream_requests_total", worker=sim.url, protocol="http1", outcome="ok")
        assert m[ok] == 3
        assert m[series("fleetplane_worker_inflight", worker=sim.url)] == 0
        assert m["fleetplane_admission_queue_depth"] == 0
        assert m["fleetplane_contract_revision"] == 0
        assert m["fleetplane_control_plane_connected"] == 0


def test_upstream_first_byte_and_duration_by_worker_protocol() -> None:
    """Answers from an HTTP/1.1 and an h2c worker, plain and streamed, are counted in both upstream
    histograms under their worker's protocol; refusals before any worker are not."""
    with (
        EngineSim("--model", "h1-model") as h1,
        EngineSim("--model", "h2-model", "--http2") as h2,
        RouterProcess(
            "--worker", h1.url, "--worker", h2.url, "--override-sampling-params", '{"top_k": 5}'
        ) as router,
    ):
        for model in ("h1-model", "h2-model"):
            assert post(router.url, CHAT, chat(model))[0] == 200
            assert post(router.url, CHAT, chat(model, stream=True))[0] == 200
        assert post(router.url, CHAT, chat("h1-model", top_k=9))[0] == 400  # refused: no worker saw it
        m = router.metrics()
    for protocol in ("http1", "h2c"):
        assert m[series("fleetplane_upstream_first_byte_seconds_count", protocol=protocol)] == 2
        assert m[series("fleetplane_upstream_duration_seconds_count", protocol=protocol)] == 2
        assert (
            m[series("fleetplane_upstream_duration_seconds_sum", protocol=protocol)]
            >= m[series("fleetplane_upstream_first_byte_seconds_sum", protocol=protocol)]
        )

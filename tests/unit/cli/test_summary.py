"""The live summary line of `fleetplane up`: what it counts and how it reads."""

from __future__ import annotations

import io

from controlplane.cli.summary import Sample, StatusLine, router_counts, summary_line

EXPOSITION = """\
# HELP fleetplane_requests_total Answers by route and HTTP status.
# TYPE fleetplane_requests_total counter
fleetplane_requests_total{code="200",route="/v1/chat/completions"} 7.0
fleetplane_requests_total{code="400",route="/v1/chat/completions"} 2.0
fleetplane_requests_total{code="200",route="/metrics"} 40.0
fleetplane_requests_total{code="200",route="/health"} 3.0
# HELP fleetplane_sampling_contract_rejections_total Requests refused by a sampling contract.
# TYPE fleetplane_sampling_contract_rejections_total counter
fleetplane_sampling_contract_rejections_total{param="temperature",scope="*"} 2.0
fleetplane_sampling_contract_rejections_total{param="top_p",scope="*"} 1.0
"""


def test_router_counts_leave_out_the_routers_own_endpoints() -> None:
    """Scrapes and health checks are not traffic; every rejection series is summed."""
    assert router_counts(EXPOSITION) == (9.0, 3.0)


def test_the_line_shows_the_rate_the_rejections_and_freshness() -> None:
    """Requests per second over the interval, rejections with their growth, fresh/registered workers."""
    before = Sample(10.0, 100.0, 3.0, 2, 2)
    now = Sample(12.0, 106.0, 5.0, 1, 2)
    assert summary_line(before, now, "14:02:07") == (
        "14:02:07  3.0 req/s  ·  rejections 5 (+2)  ·  workers fresh 1/2  ·  Ctrl-C stops"
    )


def test_what_could_not_be_read_shows_as_a_question_mark() -> None:
    """A first sample has no rate; an unreadable router or control plane shows ?, never 0."""
    assert summary_line(None, Sample(1.0, None, None, None, None), "t") == (
        "t  ? req/s  ·  rejections ?  ·  workers fresh ?  ·  Ctrl-C stops"
    )


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_is_drawn_in_place_only_on_a_terminal() -> None:
    """On a terminal: carriage return + erase line before each text, and an erase before other
    output; into a file: nothing at all."""
    tty = _Tty()
    line = StatusLine(tty)
    line.show("a")
    line.show("b")
    line.clear()
    assert tty.getvalue() == "\r\x1b[Ka\r\x1b[Kb\r\x1b[K"
    plain = io.StringIO()
    quiet = StatusLine(plain)
    quiet.show("a")
    quiet.clear()
    assert plain.getvalue() == ""

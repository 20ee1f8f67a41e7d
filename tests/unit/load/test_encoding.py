"""WatchLoads encoding: hand-assembled bytes parse exactly as the protobuf runtime's own messages."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from controlplane.load.convert import ViewErrors, timestamp, worker_load
from controlplane.load.encoding import WorkerLoadEncoder, watch_response
from controlplane.load.table import LoadTable, RankState
from controlplane.load.wire import LoadStat
from controlplane.v1 import load_pb2

URL = "http://127.0.0.1:9001"


def test_encoder_matches_the_table_view() -> None:
    """The watch encoder and GetLoads' view conversion produce the same WorkerLoad."""
    table = LoadTable(stale_after_s=1.0)
    r0, r1, r2 = table.set_worker(URL, ["tcp://h:1", "tcp://h:2", "tcp://h:3"])
    table.record_frame(r0, 4, LoadStat(1, 2, 30, 400, 0), now=10.0)
    table.record_frame(r0, 9, LoadStat(5, 6, 70, 800, 0), now=10.5)
    table.record_frame(r1, 0, LoadStat(1, 1, 1, 1, 1), now=8.0)
    table.record_malformed(r2)
    encoder = WorkerLoadEncoder(stale_after_s=1.0)
    for now in (10.5, 12.0):
        encoded = load_pb2.WorkerLoad.FromString(encoder.encode(URL, table.rank_states(URL) or [], now))
        assert encoded == worker_load(table.view(URL, now))  # type: ignore[arg-type]
    assert encoded.freshness == load_pb2.FRESHNESS_STALE and encoded.ranks[0].dropped_frames == 4


def _broken_table() -> tuple[LoadTable, list[RankState]]:
    """Two ranks of one worker, rank 1 holding a count no int64 field can carry."""
    table = LoadTable(stale_after_s=1.0)
    ranks = table.set_worker(URL, ["tcp://h:1", "tcp://h:2"])
    table.record_frame(ranks[0], 0, LoadStat(1, 2, 3, 400, 0), now=0.0)
    table.record_frame(ranks[1], 0, LoadStat(5, 6, 7, 800, 1), now=0.0)
    ranks[1].frames_received = 2**64  # what no path of today's table makes: the guard's test
    return table, ranks


def test_a_value_that_does_not_fit_leaves_only_that_value_out_and_is_logged_once() -> None:
    """Encoder and GetLoads conversion send the worker without the broken field; one log, every one counted."""
    table, ranks = _broken_table()
    errors = ViewErrors()
    encoder = WorkerLoadEncoder(stale_after_s=1.0, errors=errors)
    before = REGISTRY.get_sample_value("fleetplane_load_view_errors_total") or 0.0
    with capture_logs() as logs:
        encoded = [load_pb2.WorkerLoad.FromString(encoder.encode(URL, ranks, 0.5)) for _ in range(2)]
        converted = worker_load(table.view(URL, 0.5), errors)  # type: ignore[arg-type]
    for message in (*encoded, converted):
        assert (message.url, message.num_running_reqs, message.max_total_num_tokens) == (URL, 6, 1200)
        assert message.freshness == load_pb2.FRESHNESS_FRESH
        assert [r.frames_received for r in message.ranks] == [1, 0]
        assert [r.num_tokens for r in message.ranks] == [3, 7]
    warnings = [e for e in logs if e["event"] == "load_view_value_out_of_range"]
    assert len(warnings) == 1 and warnings[0]["fields"] == ["ranks[1].frames_received"]
    assert REGISTRY.get_sample_value("fleetplane_load_view_errors_total") == before + 3
    ranks[1].frames_received = 2
    with capture_logs() as logs:
        again = load_pb2.WorkerLoad.FromString(encoder.encode(URL, ranks, 0.5))
    assert [r.frames_received for r in again.ranks] == [1, 2]
    assert [e["event"] for e in logs] == ["load_view_value_in_range_again"]


def test_reused_message_does_not_keep_values_of_a_previous_registration() -> None:
    """Re-registering a worker starts its counts at zero even though the encoder reuses a message."""
    table = LoadTable(stale_after_s=1.0)
    encoder = WorkerLoadEncoder(stale_after_s=1.0)
    (r0,) = table.set_worker(URL, ["tcp://h:1"])
    table.record_frame(r0, 0, LoadStat(9, 9, 9, 9, 0), now=0.0)
    encoder.encode(URL, table.rank_states(URL) or [], 0.0)
    table.remove_worker(URL)
    table.set_worker(URL, ["tcp://h:1"])
    again = load_pb2.WorkerLoad.FromString(encoder.encode(URL, table.rank_states(URL) or [], 0.0))
    assert again.num_running_reqs == 0 and again.ranks[0].num_running_reqs == 0
    assert again.freshness == load_pb2.FRESHNESS_UNKNOWN


def test_a_connect_error_is_encoded_and_cleared_in_the_reused_message() -> None:
    """A rank's connect error reaches watchers as GetLoads shows it, and is gone once it connects."""
    table = LoadTable(stale_after_s=1.0)
    encoder = WorkerLoadEncoder(stale_after_s=1.0)
    _, r1 = table.set_worker(URL, ["tcp://h:1", "tcp://h:2"])
    table.record_connect_error(r1, "connection refused")
    for _ in range(2):  # the message is reused: the error must be cleared in it, not kept
        encoded = load_pb2.WorkerLoad.FromString(encoder.encode(URL, table.rank_states(URL) or [], 0.0))
        assert encoded == worker_load(table.view(URL, 0.0))  # type: ignore[arg-type]
        assert [r.connect_error for r in encoded.ranks] == ["", r1.connect_error]
        table.record_connect_error(r1, "")


def test_changed_endpoints_are_encoded_after_re_registration() -> None:
    """A worker re-registered with other or more endpoints is encoded with the new ranks."""
    table = LoadTable(stale_after_s=1.0)
    encoder = WorkerLoadEncoder(stale_after_s=1.0)
    table.set_worker(URL, ["tcp://h:1"])
    encoder.encode(URL, table.rank_states(URL) or [], 0.0)
    table.set_worker(URL, ["tcp://h:5", "tcp://h:6"])
    again = load_pb2.WorkerLoad.FromString(encoder.encode(URL, table.rank_states(URL) or [], 0.0))
    assert [(r.dp_rank, r.endpoint) for r in again.ranks] == [(0, "tcp://h:5"), (1, "tcp://h:6")]


@given(
    full=st.booleans(),
    running=st.lists(st.integers(min_value=0, max_value=2**40), max_size=5),
    removed=st.lists(st.text(min_size=1, max_size=300), max_size=4),
    unix_s=st.floats(min_value=0, max_value=4e9),
)
def test_assembled_response_parses_as_the_runtime_encodes_it(
    full: bool, running: list[int], removed: list[str], unix_s: float
) -> None:
    """Property: concatenated WorkerLoad bytes form the same WatchLoadsResponse protobuf builds."""
    workers = [load_pb2.WorkerLoad(url=f"http://w{i}:1", num_running_reqs=n) for i, n in enumerate(running)]
    raw = watch_response(full, [w.SerializeToString() for w in workers], removed, unix_s)
    expected = load_pb2.WatchLoadsResponse(
        full=full, workers=workers, removed_urls=removed, time=timestamp(unix_s)
    )
    assert load_pb2.WatchLoadsResponse.FromString(raw) == expected


_rank_states = st.lists(
    st.tuples(
        # wire.MAX_COUNT; four counts (a six-position frame) or SGLang 0.5.23's nine
        st.none()
        | st.tuples(*[st.integers(min_value=0, max_value=2**52 - 1)] * 4)
        | st.tuples(*[st.integers(min_value=0, max_value=2**52 - 1)] * 9),
        st.integers(min_value=0, max_value=2**62),  # seq
        st.none() | st.floats(min_value=0.0, max_value=100.0),  # last frame, seconds ago
        st.integers(min_value=0, max_value=300),  # malformed frames
    ),
    max_size=4,
)


@given(states=_rank_states, restarts=st.integers(min_value=0, max_value=2))
def test_encoded_bytes_parse_as_the_view_for_any_rank_states(
    states: list[tuple[tuple[int, ...] | None, int, float | None, int]], restarts: int
) -> None:
    """Property: for any rank states the hand-encoded WorkerLoad parses to GetLoads' message, the
    appended counts included (summed per worker only when every rank sent them)."""
    table = LoadTable(stale_after_s=3.0)
    ranks = table.set_worker(URL, [f"tcp://[::1]:{7000 + i}" for i in range(len(states))])
    now = 1000.0
    for rank, (counts, seq, ago, malformed) in zip(ranks, states, strict=True):
        if counts is not None and ago is not None:
            stat = LoadStat(*counts[:4], rank.dp_rank, *counts[4:])
            table.record_frame(rank, seq, stat, now - ago)
            rank.publisher_restarts = restarts
            rank.dropped_frames = seq // 3
        for _ in range(malformed):
            table.record_malformed(rank)
    encoded = WorkerLoadEncoder(stale_after_s=3.0).encode(URL, table.rank_states(URL) or [], now)
    assert load_pb2.WorkerLoad.FromString(encoded) == worker_load(table.view(URL, now))  # type: ignore[arg-type]

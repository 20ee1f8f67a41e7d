"""``StreamTable``: the same answers as a dict keyed by stream id, whatever ids come and go."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.http.stream_table import FIRST_SLOTS, MAX_SLOTS, StreamTable

# Operations on a table: open the next stream (ids grow by ``step``), close one, look one up.
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.sampled_from([2, 2, 2, 4, 2 * FIRST_SLOTS, 2 * MAX_SLOTS, 34])),
        st.tuples(st.just("close"), st.integers(0, 600)),
        st.tuples(st.just("get"), st.integers(0, 5000)),
    ),
    max_size=600,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_answers_as_a_dict_does(ops: list[tuple[str, int]]) -> None:
    table: StreamTable[str] = StreamTable()
    model: dict[int, str] = {}
    next_id = 1
    for op, arg in ops:
        if op == "open":
            table.put(next_id, f"stream {next_id}")
            model[next_id] = f"stream {next_id}"
            next_id += arg
        elif op == "close":
            # Close the arg-th oldest open stream (or an id never opened: nothing to pop).
            sid = sorted(model)[arg] if arg < len(model) else next_id + 1
            assert table.pop(sid) == model.pop(sid, None)
        else:
            assert table.get(arg) == model.get(arg)
        assert len(table) == table.count == len(model)
    assert table.items() == sorted(model.items())
    assert table.values() == [model[sid] for sid in sorted(model)]
    assert table.take_all() == [model[sid] for sid in sorted(model)]
    assert len(table) == 0 and table.items() == []


def test_stream_zero_is_never_held() -> None:
    """Id 0 marks a free slot: looking it up or popping it finds nothing, full table or not."""
    table: StreamTable[str] = StreamTable()
    assert table.get(0) is None and table.pop(0) is None
    for sid in range(1, 4 * FIRST_SLOTS, 2):
        table.put(sid, str(sid))
    assert table.get(0) is None and table.pop(0) is None
    assert len(table) == 2 * FIRST_SLOTS


def test_a_long_stream_beside_many_short_ones() -> None:
    """A stream left open while thousands open and close after it (a long SSE answer beside
    short requests) stays found, and so does each short one, though they share its slot."""
    table: StreamTable[str] = StreamTable()
    table.put(1, "long")
    for sid in range(3, 20001, 2):
        table.put(sid, "short")
        assert table.get(sid) == "short" and table.get(1) == "long"
        assert table.pop(sid) == "short"
    assert table.items() == [(1, "long")]


def test_many_streams_open_at_once_grow_the_ring_only_up_to_its_bound() -> None:
    table: StreamTable[int] = StreamTable()
    for sid in range(1, 2 * 4 * MAX_SLOTS, 2):
        table.put(sid, sid)
    assert len(table) == 4 * MAX_SLOTS
    assert all(table.get(sid) == sid for sid in range(1, 2 * 4 * MAX_SLOTS, 2))
    assert len(table._ids) == MAX_SLOTS

"""The per-slot rejection counts journal (SPEC §6: a SIGKILLed child's counts are reported by its
successor under its own boot id, once, however often they are re-sent)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.router.control.client import ControlPlaneClient
from dataplane.router.control.convert import ControlClientSettings
from dataplane.router.process.journal import (
    MAX_CARRIED_BOOTS,
    BootCounts,
    CountsJournal,
    JournalBusy,
    decode_record,
    default_journal_path,
    encode_record,
    open_journal,
    open_journal_when_free,
)
from tests.fakes.control_targets import Recorder

# Client "" (no --api-keys) and named clients (--api-keys) share one record.
_keys = st.tuples(
    st.text(min_size=1, max_size=8),
    st.sampled_from(["temperature", "top_p", "top_k"]),
    st.sampled_from(["", "team-a", "bot/2"]),
)
_boots = st.lists(
    st.builds(BootCounts, st.text(min_size=1, max_size=16), st.dictionaries(_keys, st.integers(0, 2**40))),
    min_size=1,
    max_size=4,
)


@given(boots=_boots)
def test_record_round_trip(boots: list[BootCounts]) -> None:
    """What is written for a router id reads back the same for that id, and as nothing for another."""
    data = encode_record("edge/0", boots)
    assert decode_record(data, "edge/0") == boots
    assert decode_record(data, "edge/1") == []


@given(boots=_boots, cut=st.integers(0, 10_000))
def test_a_torn_record_reads_as_nothing(boots: list[BootCounts], cut: int) -> None:
    """A record cut short (a write that did not finish) is ignored, never half-read."""
    data = encode_record("edge/0", boots)
    cut %= len(data)
    assert decode_record(data[:cut], "edge/0") == []


def test_a_longer_old_record_does_not_leak_into_a_shorter_new_one(tmp_path: Path) -> None:
    """The length header bounds the record: bytes left over from a longer earlier record are ignored."""
    path = str(tmp_path / "slot-0.counts")
    first = CountsJournal.open(path, "edge/0")
    assert first is not None and first.predecessors == []
    first.start("boot-a")
    first.record({(f"scope-{i}", "top_p", ""): i for i in range(50)})
    first.close()
    second = CountsJournal.open(path, "edge/0")
    assert second is not None and [b.boot_id for b in second.predecessors] == ["boot-a"]
    second.start("boot-b")
    second.record({("*", "temperature", ""): 1})
    second.close()
    third = CountsJournal.open(path, "edge/0")
    assert third is not None
    assert third.predecessors[0] == BootCounts("boot-b", {("*", "temperature", ""): 1})
    assert third.predecessors[1].boot_id == "boot-a"  # carried on: boot-b may never have reported it
    third.close()


def test_carried_boots_are_bounded(tmp_path: Path) -> None:
    """A crash loop carries at most MAX_CARRIED_BOOTS earlier boots."""
    path = str(tmp_path / "slot-0.counts")
    for n in range(MAX_CARRIED_BOOTS + 5):
        journal = CountsJournal.open(path, "edge/0")
        assert journal is not None
        journal.start(f"boot-{n}")
        journal.close()
    journal = CountsJournal.open(path, "edge/0")
    assert journal is not None and len(journal.predecessors) == MAX_CARRIED_BOOTS
    journal.close()


async def test_predecessor_reports_carry_their_boot_and_final_counts() -> None:
    """The successor reports each predecessor's counts under the predecessor's boot id, its own
    status otherwise; its own report keeps its own boot and counts."""
    target = Recorder()
    target.counts = {("*", "top_p", ""): 1}
    previous = BootCounts("dead-boot", {("*", "temperature", ""): 7})
    client = ControlPlaneClient(
        ControlClientSettings(target="127.0.0.1:1", router_id="edge/1"), target, predecessors=[previous]
    )
    [report] = client.predecessor_reports()
    assert (report.router_id, report.boot_id) == ("edge/1", "dead-boot")
    assert [(r.scope, r.param, r.count) for r in report.rejections] == [("*", "temperature", 7)]
    own = client.build_report()
    assert own.boot_id == client.boot_id != "dead-boot"
    assert [(r.scope, r.param, r.count) for r in own.rejections] == [("*", "top_p", 1)]
    await client.close()


def test_each_record_is_the_bytes_encode_record_makes(tmp_path: Path) -> None:
    """The per-rejection fast encoding (fixed parts encoded once) writes exactly encode_record's bytes."""
    path = str(tmp_path / "r.counts")
    first = CountsJournal.open(path, "edge")
    assert first is not None
    first.start("boot-a")
    first.record({("*", "temperature", ""): 3, ("m", "top_p", ""): 1})
    first.close()
    second = CountsJournal.open(path, "edge")
    assert second is not None
    second.start("boot-b")
    counts = {("*", "top_k", ""): 2}
    second.record(counts)
    with open(path, "rb") as f:
        written = f.read()
    assert written.startswith(encode_record("edge", [BootCounts("boot-b", counts), *second.predecessors]))
    second.close()


@given(rounds=st.lists(st.dictionaries(_keys, st.integers(0, 2**40), max_size=6), min_size=1, max_size=6))
def test_records_in_any_order_of_key_sets_are_encode_records_bytes(
    tmp_path_factory: pytest.TempPathFactory, rounds: list[dict[tuple[str, str, str], int]]
) -> None:
    """Counts that grow as a router's do (keys added, numbers raised) and unrelated ones of the
    same size alike: every record written reads back as those counts, byte for byte what
    ``encode_record`` makes, the carried boots after them."""
    path = str(tmp_path_factory.mktemp("journal") / "r.counts")
    first = CountsJournal.open(path, "edge")
    assert first is not None
    first.start("boot-a")
    first.record({("*", "top_p", "team-a"): 2})
    first.close()
    journal = CountsJournal.open(path, "edge")
    assert journal is not None
    journal.start("boot-b")
    grown: dict[tuple[str, str, str], int] = {}
    for counts in rounds:
        grown = {**grown, **{key: grown.get(key, 0) + n for key, n in counts.items()}}
        for written in (grown, counts):
            journal.record(written)
            with open(path, "rb") as f:
                data = f.read()
            expected = encode_record("edge", [BootCounts("boot-b", dict(written)), *journal.predecessors])
            assert data.startswith(expected)
            assert decode_record(data, "edge")[0] == BootCounts("boot-b", dict(written))
    journal.close()


def test_a_journal_held_by_a_live_router_is_not_shared(tmp_path: Path) -> None:
    """A second router opening the same file while the first holds it is told it is busy, and waits
    for it (a predecessor still stopping) for a bounded time before going without."""
    path = str(tmp_path / "r.counts")
    holder = CountsJournal.open(path, "edge")
    assert holder is not None
    with pytest.raises(JournalBusy):
        CountsJournal.open(path, "edge")

    async def wait_then_release() -> CountsJournal | None:
        asyncio.get_running_loop().call_later(0.3, holder.close)
        return await open_journal_when_free(path, "edge", wait_s=5)

    waited = asyncio.run(wait_then_release())
    assert waited is not None
    waited.close()
    holder = CountsJournal.open(path, "edge")
    assert holder is not None
    assert asyncio.run(open_journal_when_free(path, "edge", wait_s=0.3)) is None
    holder.close()
    again = CountsJournal.open(path, "edge")
    assert again is not None
    again.close()


def test_the_default_directory_must_be_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default journal lives in XDG_RUNTIME_DIR/fleetplane, named after id and control plane;
    a directory others may enter is not used."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = default_journal_path("edge", "cp:50051")
    assert Path(path).parent == tmp_path / "fleetplane"
    assert path != default_journal_path("edge", "other:50051")
    journal = open_journal(path, "edge")
    assert journal is not None
    assert stat.S_IMODE(os.stat(tmp_path / "fleetplane").st_mode) == 0o700
    journal.remove()
    assert not Path(path).exists()
    os.chmod(tmp_path / "fleetplane", 0o777)
    assert open_journal(path, "edge") is None

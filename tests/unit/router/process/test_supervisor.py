"""Pure parts of the --processes supervisor: restart backoff and child arguments (SPEC §1)."""

from __future__ import annotations

from dataplane.router.process.supervisor import RestartBackoff, child_argv, slot_router_id


def test_backoff_doubles_up_to_the_cap() -> None:
    """Quick successive crashes wait longer each time, never more than max_s."""
    b = RestartBackoff(base_s=0.1, max_s=1.0, stable_after_s=10)
    delays = [b.delay_after_exit(0.5) for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_backoff_resets_after_a_stable_run() -> None:
    """A child that ran long enough before crashing is restarted at the base delay again."""
    b = RestartBackoff(base_s=0.1, max_s=5.0, stable_after_s=10)
    for _ in range(4):
        b.delay_after_exit(0.1)
    assert b.delay_after_exit(60.0) == 0.1


def test_child_argv_forces_one_process_and_the_concrete_listen() -> None:
    """Children run --processes 1 on the resolved address; other flags pass through unchanged."""
    argv = ["--listen", "127.0.0.1:0", "--processes=4", "--worker", "http://a:1", "--processes", "2"]
    assert child_argv(argv, "127.0.0.1:8123") == [
        "--worker",
        "http://a:1",
        "--processes",
        "1",
        "--listen",
        "127.0.0.1:8123",
    ]


def test_child_argv_leaves_the_router_id_to_the_supervisor() -> None:
    """--router-id (either form) is dropped: each child gets its slot's id instead."""
    argv = ["--router-id", "edge", "--router-id=edge2", "--control-plane", "h:1"]
    assert child_argv(argv, "127.0.0.1:1") == [
        "--control-plane",
        "h:1",
        "--processes",
        "1",
        "--listen",
        "127.0.0.1:1",
    ]


def test_slot_router_id_names_the_process_slot() -> None:
    """Child 0..N-1 reports as ID/0..ID/N-1 (the same id after a restart of that slot)."""
    assert [slot_router_id("edge", slot) for slot in range(3)] == ["edge/0", "edge/1", "edge/2"]

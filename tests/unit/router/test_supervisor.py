"""Pure parts of the --processes supervisor: restart backoff and child arguments (SPEC §1)."""

from __future__ import annotations

from dataplane.router.supervisor import RestartBackoff, child_argv


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

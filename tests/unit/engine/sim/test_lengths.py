"""Answer lengths: max, uniform or geometric stop distributions, seeded."""

from __future__ import annotations

import statistics

import pytest

from dataplane.engine.sim.lengths import AnswerLengths, AnswerLengthsError


def test_max_runs_every_answer_to_max_tokens() -> None:
    """The default draws nothing: answers end at max_tokens."""
    assert AnswerLengths("max").sample(100) is None


def test_uniform_stays_within_one_and_max_tokens() -> None:
    """uniform draws 1..max_tokens, all of it reachable."""
    draw = AnswerLengths("uniform", seed=1)
    lengths = [draw.sample(5) for _ in range(500)]
    assert set(lengths) == {1, 2, 3, 4, 5}


def test_geometric_has_its_mean_and_is_capped() -> None:
    """geometric:40 averages about 40 tokens uncapped, and never passes max_tokens."""
    draw = AnswerLengths("geometric:40", seed=2)
    lengths = [draw.sample(100_000) or 0 for _ in range(4000)]
    assert 37 < statistics.mean(lengths) < 43 and min(lengths) >= 1
    assert max(AnswerLengths("geometric:40", seed=2).sample(10) or 0 for _ in range(200)) <= 10


def test_same_seed_same_lengths() -> None:
    """A seed replays the same answers."""
    a, b = AnswerLengths("geometric:8", seed=5), AnswerLengths("geometric:8", seed=5)
    assert [a.sample(50) for _ in range(50)] == [b.sample(50) for _ in range(50)]


@pytest.mark.parametrize("spec", ["", "poisson", "uniform:3", "geometric", "geometric:0.5", "geometric:nan"])
def test_other_forms_are_refused(spec: str) -> None:
    """Anything but the three forms is an error naming the value."""
    with pytest.raises(AnswerLengthsError, match="geometric"):
        AnswerLengths(spec)

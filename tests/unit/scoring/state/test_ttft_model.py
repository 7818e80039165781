from __future__ import annotations

import pytest

from scoring.state.ttft_model import OnlineTtftModel, TtftCoefficients

PRIOR = TtftCoefficients(overhead_s=0.02, prefill_token_s=2e-4)
WORKS = [0, 500, 1_000, 4_000, 250, 8_000, 2_000, 6_000, 3_000, 100, 7_000, 5_000]


def _feed(model: OnlineTtftModel, endpoint: str, line: TtftCoefficients, works: list[int]) -> None:
    for w in works:
        model.observe(endpoint, w, line.predict(w))


def test_predict_is_the_line() -> None:
    assert TtftCoefficients(0.5, 0.01).predict(100) == pytest.approx(1.5)


def test_recovers_a_line_from_noiseless_data() -> None:
    model = OnlineTtftModel(PRIOR)
    truth = TtftCoefficients(overhead_s=0.05, prefill_token_s=1e-4)
    _feed(model, "a", truth, WORKS)
    got = model.coefficients("a")
    assert got.overhead_s == pytest.approx(0.05, rel=1e-6)
    assert got.prefill_token_s == pytest.approx(1e-4, rel=1e-6)


def test_prior_until_min_samples() -> None:
    model = OnlineTtftModel(PRIOR, min_samples=8)
    truth = TtftCoefficients(0.1, 1e-3)
    _feed(model, "a", truth, WORKS[:7])
    assert model.coefficients("a") == PRIOR
    _feed(model, "a", truth, WORKS[7:8])
    assert model.coefficients("a").prefill_token_s == pytest.approx(1e-3)
    assert model.coefficients("never-seen") == model.coefficients("a")  # borrows the fits'


def test_an_endpoint_without_a_fit_borrows_the_mean_of_the_fitted_lines() -> None:
    model = OnlineTtftModel(PRIOR, bound=100.0)
    assert model.lines(["x"]) == [PRIOR]  # nothing fitted yet
    _feed(model, "a", TtftCoefficients(0.1, 1e-3), WORKS)
    _feed(model, "b", TtftCoefficients(0.3, 3e-3), WORKS)
    mean = model.coefficients("x")
    assert mean.overhead_s == pytest.approx(0.2) and mean.prefill_token_s == pytest.approx(2e-3)
    assert model.lines(["a", "x"]) == [model.coefficients("a"), mean]
    model.forget("b")
    assert model.coefficients("x") == model.coefficients("a")
    model.forget("a")
    assert model.coefficients("x") == PRIOR


def test_prior_when_work_has_no_spread() -> None:
    model = OnlineTtftModel(PRIOR, min_samples=2)
    for i in range(50):
        model.observe("a", 1_000 + (i % 2) * 10, 0.3)  # spread of 1 % of the mean
    assert model.coefficients("a") == PRIOR


def test_slope_is_never_negative() -> None:
    model = OnlineTtftModel(PRIOR, bound=1e12)  # practically unbounded: the floor is ~0
    _feed(model, "falling", TtftCoefficients(0.2, -1e-5), WORKS)  # faster with more work?!
    falling = model.coefficients("falling")
    assert 0.0 <= falling.prefill_token_s < 1e-12
    mean = sum(0.2 - 1e-5 * w for w in WORKS) / len(WORKS)
    assert falling.overhead_s == pytest.approx(mean, rel=0.1)  # ~ the (decay-weighted) mean
    _feed(model, "negative-overhead", TtftCoefficients(-0.5, 1e-3), [1_000, 2_000] * 6)
    got = model.coefficients("negative-overhead")
    assert 0.0 <= got.overhead_s < 1e-12
    assert got.prefill_token_s == pytest.approx(1e-3)


def test_coefficients_stay_within_bound_of_the_prior() -> None:
    model = OnlineTtftModel(PRIOR, bound=10.0)
    _feed(model, "free", TtftCoefficients(1e-3, -1e-7), WORKS)  # would predict ~nothing
    assert model.coefficients("free") == TtftCoefficients(0.002, 2e-5)
    _feed(model, "glacial", TtftCoefficients(30.0, 1.0), WORKS)  # confounded by queueing
    assert model.coefficients("glacial") == TtftCoefficients(0.2, 2e-3)
    with pytest.raises(ValueError, match="bound"):
        OnlineTtftModel(PRIOR, bound=0.5)


def test_decay_tracks_a_change() -> None:
    before, after = TtftCoefficients(0.02, 1e-4), TtftCoefficients(0.15, 5e-4)
    tracking = OnlineTtftModel(PRIOR, decay=0.9)
    frozen = OnlineTtftModel(PRIOR, decay=1.0)  # plain least squares: never forgets
    for model in (tracking, frozen):
        _feed(model, "a", before, WORKS * 10)
        _feed(model, "a", after, WORKS * 5)
    new = tracking.coefficients("a")
    assert new.overhead_s == pytest.approx(0.15, rel=0.01)
    assert new.prefill_token_s == pytest.approx(5e-4, rel=0.01)
    assert frozen.coefficients("a").prefill_token_s < 4e-4


def test_endpoints_are_fitted_separately_and_forget_resets_one() -> None:
    model = OnlineTtftModel(PRIOR)
    _feed(model, "a", TtftCoefficients(0.1, 1e-3), WORKS)
    _feed(model, "b", TtftCoefficients(0.01, 5e-5), WORKS)
    assert model.coefficients("a").prefill_token_s == pytest.approx(1e-3)
    assert model.coefficients("b").prefill_token_s == pytest.approx(5e-5)
    model.forget("a")
    assert model.coefficients("a") == model.coefficients("b")  # the only fitted line
    assert model.coefficients("b").prefill_token_s == pytest.approx(5e-5)
    # Forgotten means from scratch: borrowed again until min_samples new samples.
    _feed(model, "a", TtftCoefficients(0.3, 2e-3), WORKS[:7])
    assert model.coefficients("a") == model.coefficients("b")
    model.forget("never-seen")


def test_invalid_observations_are_ignored() -> None:
    model = OnlineTtftModel(PRIOR, min_samples=2)
    _feed(model, "a", TtftCoefficients(0.1, 1e-3), WORKS)
    model.observe("a", -5, 0.1)
    model.observe("a", 100, -1.0)
    assert model.coefficients("a").prefill_token_s == pytest.approx(1e-3)


@pytest.mark.parametrize("decay", [0.0, -0.5, 1.5])
def test_decay_must_be_in_the_unit_interval(decay: float) -> None:
    with pytest.raises(ValueError, match="decay"):
        OnlineTtftModel(PRIOR, decay=decay)

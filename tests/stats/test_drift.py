import math

import numpy as np
import pytest

from otel_assay.stats import BernoulliCUSUM, PageHinkley, bernoulli_cusum, cusum, page_hinkley


def test_bernoulli_cusum_detects_a_drop_quickly():
    rng = np.random.default_rng(0)
    outcomes = np.r_[rng.random(300) < 0.9, rng.random(300) < 0.7]
    r = bernoulli_cusum(outcomes, 0.9, 0.75)
    assert r.alarm and 300 <= r.alarm_index < 380 and r.path.shape == (600,)
    assert r.method == "bernoulli-cusum"


def test_bernoulli_cusum_in_control_run_length_at_least_e_to_the_h():
    # Lorden's bound: the in-control average run length is >= e^h.
    rng = np.random.default_rng(1)
    h = math.log(50)
    lengths = []
    for _ in range(300):
        det = BernoulliCUSUM(0.9, 0.8, h)
        while not det.update(bool(rng.random() < 0.9)):
            pass
        lengths.append(det.n)
    assert np.mean(lengths) > 50


def test_cusum_on_fingerprint_distances():
    rng = np.random.default_rng(2)
    distances = np.r_[rng.gamma(2, 0.5, 200), rng.gamma(2, 0.5, 200) + 0.8]
    r = cusum(distances, target=1.0, k=0.4, h=8.0)
    assert r.alarm and 200 <= r.alarm_index < 260
    assert not cusum(distances[:200], target=1.0, k=0.4, h=8.0).alarm
    down = cusum(-distances, target=-1.0, k=0.4, h=8.0, direction="decrease")
    assert down.alarm_index == r.alarm_index


def test_page_hinkley():
    rng = np.random.default_rng(3)
    values = np.r_[rng.normal(0, 1, 300), rng.normal(1.5, 1, 200)]
    r = page_hinkley(values, delta=0.1, threshold=25.0)
    assert r.alarm and 300 <= r.alarm_index < 350
    rate = np.r_[rng.random(300) < 0.9, rng.random(300) < 0.6].astype(float)
    assert page_hinkley(rate, delta=0.02, threshold=8.0, direction="decrease").alarm_index >= 300
    ph = PageHinkley(0.1, 25.0)
    assert not ph.update(0.0) and ph.statistic == 0.0


@pytest.mark.parametrize("call,name", [
    (lambda: bernoulli_cusum([1, 2], 0.9, 0.8), "outcome"),
    (lambda: bernoulli_cusum([1], 0.8, 0.9), "p1"),
    (lambda: cusum([1.0, float("nan")], 0.0, 0.1, 1.0), "x"),
    (lambda: cusum([1.0], 0.0, 0.1, 0.0), "h"),
    (lambda: page_hinkley([1.0], 0.1, 1.0, direction="up"), "direction"),
])
def test_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()

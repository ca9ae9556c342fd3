"""The hidden-sources task of bayesattn_lite.toy: sampling, and the exact posterior checked against
a brute-force computation from the densities."""

import math

import numpy as np
import pytest
import torch

from bayesattn_lite import toy


@pytest.fixture
def task():
    return toy.make_task(n_sources=3, d_x=6, seq_len=5, signal_prob=0.4, noise=1.0, separation=2.0, seed=3)


def test_make_task_places_means_at_the_separation(task):
    assert task.means.shape == (3, 6) and task.distractor.shape == (6,)
    assert torch.allclose(task.means.norm(dim=1), torch.full((3,), 2.0, dtype=torch.float64))
    assert math.isclose(task.distractor.norm().item(), 2.0)


def test_sample_shapes_targets_and_signal_rate(task):
    x, y, sig = toy.sample(task, 2000, seed=1)
    assert x.shape == (2000, 5, 6) and y.shape == (2000, 5) and sig.shape == (2000, 5)
    assert (y == y[:, :1]).all(), "the target is the sequence's source at every position"
    assert abs(sig.double().mean().item() - 0.4) < 0.02
    # signal positions sit around their source's mean, distractors around the distractor mean
    centred = x.double() - torch.where(sig[..., None], task.means[y], task.distractor)
    assert abs(centred.mean().item()) < 0.02 and abs(centred.std().item() - 1.0) < 0.02


def test_sample_is_reproducible_by_seed(task):
    a, b, c = toy.sample(task, 4, seed=7), toy.sample(task, 4, seed=7), toy.sample(task, 4, seed=8)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


def brute_force_posterior(task, x):
    """p(z | x_0..t) from the full Gaussian densities (constants included), one sequence at a time."""
    x = x.double().numpy()
    d = task.d_x
    means, dist = task.means.numpy(), task.distractor.numpy()

    def normal(v, m):
        return math.exp(-((v - m) ** 2).sum() / 2) / (2 * math.pi) ** (d / 2)

    out = np.zeros(x.shape[:2] + (task.n_sources,))
    for b in range(x.shape[0]):
        joint = np.full(task.n_sources, 1.0 / task.n_sources)
        for t in range(x.shape[1]):
            for z in range(task.n_sources):
                joint[z] *= task.signal_prob * normal(x[b, t], means[z]) + (1 - task.signal_prob) * normal(x[b, t], dist)
            out[b, t] = joint / joint.sum()
    return out


def test_posterior_matches_brute_force(task):
    x, _, _ = toy.sample(task, 6, seed=2)
    assert np.allclose(toy.posterior(task, x).numpy(), brute_force_posterior(task, x), atol=1e-10)


def test_observation_posterior_is_the_posterior_of_one_observation(task):
    x, _, _ = toy.sample(task, 6, seed=2)
    single = toy.observation_posterior(task, x)
    for t in range(task.seq_len):
        assert torch.allclose(single[:, t], toy.posterior(task, x[:, t:t + 1])[:, 0])


def test_posterior_sharpens_and_bayes_beats_a_uniform_guess(task):
    x, y, _ = toy.sample(task, 500, seed=4)
    h = toy.entropy(toy.posterior(task, x)).mean(0)
    assert h[-1] < h[0] - 0.2
    assert toy.bayes_loss(task, x, y) < math.log(3) - 0.1


def test_kl_is_zero_for_the_posterior_itself_and_positive_otherwise(task):
    x, _, _ = toy.sample(task, 20, seed=5)
    post = toy.posterior(task, x)
    assert abs(toy.kl_to_posterior_bits(task, x, torch.log(post))) < 1e-9
    assert toy.kl_to_posterior_bits(task, x, torch.zeros_like(post)) > 0.05


def test_entropy_of_uniform_and_one_hot():
    assert math.isclose(toy.entropy(torch.full((4,), 0.25)).item(), math.log(4))
    assert toy.entropy(torch.tensor([1.0, 0.0])).item() == 0.0


@pytest.mark.parametrize("kwargs, match", [
    ({"n_sources": 1}, "n_sources"), ({"d_x": 3}, "d_x"), ({"signal_prob": 0.0}, "signal_prob"),
    ({"signal_prob": 1.5}, "signal_prob"), ({"noise": -1.0}, "noise"), ({"seq_len": 0}, "seq_len"),
])
def test_make_task_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        toy.make_task(**kwargs)


def test_bad_shapes_raise_value_errors(task):
    with pytest.raises(ValueError, match="d_x=6"):
        toy.posterior(task, torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="n_seqs"):
        toy.sample(task, 0)
    x, y, _ = toy.sample(task, 2, seed=0)
    with pytest.raises(ValueError, match="y"):
        toy.bayes_loss(task, x, y[:, :3])
    with pytest.raises(ValueError, match="logits"):
        toy.kl_to_posterior_bits(task, x, torch.zeros(2, 5, 4))


def test_a_task_without_distractors_has_the_plain_gaussian_posterior():
    task = toy.make_task(n_sources=2, d_x=4, seq_len=3, signal_prob=1.0, seed=0)
    x, _, sig = toy.sample(task, 5, seed=0)
    assert sig.all()
    ll = -((x.double()[..., None, :] - task.means) ** 2).sum(-1) / 2
    assert torch.allclose(toy.posterior(task, x), torch.softmax(ll.cumsum(1), -1))

"""bayesattn_lite.tasks: the sticky Markov chain (the authors' matrix, the sampler's alignment, the
exact predictor against a brute-force sum over every hidden path) and the hidden-sources task (its
posterior against the densities); the old ``toy`` names, kept for one release."""

import itertools
import math

import numpy as np
import pytest
import torch

from bayesattn_lite import diagnostics, tasks
from bayesattn_lite.tasks import StickyMarkovChain, circular_distance, sticky_transition_matrix


def test_transition_matrix_is_the_authors():
    P = StickyMarkovChain().transition_matrix
    row0 = [0.3498, 0.166, 0.083, 0.0553, 0.0415, 0.0553, 0.083, 0.166]  # from their code
    np.testing.assert_allclose(P[0], row0, atol=5e-5)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    for i in range(8):  # every row is row 0 rotated: the chain is circulant, so uniform is stationary
        np.testing.assert_allclose(P[i], np.roll(P[0], i), atol=1e-12)
    np.testing.assert_allclose(np.full(8, 1 / 8) @ P, np.full(8, 1 / 8), atol=1e-12)
    assert round(StickyMarkovChain().h_min, 4) == 1.8292


def test_stickiness_extremes_and_distance():
    assert circular_distance(5).tolist()[0] == [0, 1, 2, 2, 1]
    np.testing.assert_allclose(sticky_transition_matrix(4, 1.0), np.eye(4))
    P0 = sticky_transition_matrix(6, 0.0)
    assert np.all(np.diag(P0) == 0) and np.allclose(P0.sum(1), 1)
    assert sticky_transition_matrix(8, 0.6)[0, 0] > sticky_transition_matrix(8, 0.3)[0, 0]


@pytest.mark.parametrize("kwargs, match", [
    ({"self_prob": 1.5}, "self_prob"), ({"self_prob": -0.1}, "self_prob"), ({"self_prob": "high"}, "self_prob"),
    ({"n_symbols": 1}, "n_symbols"), ({"n_symbols": 2.5}, "n_symbols"), ({"d_embed": 0}, "d_embed"),
    ({"noise": 0.0}, "noise"), ({"noise": float("nan")}, "noise"), ({"embed_seed": -1}, "embed_seed"),
])
def test_bad_chain_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StickyMarkovChain(**kwargs)


def test_bad_sample_and_predictor_inputs_raise():
    chain = StickyMarkovChain()
    with pytest.raises(ValueError, match="T: expected an int >= 2"):
        chain.sample(1, seed=0)
    with pytest.raises(ValueError, match="seed"):
        chain.sample(10, seed=-3)
    with pytest.raises(ValueError, match="d_embed=20"):
        chain.posterior(torch.zeros(5, 3))
    x, y = chain.sample(10, seed=0)
    with pytest.raises(ValueError, match="shape"):
        chain.bayes_metrics(x, y[:-1])


def test_sample_alignment_and_determinism():
    chain = StickyMarkovChain(n_symbols=5, d_embed=6, noise=0.5)
    x, y = chain.sample(3001, seed=7)
    assert x.shape == (3000, 6) and y.shape == (3000,) and x.dtype == torch.float32
    x2, y2 = chain.sample(3001, seed=7)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(chain.sample(3001, seed=8)[1], y)
    s, _ = chain.sample_symbols(3001, seed=7)
    assert torch.equal(y, torch.as_tensor(s[1:]))
    # x[t] is a noisy view of symbol t = y[t-1]: the residual is the noise, of std 0.5
    residual = x[1:].double() - chain.means[y[:-1]]
    assert abs(residual.std().item() - 0.5) < 0.02
    assert abs(residual.mean().item()) < 0.02
    # x[t] is not a view of its own target y[t] (that would leak the answer)
    assert (x[1:].double() - chain.means[y[1:]]).std().item() > 0.6


def test_empirical_transitions_match_the_matrix():
    chain = StickyMarkovChain()
    s, _ = chain.sample_symbols(200_000, seed=3)
    counts = np.zeros((8, 8))
    np.add.at(counts, (s[:-1], s[1:]), 1)
    np.testing.assert_allclose(counts / counts.sum(1, keepdims=True), chain.transition_matrix, atol=0.01)


def brute_force_predictive(chain, x):
    """p(s_{t+1} | x_0..x_t) by summing the joint over every path s_0..s_{t+1}."""
    x = x.double().numpy()
    mu, P, n, sigma = chain.means.numpy(), chain.transition_matrix, chain.n_symbols, chain.noise
    out = np.zeros((len(x), n))
    for t in range(len(x)):
        for path in itertools.product(range(n), repeat=t + 2):
            weight = 1.0 / n
            for r in range(t + 1):
                weight *= math.exp(-np.sum((x[r] - mu[path[r]]) ** 2) / (2 * sigma**2)) * P[path[r], path[r + 1]]
            out[t, path[-1]] += weight
    return out / out.sum(1, keepdims=True)


def test_exact_predictor_matches_brute_force_enumeration():
    chain = StickyMarkovChain(n_symbols=4, self_prob=0.5, d_embed=3, noise=0.8, embed_seed=1)
    x, y = chain.sample(5, seed=11)  # 4 positions: paths of up to 4^5 symbols
    np.testing.assert_allclose(chain.posterior(x).numpy(), brute_force_predictive(chain, x), atol=1e-12)


def test_exact_predictor_limits_and_batching():
    chain = StickyMarkovChain()
    # almost no noise: the filter knows the current symbol, so the predictive is its transition row
    sharp = StickyMarkovChain(noise=1e-3)
    x, y = sharp.sample(50, seed=0)
    s, _ = sharp.sample_symbols(50, seed=0)
    np.testing.assert_allclose(sharp.posterior(x).numpy(), sharp.transition_matrix[s[:-1]], atol=1e-9)
    assert abs(sharp.bayes_metrics(*sharp.sample(4000, seed=1))["loss"] - sharp.h_min) < 0.05
    # with the paper's noise the symbol is blurred a little: on a long sequence the attainable loss
    # and the predictive entropy sit just above H_min (in expectation, knowing s_t can only help)
    metrics = chain.bayes_metrics(*chain.sample(20_000, seed=5))
    assert chain.h_min < metrics["entropy"] < chain.h_min + 0.02
    assert chain.h_min - 0.02 < metrics["loss"] < chain.h_min + 0.03
    blurred = StickyMarkovChain(noise=3.0).bayes_metrics(*StickyMarkovChain(noise=3.0).sample(20_000, seed=5))
    assert metrics["entropy"] + 0.05 < blurred["entropy"] < math.log(8)
    # a leading batch axis gives the same rows as one sequence at a time
    xs = torch.stack([chain.sample(30, seed=s)[0] for s in (1, 2)])
    batched = chain.posterior(xs)
    assert torch.allclose(batched[1], chain.posterior(xs[1]), atol=1e-14)
    np.testing.assert_allclose(batched.sum(-1).numpy(), 1.0, atol=1e-12)


# ----------------------------------------------------------------------------- hidden sources

@pytest.fixture
def task():
    """The hidden-sources task (chapters 4, 5, 9), small enough for a brute-force posterior."""
    return tasks.sources_task(n_sources=3, d_x=6, seq_len=5, signal_prob=0.4, noise=1.0, separation=2.0, seed=3)


def test_make_task_places_means_at_the_separation(task):
    assert task.means.shape == (3, 6) and task.distractor.shape == (6,)
    assert torch.allclose(task.means.norm(dim=1), torch.full((3,), 2.0, dtype=torch.float64))
    assert math.isclose(task.distractor.norm().item(), 2.0)


def test_sample_shapes_targets_and_signal_rate(task):
    x, y, sig = task.sample(2000, seed=1)
    assert x.shape == (2000, 5, 6) and y.shape == (2000, 5) and sig.shape == (2000, 5)
    assert (y == y[:, :1]).all(), "the target is the sequence's source at every position"
    assert abs(sig.double().mean().item() - 0.4) < 0.02
    # signal positions sit around their source's mean, distractors around the distractor mean
    centred = x.double() - torch.where(sig[..., None], task.means[y], task.distractor)
    assert abs(centred.mean().item()) < 0.02 and abs(centred.std().item() - 1.0) < 0.02


def test_sample_is_reproducible_by_seed(task):
    a, b, c = task.sample(4, seed=7), task.sample(4, seed=7), task.sample(4, seed=8)
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
    x, _, _ = task.sample(6, seed=2)
    assert np.allclose(task.posterior(x).numpy(), brute_force_posterior(task, x), atol=1e-10)


def test_observation_posterior_is_the_posterior_of_one_observation(task):
    x, _, _ = task.sample(6, seed=2)
    single = task.observation_posterior(x)
    for t in range(task.seq_len):
        assert torch.allclose(single[:, t], task.posterior(x[:, t:t + 1])[:, 0])


def test_posterior_sharpens_and_bayes_beats_a_uniform_guess(task):
    x, y, _ = task.sample(500, seed=4)
    h = diagnostics.entropy(task.posterior(x)).mean(0)
    assert h[-1] < h[0] - 0.2
    assert task.bayes_loss(x, y) < math.log(3) - 0.1


def test_kl_is_zero_for_the_posterior_itself_and_positive_otherwise(task):
    x, _, _ = task.sample(20, seed=5)
    post = task.posterior(x)
    assert abs(task.kl_bits(torch.log(post), x)) < 1e-9
    assert task.kl_bits(torch.zeros_like(post), x) > 0.05


def test_entropy_of_uniform_and_one_hot():
    assert math.isclose(diagnostics.entropy(torch.full((4,), 0.25)).item(), math.log(4))
    assert diagnostics.entropy(torch.tensor([1.0, 0.0])).item() == 0.0


@pytest.mark.parametrize("kwargs, match", [
    ({"n_sources": 1}, "n_sources"), ({"d_x": 3}, "d_x"), ({"signal_prob": 0.0}, "signal_prob"),
    ({"signal_prob": 1.5}, "signal_prob"), ({"noise": -1.0}, "noise"), ({"seq_len": 0}, "seq_len"),
])
def test_make_task_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tasks.sources_task(**kwargs)


def test_bad_shapes_raise_value_errors(task):
    with pytest.raises(ValueError, match="d_x=6"):
        task.posterior(torch.zeros(2, 5, 4))
    with pytest.raises(ValueError, match="n_seqs"):
        task.sample(0)
    x, y, _ = task.sample(2, seed=0)
    with pytest.raises(ValueError, match="y"):
        task.bayes_loss(x, y[:, :3])
    with pytest.raises(ValueError, match="logits"):
        task.kl_bits(torch.zeros(2, 5, 4), x)


def test_a_task_without_distractors_has_the_plain_gaussian_posterior():
    task = tasks.sources_task(n_sources=2, d_x=4, seq_len=3, signal_prob=1.0, seed=0)
    x, _, sig = task.sample(5, seed=0)
    assert sig.all()
    ll = -((x.double()[..., None, :] - task.means) ** 2).sum(-1) / 2
    assert torch.allclose(task.posterior(x), torch.softmax(ll.cumsum(1), -1))
    # every observation is a source's: the log-odds are +inf (they were "math domain error")
    assert torch.equal(task.signal_log_odds(x), torch.full((5, 3), math.inf, dtype=torch.float64))


def test_kl_by_position_averages_to_kl_bits_and_signal_log_odds_match_the_densities():
    task = tasks.sources_task(n_sources=3, d_x=5, seq_len=6, signal_prob=0.3, seed=1)
    x, _, _ = task.sample(4, seed=2, dtype=torch.float64)
    logits = torch.randn(4, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    by_position = task.kl_bits_by_position(logits, x)
    assert by_position.shape == (6,) and (by_position > 0).all()
    assert task.kl_bits(logits, x) == pytest.approx(by_position.mean().item(), rel=1e-12)
    # brute force: p(signal | x) / p(distractor | x) from the Gaussian densities, constants included
    def density(mean):
        return torch.exp(-((x - mean) ** 2).sum(-1) / (2 * task.noise ** 2)) / (2 * math.pi * task.noise ** 2) ** (5 / 2)
    signal = sum(task.signal_prob / 3 * density(task.means[z]) for z in range(3))
    expected = torch.log(signal / ((1 - task.signal_prob) * density(task.distractor)))
    torch.testing.assert_close(task.signal_log_odds(x), expected, rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------- the one task protocol

def _every_task():
    from bayesattn_lite import wind_tunnels
    return {"chain": tasks.StickyMarkovChain(), "sources": tasks.sources_task(),
            **{name: wind_tunnels.wind_tunnel(name) for name in wind_tunnels.WIND_TUNNELS}}


@pytest.mark.parametrize("name", list(_every_task()))
def test_every_task_samples_a_batch_with_its_exact_posterior(name):
    task = _every_task()[name]
    assert isinstance(task, tasks.Task)
    batch, again, other = task.sample(6, seed=3), task.sample(6, seed=3), task.sample(6, seed=4)
    post = batch.posterior
    assert post.is_floating_point() and post.shape[-1] >= 2
    sums = post.sum(-1)
    scored = sums > 0  # a wind tunnel's posterior is 0 at positions that are not scored
    assert scored.any() and torch.allclose(sums[scored], torch.ones_like(sums[scored]), atol=1e-5)
    assert torch.equal(post, again.posterior) and not torch.equal(post, other.posterior)


def test_a_sample_unpacks_as_before_and_its_posterior_is_the_filter():
    chain, sources = tasks.StickyMarkovChain(), tasks.sources_task()
    x, y = sample = chain.sample(50, seed=1)
    assert sample[0] is x and sample[1] is y and x.shape == (49, 20)
    assert torch.equal(sample.posterior, chain.posterior(x))
    x, y, is_signal = sample = sources.sample(4, seed=1)
    assert is_signal.dtype == torch.bool and torch.equal(sample.posterior, sources.posterior(x))
    assert not hasattr(chain, "bayes_predictive")  # the pre-protocol name is gone (no release had it)


@pytest.mark.parametrize("fields, match", [
    ((-0.5, 1.0, 4, 2.0), r"signal_prob: expected a number in \(0.0, 1.0\]"),
    ((0.3, 0.0, 4, 2.0), "noise: expected a positive finite number"),
    ((0.3, 1.0, 0, 2.0), "seq_len: expected an int >= 1"),
    ((0.3, 1.0, 4.5, 2.0), "seq_len: expected an int >= 1, got 4.5"),
])
def test_a_cued_task_built_directly_checks_its_fields(fields, match):
    means = tasks.cued_sources_task(n_sources=2, d_x=5).means
    with pytest.raises(ValueError, match=match):
        tasks.CuedSourcesTask(means, *fields)

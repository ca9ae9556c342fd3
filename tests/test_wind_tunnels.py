"""The wind tunnels of bayesattn_lite.tasks: every exact posterior against brute-force enumeration of
the generative model on small cases (read back from the tokens, so the tokens carry what Bayes
needs), shapes and dtypes, seeds, calibration of the targets, bad inputs, and the metrics in bits."""

import dataclasses
import itertools
import math

import pytest
import torch

from bayesattn_lite import diagnostics, wind_tunnels
from bayesattn_lite.wind_tunnels import (AssociativeRecallTask, BijectionTask, HMMTask, WIND_TUNNELS,
                                  WindTunnelBatch, wind_tunnel)


# ----------------------------------------------------------------------------- brute force

def brute_bijection(task, tokens):
    """p(v_i | pairs before i) by summing over all V! bijections consistent with the pairs."""
    V = task.V
    keys, values = tokens[0::2].tolist(), (tokens[1::2] - V).tolist()
    out = torch.zeros(len(tokens), V, dtype=torch.float64)
    perms = list(itertools.permutations(range(V)))
    for i, k in enumerate(keys):
        for pi in perms:
            if all(pi[keys[j]] == values[j] for j in range(i)):
                out[2 * i, pi[k]] += 1
        out[2 * i] /= out[2 * i].sum()
    return out


def brute_hmm(task, tokens):
    """p(s_t | A, E, o_0..o_t) by summing the joint over every hidden path s_0..s_t; A and E are read
    back from the tokens."""
    S, O, r = task.S, task.O, task.resolution
    A = (tokens[:S * S].double() * r).view(S, S)
    E = (tokens[S * S:task.prefix_len].double() * r).view(S, O)
    obs = (tokens[task.prefix_len:] - task.n_levels).tolist()
    out = torch.zeros(len(tokens), S, dtype=torch.float64)
    for t in range(len(obs)):
        for path in itertools.product(range(S), repeat=t + 1):
            p = 1.0 / S * E[path[0], obs[0]]
            for u in range(1, t + 1):
                p = p * A[path[u - 1], path[u]] * E[path[u], obs[u]]
            out[task.prefix_len + t, path[-1]] += p
        out[task.prefix_len + t] /= out[task.prefix_len + t].sum()
    return out


def brute_recall(task, tokens):
    """p(v*(k_i) | pairs before i) by summing over every assignment of true values to all keys."""
    K, M, eps = task.n_keys, task.n_values, task.noise
    keys, shown = tokens[0::2].tolist(), (tokens[1::2] - K).tolist()
    out = torch.zeros(len(tokens), M, dtype=torch.float64)
    for i, k in enumerate(keys):
        for truth in itertools.product(range(M), repeat=K):  # uniform prior: every assignment weighs 1
            lik = 1.0
            for j in range(i):
                lik *= (1 - eps) if shown[j] == truth[keys[j]] else eps / (M - 1)
            out[2 * i, truth[k]] += lik
        out[2 * i] /= out[2 * i].sum()
    return out


SMALL = [
    (BijectionTask(V=4, L=4), brute_bijection),
    (BijectionTask(V=5, L=3), brute_bijection),
    (HMMTask(S=2, O=3, K=5), brute_hmm),
    (HMMTask(S=3, O=2, K=4, resolution=0.01, floor=0.05), brute_hmm),
    (AssociativeRecallTask(n_keys=3, n_values=3, n_pairs=6, noise=0.3), brute_recall),
    (AssociativeRecallTask(n_keys=2, n_values=4, n_pairs=6, noise=0.0), brute_recall),
]


@pytest.mark.parametrize("task, brute", SMALL, ids=[repr(task) for task, _ in SMALL])
def test_exact_posterior_matches_brute_force(task, brute):
    batch = task.sample(6, seed=3)
    for b in range(len(batch)):
        expected = brute(task, batch.tokens[b])
        torch.testing.assert_close(batch.posterior[b].double(), expected.float().double(), atol=1e-6, rtol=0)


def test_bijection_entropy_is_log2_of_remaining_values():
    task = BijectionTask(V=8, L=7)
    batch = task.sample(5, seed=0)
    h = diagnostics.entropy_bits(batch.posterior[:, 0::2])
    expected = torch.tensor([math.log2(8 - k) for k in range(7)], dtype=torch.float64)
    torch.testing.assert_close(h, expected.expand_as(h), atol=1e-5, rtol=0)


def test_recall_without_noise_is_one_hot_after_first_sighting():
    task = AssociativeRecallTask(n_keys=3, n_values=5, n_pairs=10, noise=0.0)
    batch = task.sample(20, seed=1)
    keys = batch.tokens[:, 0::2]
    h = diagnostics.entropy_bits(batch.posterior[:, 0::2])
    for b in range(20):
        for i in range(10):
            first = not (keys[b, :i] == keys[b, i]).any()
            assert h[b, i].item() == pytest.approx(math.log2(5) if first else 0.0, abs=1e-5)


def test_quantised_rows_are_on_the_grid_and_floored():
    gen = torch.Generator().manual_seed(0)
    P, units = wind_tunnels.quantised_stochastic_rows(5, 5, 200, 0.01, 0.05, gen)
    assert (units.sum(-1) == 100).all() and (units >= 5).all()
    torch.testing.assert_close(P, units.double() / 100)
    # Dirichlet(1) rows are exchangeable: every column has mean 1/5 (up to floor/rounding, which are symmetric)
    torch.testing.assert_close(P.mean((0, 1)), torch.full((5,), 0.2, dtype=torch.float64), atol=0.02, rtol=0)


# ----------------------------------------------------------------------------- batches

@pytest.mark.parametrize("name", sorted(WIND_TUNNELS))
@pytest.mark.parametrize("size", ["small", "paper"])
def test_shapes_dtypes_and_ranges(name, size):
    task = wind_tunnel(name, size)
    assert task.name == name and task.primitive in ("accumulation", "transport", "binding")
    batch = task.sample(7, seed=0)
    B, T, C = 7, task.seq_len, task.n_classes
    assert isinstance(batch, WindTunnelBatch) and len(batch) == B
    assert batch.tokens.shape == (B, T) and batch.tokens.dtype == torch.int64
    assert batch.targets.shape == (B, T) and batch.targets.dtype == torch.int64
    assert batch.posterior.shape == (B, T, C) and batch.posterior.dtype == torch.float32
    assert batch.mask.shape == (B, T) and batch.mask.dtype == torch.bool
    assert 0 <= batch.tokens.min() and batch.tokens.max() < task.vocab_size
    assert ((batch.targets >= 0) & (batch.targets < C)).eq(batch.mask).all()
    assert (batch.targets[~batch.mask] == -100).all() and (batch.posterior[~batch.mask] == 0).all()
    torch.testing.assert_close(batch.posterior[batch.mask].sum(-1), torch.ones(int(batch.mask.sum())))
    # the true answer is never ruled out by the exact posterior
    assert (batch.posterior[batch.mask].gather(-1, batch.targets[batch.mask][:, None]) > 0).all()
    moved = batch.to("cpu")
    assert moved is not batch and torch.equal(moved.tokens, batch.tokens)


def test_paper_sizes():
    assert (BijectionTask.paper().V, BijectionTask.paper().L) == (20, 19)
    hmm = HMMTask.paper()
    assert (hmm.S, hmm.O, hmm.K, hmm.resolution, hmm.floor) == (5, 5, 20, 0.01, 0.05)
    assert hmm.vocab_size == 101 + 5 and hmm.seq_len == 25 + 25 + 20


def test_the_registry_carries_each_wind_tunnels_metadata():
    assert tuple(WIND_TUNNELS) == ("bijection", "hmm", "recall")
    for name, cls in WIND_TUNNELS.items():
        assert cls.name == name and wind_tunnel(name).name == name
        assert set(cls.converged_steps) == {"small", "paper"} and all(s > 0 for s in cls.converged_steps.values())
        assert wind_tunnels.as_wind_tunnel(name).name == name
    assert HMMTask().test_horizons() == [{"K": 18}, {"K": 30}]                 # Paper I's 1.5K and 2.5K
    assert HMMTask.paper().test_horizons() == [{"K": 30}, {"K": 50}]
    assert wind_tunnel("recall").test_horizons() == [] == wind_tunnel("bijection").test_horizons()
    task = wind_tunnel("hmm")
    assert wind_tunnels.as_wind_tunnel(task) is task


def test_data_seed_is_the_stream_the_shipped_models_were_trained_on():
    """Pinned values: changing the rule would change what a retrained or resumed run sees."""
    assert wind_tunnels.data_seed(0, 0) == 2**40 == 1_099_511_627_776
    assert wind_tunnels.data_seed(3, 7) == 2**40 + 3 * 2**24 + 7 == 1_099_561_959_431
    assert wind_tunnels.data_seed(2, 9999) == 1_099_545_192_207
    assert wind_tunnels.data_seed(3, 7, rank=1, world=4) == 2**40 + (3 * 2**24 + 7) * 4 + 1
    assert wind_tunnels.data_seed(3, 7, 0, 1) == wind_tunnels.data_seed(3, 7)  # one process: the same stream
    seeds = {wind_tunnels.data_seed(3, step, rank, 4) for step in range(5) for rank in range(4)}
    assert len(seeds) == 20  # every rank its own batches
    top = wind_tunnels.data_seed(wind_tunnels.MAX_SEED - 1, wind_tunnels.MAX_STEPS - 1, 2**16 - 1, 2**16)
    assert 12345 + 2**16 < wind_tunnels.DATA_SEED_BASE and top < 2**63  # far from held-out seeds, valid


@pytest.mark.parametrize("name", sorted(WIND_TUNNELS))
def test_seeds_are_reproducible(name):
    task = wind_tunnel(name)
    a, b, c = task.sample(4, seed=5), task.sample(4, seed=5), task.sample(4, seed=6)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
    assert torch.equal(a.posterior, b.posterior) and not torch.equal(a.tokens, c.tokens)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(task.sample(4, generator=g1).tokens, a.tokens)
    torch.manual_seed(0)
    first = task.sample(4).tokens
    torch.manual_seed(0)
    assert torch.equal(task.sample(4).tokens, first)  # no seed: torch's global generator
    assert torch.equal(task.sample(4, generator=g2).tokens, a.tokens)


@pytest.mark.parametrize("name", sorted(WIND_TUNNELS))
def test_targets_are_calibrated_by_the_posterior(name):
    """E[onehot(target) | context] = posterior: averaged over many sequences the difference vanishes,
    which is why cross-entropy training has the exact posterior as its optimum."""
    batch = wind_tunnel(name).sample(4000, seed=11)
    onehot = torch.nn.functional.one_hot(batch.targets.clamp_min(0), batch.posterior.shape[-1]).float()
    gap = ((onehot - batch.posterior) * batch.mask[..., None]).sum(0) / batch.mask.sum(0).clamp_min(1)[:, None]
    assert gap.abs().max() < 0.05


def test_longer_horizons():
    hmm = HMMTask()
    for K in (30, 50):
        batch = hmm.sample(3, seed=0, K=K)
        assert batch.tokens.shape == (3, hmm.prefix_len + K) and int(batch.mask.sum()) == 3 * K
    assert BijectionTask(V=6).sample(2, seed=0, L=6).tokens.shape == (2, 12)
    assert AssociativeRecallTask().sample(2, seed=0, n_pairs=20).tokens.shape == (2, 40)


@pytest.mark.parametrize("call, match", [
    (lambda: wind_tunnel("parity"), "name"),
    (lambda: wind_tunnel("hmm", "gpu"), "size"),
    (lambda: BijectionTask(V=1), "V"),
    (lambda: BijectionTask(V=4, L=5), "L"),
    (lambda: BijectionTask(V=4).sample(2, L=5), "L"),
    (lambda: BijectionTask().sample(0), "batch_size"),
    (lambda: BijectionTask().sample(2, seed=-1), "seed"),
    (lambda: BijectionTask().sample(2, seed=1, generator=torch.Generator()), "seed"),
    (lambda: BijectionTask().sample(2, generator=3), "generator"),
    (lambda: HMMTask(S=1), "S"),
    (lambda: HMMTask(resolution=0.03), "resolution"),
    (lambda: HMMTask(resolution=0.05, floor=0.07), "floor"),
    (lambda: HMMTask(S=5, floor=0.25), "floor"),
    (lambda: HMMTask().sample(2, K=0), "K"),
    (lambda: AssociativeRecallTask(n_values=1), "n_values"),
    (lambda: AssociativeRecallTask(noise=1.0), "noise"),
    (lambda: AssociativeRecallTask(noise=-0.1), "noise"),
    (lambda: AssociativeRecallTask(n_pairs=2.5), "n_pairs"),
])
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_misspelt_sample_keyword_is_named_as_python_names_one_with_the_near_one():
    with pytest.raises(TypeError, match=r"BijectionTask\.sample\(\): got an unexpected keyword argument 'K' "
                                        r"\(it takes batch_size, seed, generator, L\)$"):
        BijectionTask().sample(2, K=3)
    with pytest.raises(TypeError, match="'sed'; did you mean 'seed'"):
        BijectionTask().sample(2, sed=3)


# ----------------------------------------------------------------------------- metrics

def test_metrics_vanish_at_the_posterior_and_match_hand_values():
    batch = wind_tunnel("bijection").sample(16, seed=2)
    exact = torch.log(batch.posterior.double().clamp_min(1e-300))
    assert diagnostics.entropy_error_bits(exact, batch).item() < 1e-6
    assert diagnostics.kl_bits(exact, batch).item() < 1e-6
    uniform = torch.zeros(batch.posterior.shape)
    per_pos = diagnostics.per_position_error_bits(uniform, batch)
    assert per_pos.shape == (batch.tokens.shape[1],) and torch.isnan(per_pos[1::2]).all()
    expected = torch.tensor([3 - math.log2(8 - k) for k in range(7)], dtype=torch.float64)
    torch.testing.assert_close(per_pos[0::2], expected)
    torch.testing.assert_close(diagnostics.entropy_error_bits(uniform, batch), expected.mean())
    torch.testing.assert_close(diagnostics.kl_bits(uniform, batch), expected.mean())  # KL to uniform = 3 - H


def test_kl_sees_what_the_entropy_error_misses():
    batch = wind_tunnel("recall").sample(32, seed=0)
    exact = torch.log(batch.posterior.double().clamp_min(1e-300))
    rolled = exact.roll(1, dims=-1)  # same entropies, wrong values
    assert diagnostics.entropy_error_bits(rolled, batch).item() < 1e-6
    assert diagnostics.kl_bits(rolled, batch).item() > 1.0


def test_metric_inputs_are_checked():
    batch = wind_tunnel("hmm").sample(2, seed=0)
    with pytest.raises(ValueError, match="logits"):
        diagnostics.kl_bits(torch.zeros(2, 3, 3), batch)
    with pytest.raises(ValueError, match="WindTunnelBatch"):
        diagnostics.entropy_error_bits(torch.zeros(2, 30, 3), "batch")


def test_baselines_lack_the_primitive():
    hmm = HMMTask(S=3, O=4, K=6)
    batch = hmm.sample(5, seed=0)
    S = hmm.S
    E = (batch.tokens[:, S * S:hmm.prefix_len].double() * hmm.resolution).view(-1, S, hmm.O)
    uniform = torch.full((5, S, S), 1.0 / S, dtype=torch.float64)  # dynamics that forget: no transport
    expected = wind_tunnels.forward_filter(uniform, E, batch.tokens[:, hmm.prefix_len:] - hmm.n_levels)
    torch.testing.assert_close(hmm.baseline_posterior(batch)[:, hmm.prefix_len:].double(), expected, atol=1e-6, rtol=0)
    for task in (BijectionTask(), AssociativeRecallTask()):
        batch = task.sample(3, seed=0)
        base = task.baseline_posterior(batch)
        assert (base[~batch.mask] == 0).all()
        torch.testing.assert_close(base[batch.mask], torch.full_like(base[batch.mask], 1 / task.n_classes))


# ----------------------------------------------------------------------------- geometry

def test_key_orthogonality_and_group_means():
    assert diagnostics.key_orthogonality(torch.eye(4)) == pytest.approx(0.0)
    assert diagnostics.key_orthogonality(torch.tensor([[1.0, 2.0], [-2.0, -4.0], [3.0, 6.0]])) == pytest.approx(1.0)
    d = 64
    random = diagnostics.key_orthogonality(torch.randn(200, d, generator=torch.Generator().manual_seed(0)))
    assert random == pytest.approx(math.sqrt(2 / (math.pi * d)), rel=0.05)
    labels, means = diagnostics.group_means(torch.tensor([[1.0, 0], [3.0, 2], [5.0, 5]]), torch.tensor([7, 2, 7]))
    assert labels.tolist() == [2, 7]
    torch.testing.assert_close(means, torch.tensor([[3.0, 2], [3.0, 2.5]], dtype=torch.float64))
    with pytest.raises(ValueError, match="keys"):
        diagnostics.key_orthogonality(torch.ones(1, 3))
    with pytest.raises(ValueError, match="labels"):
        diagnostics.group_means(torch.ones(3, 2), torch.ones(2))


def test_value_manifold_finds_a_curve_parametrised_by_entropy():
    gen = torch.Generator().manual_seed(0)
    h = torch.rand(300, generator=gen, dtype=torch.float64) * 3
    direction = torch.randn(8, generator=gen, dtype=torch.float64)
    points = -h[:, None] * direction + 0.01 * torch.randn(300, 8, generator=gen, dtype=torch.float64)
    out = diagnostics.value_manifold(points, h)
    assert out["pc1_share"] > 0.99 and out["spearman"] > 0.99  # oriented: the sign of PC1 is fixed
    assert diagnostics.spearman(out["pc1"], h) > 0.99
    with pytest.raises(ValueError, match="entropy"):
        diagnostics.value_manifold(points, h[:10])


@pytest.fixture(scope="module")
def small_transformer():
    models = pytest.importorskip("bayesattn_lite.models")
    task = wind_tunnel("recall")
    torch.manual_seed(0)
    return models.Transformer(task.vocab_size, task.n_classes, d_model=16, n_layers=2, n_heads=2), task


def test_probes_and_geometry(small_transformer):
    model, task = small_transformer
    batch = task.sample(8, seed=0)
    records = pytest.importorskip("bayesattn_lite.models").run_with_probes(model, batch.tokens)
    assert len(records) == 2 and records[0]["k"].shape == (8, 2, task.seq_len, 8)
    torch.testing.assert_close(records[1]["alpha"].sum(-1), torch.ones(8, 2, task.seq_len))
    torch.testing.assert_close(records[1]["g"], records[1]["alpha"] @ records[1]["v"])
    geo = diagnostics.bayesian_geometry(model, batch)
    assert 0 <= geo["keys"] <= 1 and 0 <= geo["keys_centred"] <= 1 and len(geo["attention_entropy_bits"]) == 2
    assert 0 < geo["pc1_share"] <= 1 and geo["pc1"].shape == (int(batch.mask.sum()),) == geo["entropy"].shape
    with pytest.raises(ValueError, match="probe points"):
        diagnostics.bayesian_geometry(torch.nn.Linear(2, 2), batch)


def test_key_gradients_sum_to_zero(small_transformer):
    """Chapter 7's reason to centre the keys: sum_j dL/ds_ij = 0 for every query (chapter 2), so
    sum_j dL/dk_j = sum_i q_i sum_j dL/ds_ij / sqrt(d) = 0: a shift of all keys gets no gradient."""
    model, task = small_transformer
    batch = task.sample(4, seed=1)
    keys = []
    layer = model.attention_layers()[0]

    def keep(module, args, out):  # returns None: the output passes on unchanged
        out.retain_grad()
        keys.append(out)

    handle = layer.probe_k.register_forward_hook(keep)
    logits = model(batch.tokens)
    handle.remove()
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten()).backward()
    grad = keys[0].grad  # (B, H, T, d_head)
    assert grad.abs().max() > 1e-4
    torch.testing.assert_close(grad.sum(2), torch.zeros_like(grad.sum(2)), atol=1e-6, rtol=0)


def test_forward_filter_refuses_an_observation_no_state_it_can_be_in_emits():
    A = torch.eye(2, dtype=torch.float64).expand(1, 2, 2)                       # the chain stays where it is
    E = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], dtype=torch.float64)  # no state emits symbol 2
    with pytest.raises(ValueError, match=r"^observations\[0, 1\]: expected a symbol .*got 2, which no such state"):
        wind_tunnels.forward_filter(A, E, torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match=r"^observations\[0, 1\]: .*got 1"):   # state 1 emits 1, but o_0 = 0 ruled it out
        wind_tunnels.forward_filter(A, E, torch.tensor([[0, 1]]))
    assert torch.isfinite(wind_tunnels.forward_filter(A, E, torch.tensor([[0, 0]]))).all()


def test_a_batch_refuses_targets_outside_its_classes_and_tokens_that_are_not_integers():
    batch = HMMTask().sample(2, seed=0)
    C = batch.posterior.shape[-1]
    with pytest.raises(ValueError, match=rf"^targets: expected class indices in \[0, {C - 1}\], got values from \d+ to {C}"):
        wind_tunnels.WindTunnelBatch(batch.tokens, batch.targets.masked_fill(batch.mask, C), batch.posterior, batch.mask)
    with pytest.raises(ValueError, match=r"^tokens\.dtype: expected an integer dtype"):
        wind_tunnels.WindTunnelBatch(batch.tokens.float(), batch.targets, batch.posterior, batch.mask)
    wind_tunnels.WindTunnelBatch(batch.tokens, batch.targets, batch.posterior, batch.mask)   # IGNORE_INDEX is fine


def test_forward_filter_of_no_observations_is_no_beliefs():
    """A valid call: zero observations give (B, 0, S), not an error from inside torch.stack."""
    A, E = torch.full((2, 3, 3), 1 / 3), torch.full((2, 3, 4), 0.25)
    out = wind_tunnels.forward_filter(A, E, torch.zeros(2, 0, dtype=torch.long))
    assert out.shape == (2, 0, 3) and out.dtype == A.dtype


def test_the_hmm_baseline_refuses_another_tasks_batch_with_as_many_classes():
    hmm = wind_tunnels.wind_tunnel("hmm")
    recall = AssociativeRecallTask(n_values=hmm.n_classes).sample(4, seed=0)
    with pytest.raises(ValueError, match="^batch: expected a WindTunnelBatch of this task .*AssociativeRecallTask"):
        hmm.baseline_posterior(recall)
    with pytest.raises(ValueError, match="^batch: expected an HMM batch"):   # a hand-made batch: its layout decides
        hmm.baseline_posterior(dataclasses.replace(recall, task=""))
    hmm.baseline_posterior(hmm.sample(4, seed=0))   # its own is fine


def test_a_grid_resolution_must_be_one_over_a_whole_number():
    with pytest.raises(ValueError, match="^resolution: expected 1/n"):
        wind_tunnels.quantised_stochastic_rows(3, 3, 2, 0.07, 0.0, None)


def test_a_task_refuses_another_tasks_batch_even_when_the_sizes_fit():
    recall = AssociativeRecallTask().sample(2, seed=0)
    bijection = BijectionTask(V=6)   # 6 classes, as the recall batch has
    with pytest.raises(ValueError, match=r"^batch: expected a WindTunnelBatch of this task .*got a batch of AssociativeRecallTask"):
        bijection.baseline_posterior(recall)
    assert recall.to("cpu").task == "AssociativeRecallTask"
    assert bijection.baseline_posterior(bijection.sample(2, seed=0)).shape[-1] == 6


@pytest.mark.parametrize("which", ["A_units", "E_units"])
def test_batch_from_parts_blames_the_matrix_of_the_wrong_size(which):
    hmm = HMMTask()   # S = O = 3
    units = torch.tensor([[0, 10, 10]] * 3).expand(1, 3, 3)
    parts = {"A_units": units, "E_units": units.clone()}
    parts[which] = parts[which][:, :2, :2] if which == "A_units" else parts[which][:, :2]
    zeros = torch.zeros(1, 12, dtype=torch.long)
    with pytest.raises(ValueError, match=rf"^{which}: expected \(B, 3, 3\) grid units"):
        hmm.batch_from_parts(parts["A_units"], parts["E_units"], zeros, zeros)

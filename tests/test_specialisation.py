"""The specialisation experiment of chapters 4-5: a short run records what the chapters plot,
reproducibly, and its loop measurements line up with the steps they describe."""

import math
from dataclasses import replace

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bayesattn_lite import attention, plots, wind_tunnels  # noqa: E402
from bayesattn_lite import specialisation as sp  # noqa: E402

TINY = sp.Config(n_train=32, n_probe=16, steps=40, log_every=10, lr=0.5)


def test_run_records_every_metric_and_the_final_state():
    r = sp.run(TINY, seed=0, loop_every=5, loop_until=20)
    assert list(r.history.steps) == [0, 10, 20, 30, 40]
    for key in ("loss", "probe_loss", "kl_bits", "attn_entropy", "signal_mass", "compat_cos",
                "value_pc_share", "frame_rate", "attn_change", "value_change"):
        values = r.history[key]
        assert np.isfinite(values[1:]).all(), key
    assert math.isnan(r.history["frame_rate"][0])  # no earlier snapshot to compare with
    assert ((r.frame_rate >= 0) & (r.frame_rate <= 1)).all() and r.precision_rate.shape == r.frame_rate.shape
    assert list(r.loop["step"]) == [0, 5, 10, 15]
    assert set(r.loop) >= {"attn_pair_corr", "flow", "dmass", "group_corr", "seq_corr", "value_pair_corr",
                           "prototype_cos", "prototype_cos_full"}
    assert sorted(r.snapshots) == [0, 10, 20, 30, 40]
    assert r.history["loss"][-1] < r.history["loss"][0]


def test_untrained_attention_is_nearly_uniform():
    r = sp.run(replace(TINY, steps=10), seed=1)
    uniform, ideal = sp.reference_entropies(r)
    assert abs(r.history["attn_entropy"][0] - uniform) < 0.02
    assert ideal < uniform


def test_runs_are_reproducible_and_seeds_differ():
    a, b, c = sp.run(TINY, 2), sp.run(TINY, 2), sp.run(TINY, 3)
    assert np.array_equal(a.history["loss"], b.history["loss"])
    assert not np.array_equal(a.history["loss"], c.history["loss"])


def test_run_seeds_in_worker_processes_gives_the_runs_of_one_after_the_other():
    serial = sp.run_seeds(TINY, (0, 1, 2), workers=1)
    parallel = sp.run_seeds(TINY, (0, 1, 2), workers=2)
    assert [r.seed for r in parallel] == [0, 1, 2]
    for a, b in zip(serial, parallel):
        for key in ("loss", "kl_bits", "frame_rate"):
            np.testing.assert_array_equal(a.history[key], b.history[key])
        for name, p in a.model.params().items():
            assert torch.equal(p, b.model.params()[name])
    with pytest.raises(ValueError, match="workers"):
        sp.run_seeds(TINY, (0, 1), workers=0)


def test_value_ratio_sets_the_value_learning_rate():
    assert sp.lr_multipliers(TINY) is None
    assert sp.lr_multipliers(replace(TINY, value_ratio=10.0)) == {"W_V": 10.0}
    slow, fast = sp.run(replace(TINY, steps=10), 0), sp.run(replace(TINY, steps=10, value_ratio=10.0), 0)
    assert fast.history["value_change"][1] > 3 * slow.history["value_change"][1]


def test_draw_curves_draws_four_panels():
    fig = plt.figure()
    axes = plots.specialisation_curves(fig, [sp.run(TINY, 0)])
    assert len(axes) == 4 and all(ax.lines for ax in axes)
    plt.close(fig)


def test_bad_configs_raise_value_errors():
    with pytest.raises(ValueError, match="multiple"):
        sp.run(replace(TINY, steps=45))
    with pytest.raises(ValueError, match="Config"):
        sp.run({"steps": 10})
    with pytest.raises(ValueError, match="at least one"):
        sp.curves([], "loss")


def test_timescales_use_the_settle_measure_of_the_frame_and_precision_rates():
    from bayesattn_lite import diagnostics
    r = sp.run(replace(TINY, steps=100), 0)
    t = sp.timescales(r)
    steps = r.history.steps
    frame = diagnostics.settle(steps[1:], r.frame_rate)
    values = diagnostics.settle(steps[1:], r.precision_rate)
    assert t["frame"] == frame and t["values"] == values
    assert t["t_frame"] == frame["settled"][0.2] and t["t_frame_10"] == frame["settled"][0.1]
    assert t["t_values"] == values["settled"][0.2] and t["t_values_10"] == values["settled"][0.1]
    assert t["peak_frame"] == frame["peak_step"] and t["peak_values"] == values["peak_step"]
    for key in ("t90_loss", "t90_kl", "t90_entropy"):
        assert t[key] in list(steps), key
    if t["t_frame"] is not None:
        assert 0 <= t["loss_after"] <= 1 and set(t["attribution_after"]) == {"routing", "values", "readout"}
    # a precision rate that is still rising at the end has not settled: the summary says so
    rising = replace(r, value_rate_final=np.linspace(0.01, 0.1, len(r.precision_rate)))
    u = sp.timescales(rising)
    assert u["t_values"] is None and u["t_values_10"] is None
    assert "not settled by step 100" in u["order"] or u["order"].startswith("neither")
    # a frame that has not settled leaves the dissociation untestable (nan), never a number
    history = sp.History()
    for step, rate in zip(steps, np.r_[np.nan, np.linspace(0.01, 0.1, len(steps) - 1)]):
        history.append(int(step), loss=float(r.history["loss"][list(steps).index(step)]),
                       kl_bits=1.0, attn_entropy=1.0, **({} if np.isnan(rate) else {"frame_rate": rate}))
    v = sp.timescales(replace(r, history=history))
    assert v["t_frame"] is None and math.isnan(v["loss_after"]) and v["attribution_after"] is None


def test_frozen_matrices_stay_where_they_started():
    import torch
    init = sp._params(sp.make_model(TINY, 0))
    for frozen in (("W_V", "W_O"), ("W_V",), ("W_Q", "W_K")):
        r = sp.run(replace(TINY, frozen=frozen), 0, loop_every=5, loop_until=20)
        final = sp._params(r.model)
        for name in init:
            assert torch.equal(final[name], init[name]) == (name in frozen), (frozen, name)
        for group, names in sp.GROUPS.items():  # a group buys nothing exactly when all its matrices are frozen
            assert bool((r.bought[group] == 0).all()) == (set(names) <= set(frozen)), (frozen, group)
        # the content map W_O W_V stays put only when both of its matrices are frozen
        margin = r.history["content_margin"]
        assert (np.ptp(margin) == 0) == (frozen == ("W_V", "W_O")), frozen
    # frozen routing: the attention maps cannot move, so the frame rate is exactly zero
    assert (r.frame_rate == 0).all() and np.ptp(r.history["signal_mass"]) == 0
    # the snapshots are the weights run trained, frozen or not
    snaps = sp.parameter_snapshots(replace(TINY, frozen=("W_V",)), 0, [TINY.steps])
    assert torch.equal(snaps[TINY.steps]["W_V"], init["W_V"])
    assert sp.lr_multipliers(replace(TINY, frozen=("W_V",), value_ratio=10.0)) == {"W_V": 0.0}
    with pytest.raises(ValueError, match="frozen"):
        sp.run(replace(TINY, frozen=("W_X",)))


def test_content_gap_is_the_distance_to_the_best_content_for_the_routing():
    r = sp.run(replace(TINY, steps=60), 0)
    out = sp.content_gap(r, [0, 30, 60])
    assert list(out["steps"]) == [0, 30, 60]
    # the optimum for the routing at t is never above the trained loss, and the gap is >= 0
    assert (out["best"] <= out["loss"]).all() and (out["gap"] >= 0).all()
    assert np.allclose(out["loss"], [r.history["loss"][list(r.history.steps).index(t)] for t in (0, 30, 60)], atol=1e-5)
    # at initialisation W_O W_V is tiny: the best content for the (uniform) routing is much better
    assert out["gap"][0] > 0.05 and out["remaining"][-1] == 0 and math.isnan(out["share"][-1])
    # the problem is convex: the optimum from the head's own M equals the one from zeros
    x, y, _ = r.train
    g = sp._attended_inputs(x, r.snapshots[30])
    _, from_zero = sp._best_readout(g, y, TINY.n_sources)
    assert out["best"][1] == pytest.approx(from_zero, abs=1e-5)
    rg = sp.routing_gap(r, [30], iters=5, n_seqs=8)
    assert rg["routing_gap"][0] >= 0 and rg["content_gap"][0] >= 0
    with pytest.raises(ValueError, match="snapshot"):
        sp.content_gap(r, [5])


def test_loop_correlations_compare_pairs_and_groups_with_the_same_statistics():
    r = sp.run(replace(TINY, steps=60), 0, loop_every=5, loop_until=60)
    c = sp.loop_correlations(r, 0, 60)
    assert set(c) == {"pair_cross", "group_cross", "seq_cross", "pair_time", "query_time", "mean_time"}
    assert all(-1 <= v <= 1 for v in c.values())
    assert c["pair_cross"] == pytest.approx(float(np.mean(r.loop["attn_pair_corr"])))
    # the W_V step moves each prototype exactly along its full gradient
    assert np.allclose(r.loop["prototype_cos_full"], 1, atol=1e-4)
    with pytest.raises(ValueError, match="loop"):
        sp.loop_correlations(sp.run(TINY, 0))



def test_loop_size_compares_flow_and_change_of_mass_with_their_own_peaks():
    from types import SimpleNamespace
    steps = np.arange(0, 100, 5)
    bump = np.exp(-((steps - 30) / 15.0) ** 2)
    flow = np.where(steps <= 30, bump, 0.5 + 0.5 * bump)  # peaks at 30, then stays at half
    proportional = SimpleNamespace(seed=0, loop={"step": steps, "flow": flow, "dmass": 0.1 * flow})
    same = sp.loop_size.__wrapped__(proportional, 50, 100)   # unchecked: a duck-typed record, not a Run
    assert same["gain_vs_peak"] == pytest.approx(1.0)
    assert same["flow_vs_peak"] == pytest.approx(same["dmass_vs_peak"])
    # the change of mass falls back to zero while the flow stays up: same timing, not the same size
    dmass = 0.1 * bump
    decays = sp.loop_size.__wrapped__(SimpleNamespace(seed=0, loop={"step": steps, "flow": flow, "dmass": dmass}), 50, 100)
    assert decays["flow_vs_peak"] > 0.45 and decays["dmass_vs_peak"] < 0.05 and decays["gain_vs_peak"] < 0.05
    assert diagnostics_pearson(flow, dmass) > 0.5  # yet over time the two curves correlate
    r = sp.run(replace(TINY, steps=60), 0, loop_every=5, loop_until=60)
    out = sp.loop_size(r, 0, 60)
    assert all(np.isfinite(v) for v in out.values())
    with pytest.raises(ValueError, match="loop"):
        sp.loop_size(sp.run(TINY, 0))
    with pytest.raises(ValueError, match="start"):
        sp.loop_size(r, 500, 600)


def diagnostics_pearson(a, b):
    from bayesattn_lite import diagnostics
    return diagnostics.pearson(torch.as_tensor(a), torch.as_tensor(b))


def test_continue_training_ends_where_the_longer_run_ends():
    short, long_ = sp.run(replace(TINY, steps=20), 0), sp.run(replace(TINY, steps=40), 0)
    (out,) = sp.continue_training([short], 20, workers=1)
    assert out["steps"] == 40
    for name, p in long_.model.params().items():
        assert torch.allclose(out["model"].params()[name], p, atol=1e-5), name
    assert out["kl_bits"] == pytest.approx(long_.history["kl_bits"][-1], abs=1e-4)
    assert out["loss"] == pytest.approx(long_.history["loss"][-1], abs=1e-5)
    assert torch.equal(short.model.W_Q, sp.run(replace(TINY, steps=20), 0).model.W_Q)  # the run is not changed
    # a frozen matrix stays frozen; the workers give the same answer as one after the other
    frozen = [sp.run(replace(TINY, steps=20, frozen=("W_V",)), s) for s in (0, 1)]
    serial, parallel = sp.continue_training(frozen, 10, workers=1), sp.continue_training(frozen, 10, workers=2)
    for r, a, b in zip(frozen, serial, parallel):
        assert torch.equal(a["model"].W_V, r.model.W_V) and not torch.equal(a["model"].W_Q, r.model.W_Q)
        assert a["kl_bits"] == b["kl_bits"]
    with pytest.raises(ValueError, match="steps"):
        sp.continue_training([short], 0)


# plots.binned and plots.trajectories were added to plots.py for chapters 4-5; they are tested here.

def test_binned_draws_bin_means_and_rejects_mismatched_samples():
    x = np.arange(100.0)
    fig, ax = plt.subplots()
    centres, means = plots.binned(ax, x, 2 * x, n_bins=4)
    assert len(centres) == 4 and np.allclose(means, 2 * centres)
    with pytest.raises(ValueError, match="same size"):
        plots.binned(ax, x, x[:50])
    plt.close(fig)


def test_binned_by_value_gives_one_bin_per_value_and_drops_rare_ones():
    x = np.array([0.0] * 50 + [1.0] * 149 + [2.5])     # 2.5 holds 0.5% of the points: left out
    y = np.array([1.0] * 50 + [3.0] * 149 + [100.0])
    fig, ax = plt.subplots()
    centres, means = plots.binned(ax, x, y, by_value=True)
    assert np.allclose(centres, [0.0, 1.0]) and np.allclose(means, [1.0, 3.0])
    quantile_centres, _ = plots.binned(ax, x, y, n_bins=8)   # quantile bins put markers where no x is
    assert not np.isin(np.round(quantile_centres, 6), [0.0, 1.0, 2.5]).all()
    plt.close(fig)


def test_trajectories_draws_one_line_per_point():
    fig, ax = plt.subplots()
    plots.trajectories(ax, np.zeros((5, 3, 2)), "k", label="EM")
    assert len(ax.lines) == 9  # a path, a start and an end marker for each of 3 points
    with pytest.raises(ValueError, match="paths"):
        plots.trajectories(ax, np.zeros((5, 3)), "k")
    plt.close(fig)


def test_compare_with_gmm_returns_aligned_measurements():
    r = sp.run(replace(TINY, n_train=64, steps=60), 0)
    c = sp.compare_with_gmm(r, n_iter=20, restarts=2)
    n = TINY.n_probe * TINY.seq_len
    assert c["p_signal"].shape == c["received"].shape == (n,)
    assert c["head_sources"].shape == c["gmm_sources"].shape == (n, TINY.n_sources)
    assert np.allclose(c["gmm_sources"].sum(1), 1) and sorted(c["order"]) == list(range(TINY.n_sources + 1))
    for key in ("agree_head_gmm", "agree_head_exact", "agree_gmm_exact"):
        assert 0 <= c[key] <= 1
    assert -1 <= c["spearman_received"] <= 1


def test_normalisation_check_attributes_the_loss_decrease_to_the_groups():
    r = sp.run(replace(TINY, lr=0.05), seed=0)
    check = sp.normalisation_check(r, early=20)
    assert len(r.bought["values"]) == TINY.steps and len(r.value_rate_final) == 4
    # small steps: the first-order shares add up to the realised decrease
    assert check["first_order"] == pytest.approx(1.0, abs=0.02)
    assert all(0 < check[g] < 1 for g in ("routing", "values", "readout"))
    assert check["values_early"] <= check["values"]
    assert check["peak_value_final"] in (10, 20, 30, 40)


# ----------------------------------------------------------------------------- chapter 4: score kernel, oracle heads

def test_parameter_snapshots_are_the_weights_run_trains():
    import torch
    snaps = sp.parameter_snapshots(TINY, 0, [0, 10, TINY.steps])
    assert sorted(snaps) == [0, 10, TINY.steps]
    r = sp.run(TINY, 0)
    assert torch.equal(snaps[TINY.steps]["W_Q"], r.model.W_Q.detach())
    assert torch.equal(snaps[0]["W_V"], sp.make_model(TINY, 0).W_V.detach())
    with pytest.raises(ValueError, match="at"):
        sp.parameter_snapshots(TINY, 0, [TINY.steps + 1])


def test_score_step_first_order_matches_a_small_step_and_the_kernel():
    import torch
    from bayesattn_lite import attention
    task, (x, y, _), _ = sp.make_data(TINY, 0)
    x = x.double()
    p0 = {n: w.double() for n, w in sp._params(sp.make_model(TINY, 0)).items()}
    lr = 1e-3
    g = attention.gradients(x, y, p0)
    p1 = {n: p0[n] - lr * g[n] for n in p0}
    out = sp.score_step(x, y, p0, p1, lr)
    assert out["kernel_error"] < 1e-2 and out["agree_kernel"] > 0.99
    assert out["decrease"] > 0
    assert 0.3 < out["agree_gradient"] < 1
    # the first-order step of one sequence is the kernel of attention.score_kernel applied to dL/ds
    g1 = attention.gradients(x[:1], y[:1], p0)
    fw = attention.forward(x[:1], p0)
    ds_kernel = attention.predicted_score_change(x[0], fw["q"][0], fw["k"][0], g1["s"][0], lr)
    _, ds_jvp = torch.func.jvp(lambda a, b: attention.scores(x[0] @ a.T, x[0] @ b.T, causal=False), (p0["W_Q"], p0["W_K"]),
                               (-lr * g1["W_Q"], -lr * g1["W_K"]))
    mask = attention.causal_mask(x.shape[1])
    assert torch.allclose(ds_kernel[mask], ds_jvp[mask], atol=1e-12)


def test_kernel_offdiagonal_is_a_share():
    task, (x, _, _), _ = sp.make_data(TINY, 0)
    shares = sp.kernel_offdiagonal(x, sp._params(sp.make_model(TINY, 0)), n_seqs=3)
    assert shares.shape == (3,) and ((shares > 0) & (shares < 1)).all()


def test_score_kernel_record_keeps_what_it_is_asked_for():
    rec = sp.score_kernel_record(TINY, 0, every=10, until=30, kernel_at=(0, 20), n_seqs=2, keep=(0, 40))
    assert list(rec["step"]) == [0, 10, 20]
    assert set(rec["offdiag"]) == {0, 20} and set(rec["snapshots"]) == {0, 40}
    assert ((rec["agree_gradient"] >= 0) & (rec["agree_gradient"] <= 1)).all()
    assert (rec["decrease"] >= 0).all()


def test_oracle_heads_beat_a_uniform_guess_and_choose_a_temperature():
    out = sp.oracle_heads(TINY, 0, temperatures=(0.5, 1.0))
    for name in ("signal", "content"):
        assert 0 <= out[name]["kl"] < 1.0
        assert out[name]["kl_by_position"].shape == (TINY.seq_len,)
    assert out["content"]["temperature"] in (0.5, 1.0) and out["signal"]["temperature"] is None


def test_config_small_and_paper():
    assert sp.Config.paper() == sp.Config() and sp.Config.paper(steps=20).steps == 20
    small = sp.Config.small(lr=0.1)
    assert (small.n_train, small.n_probe, small.steps, small.lr) == (256, 128, 400, 0.1)
    assert small.n_train < sp.Config.paper().n_train and small.describe().startswith("n_sources=3")


# every bad input is named where it is given, before any training starts
_P = {n: torch.zeros(s) for n, s in (("W_Q", (2, 3)), ("W_K", (2, 3)), ("W_V", (2, 3)), ("W_O", (2, 2)))}


@pytest.mark.parametrize("call, name", [
    (lambda: sp.Config(steps=-1), "steps"),
    (lambda: sp.Config(lr=0), "lr"),
    (lambda: sp.Config.small(d_v="8"), "d_v"),
    (lambda: sp.Config(n_train=0), "n_train"),
    (lambda: sp.Config(init_std=-0.1), "init_std"),
    (lambda: sp.Config(value_ratio=0), "value_ratio"),
    (lambda: sp.Config(signal_prob=2.0), "signal_prob"),
    (lambda: sp.Config(log_every=0), "log_every"),
    (lambda: sp.Config(frozen="W_V"), "frozen"),
    (lambda: sp.Config(frozen=("W_Z",)), "frozen"),
    (lambda: sp.run(TINY, seed="0"), "seed"),
    (lambda: sp.run(TINY, loop_every=-1), "loop_every"),
    (lambda: sp.run(TINY, loop_every=1, loop_until=-5), "loop_until"),
    (lambda: sp.run_seeds(TINY, seeds=[], workers=1), "seeds"),
    (lambda: sp.run_seeds(TINY, seeds="01", workers=1), "seeds"),
    (lambda: sp.run_seeds(TINY, seeds=(0, -1), workers=1), r"seeds\[1\]"),
    (lambda: sp.run_seeds(TINY, seeds=(3, 3), workers=1), "seeds"),   # one run counted twice
    (lambda: sp.make_task("cfg"), "cfg"),
    (lambda: sp.make_data(TINY, seed=-1), "seed"),
    (lambda: sp.lr_multipliers("cfg"), "cfg"),
    (lambda: sp.curves("runs", "loss"), "runs"),
    (lambda: sp.timescales("run"), "run_"),
    (lambda: sp.score_step(torch.randn(4, 3), torch.zeros(4, dtype=torch.long), _P,
                           {**_P, "W_Q": torch.zeros(2, 5)}, lr=0.1), "W_Q"),
    (lambda: sp.score_step(torch.randn(4, 3), torch.zeros(4, dtype=torch.long), _P, _P, lr=-0.1), "lr"),
    (lambda: sp.kernel_offdiagonal(torch.randn(2, 4, 3), _P, n_seqs=0), "n_seqs"),
    (lambda: sp.oracle_heads(TINY, 0, temperatures=(-1.0,)), "temperatures"),
    (lambda: sp.oracle_heads(TINY, 0, temperatures=()), "temperatures"),
])
def test_bad_inputs_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_configs_keep_plain_values_and_accept_numpy_scalars():
    cfg = sp.Config.small(steps=np.int64(20), lr=np.float32(0.5), frozen=["W_V"])
    assert type(cfg.steps) is int and type(cfg.lr) is float and cfg.frozen == ("W_V",)
    assert replace(sp.Config.paper(), value_ratio=0.1, init_std=0.03, steps=300, frozen=("W_Q", "W_K"))


def test_cued_task_needs_routing_and_its_posterior_reads_only_the_cued_stream():
    from bayesattn_lite import tasks
    task = sp.make_task(sp.Config(cued=True))
    assert isinstance(task, tasks.CuedSourcesTask) and task.d_x == 12 and (task.means[:, -2:] == 0).all()
    x, y, cued = sample = task.sample(64, seed=1)
    tag, cue = x[..., -2], x[..., -1]
    assert set(tag.unique().tolist()) == set(cue.unique().tolist()) == {-2.0, 2.0}
    assert ((tag == cue) == cued).all() and (cue == cue[:, :1]).all()      # the cue is the same everywhere
    assert (y == y[:, :1]).all() and 0.1 < cued.double().mean() < 0.4      # one target per sequence, rho = 0.25
    # the posterior from the cued positions alone, written out: each sequence's source is the target
    log_p = -((x[..., None, :-2].double() - task.means[:, :-2]) ** 2).sum(-1) / 2 * cued[..., None]
    torch.testing.assert_close(sample.posterior, torch.softmax(log_p.cumsum(1), -1))
    first = cued.double().argmax(1)  # before the first cued position nothing is known: uniform
    assert all(torch.allclose(sample.posterior[b, :first[b]], torch.full((3,), 1 / 3, dtype=torch.float64))
               for b in range(64) if cued[b].any())
    assert (sample.posterior[:, -1].argmax(-1) == y[:, -1]).double().mean() > 0.9
    with pytest.raises(ValueError, match="d_x"):
        sp.Config(cued=True, n_sources=3, d_x=4)
    with pytest.raises(ValueError, match="cued"):
        sp.Config(cued="yes")


def test_content_margin_reads_the_content_map_W_O_W_V():
    means = torch.eye(3, 5, dtype=torch.float64)
    params = {"W_V": torch.eye(4, 5, dtype=torch.float64), "W_O": 2 * torch.eye(3, 4, dtype=torch.float64)}
    assert sp.content_margin(params, means) == pytest.approx(2.0)          # logit 2 for its own class, 0 for others
    assert sp.content_margin({**params, "W_O": torch.zeros(3, 4)}, means) == 0
    with pytest.raises(ValueError, match="means"):
        sp.content_margin(params, torch.eye(3, 4))
    with pytest.raises(ValueError, match="params"):
        sp.content_margin({"W_V": params["W_V"]}, means)


def test_cued_runs_learn_to_route_and_frozen_routing_leaves_the_mix():
    cfg = sp.Config(cued=True, n_train=64, n_probe=32, steps=60, log_every=20, lr=0.5)
    live, frozen = sp.run(cfg, 0), sp.run(replace(cfg, frozen=("W_Q", "W_K")), 0)
    assert live.history["loss"][-1] < live.history["loss"][0]
    assert np.ptp(frozen.history["signal_mass"]) == 0 and live.history["content_margin"][-1] > 0


def test_the_analyses_name_a_head_or_task_of_another_run():
    r = sp.run(TINY, 0)
    with pytest.raises(ValueError, match=r"^model: expected a head of this run's sizes"):
        sp.manifold(r, model=attention.AttentionHead(5, 8, 8, 3))
    with pytest.raises(ValueError, match=r"^task: expected a tasks.SourcesTask or a tasks.CuedSourcesTask"):
        sp.probe_metrics(r.model, wind_tunnels.BijectionTask(), r.probe)


def test_curves_normalisation_check_and_snapshots_refuse_what_cannot_be_measured():
    r = sp.run(replace(TINY, steps=10), seed=0)
    with pytest.raises(ValueError, match=r"runs: expected distinct runs \(a run \(one cfg and seed\) given twice"):
        sp.curves([r, r], "loss")
    with pytest.raises(ValueError, match=r"runs: expected a list of Runs \(\[run_\] for one\), got a Run"):
        sp.curves(r, "loss")
    with pytest.raises(ValueError, match=r"early: expected an int <= the run's 10 steps, got 100"):
        sp.normalisation_check(r, early=100)
    with pytest.raises(ValueError, match=r"at: expected steps in \[0, cfg.steps=10\], got an empty list"):
        sp.parameter_snapshots(r.cfg, 0, [])

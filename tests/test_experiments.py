"""bayesattn_lite.experiments: the bookkeeping of the EM-vs-SGD experiment on small runs, and its
agreement with the package's plain training loop (autograd + torch.optim.SGD) for one seed."""

import copy
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from bayesattn_lite import attention, batched, diagnostics, experiments
from bayesattn_lite.attention import PARAM_NAMES, AttentionHead
from bayesattn_lite.tasks import StickyMarkovChain
from bayesattn_lite.train import Recipe, em_like, rates, train

SMALL = dict(steps=25, T=48, progress=False, record_every=5)


@pytest.fixture(scope="module")
def small():
    return experiments.em_vs_sgd(seeds=(3, 11), lr=0.05, dtype=torch.float64, **SMALL)


def test_first_step_at_or_below():
    curve = np.array([[3.0, 2.0, 1.0, 0.5], [3.0, 2.9, 2.8, 2.7], [3.0, 2.9, 2.8, 2.7]])
    final = np.array([0.4, 2.6, 2.65])
    steps_to = experiments.first_step_at_or_below(curve, final, np.array([1.5, 2.6, 1.0]))
    assert steps_to[0] == 2                 # after 2 updates
    assert steps_to[1] == 4                 # reached only by the final weights: all 4 updates
    assert math.isnan(steps_to[2])          # never


def test_result_fields_and_shapes(small):
    S, steps = 2, SMALL["steps"]
    assert small.seeds == (3, 11)
    for name in ("loss_sgd", "loss_em"):
        assert getattr(small, name).shape == (S, steps)
    for name in ("steps_to_sgd_final", "speedup", "final_loss_sgd", "final_loss_em", "final_entropy_sgd",
                 "final_entropy_em", "final_accuracy_sgd", "final_accuracy_em", "bayes_loss"):
        assert getattr(small, name).shape == (S,), name
    assert small.snapshot_steps.tolist() == [0, 5, 10, 15, 20, 25]
    assert small.values_sgd.shape == small.values_em.shape == (S, 6, 8, 15)
    assert abs(small.h_min - 1.8292) < 1e-4
    assert "exact Bayes" in small.table() and "H_min" in small.table()


def test_paired_start_and_speedup_bookkeeping(small):
    # both schedules of a seed start from the same weights on the same sequence
    assert np.array_equal(small.loss_sgd[:, 0], small.loss_em[:, 0])
    assert np.array_equal(small.values_sgd[:, 0], small.values_em[:, 0])
    init = experiments.init_model(3, StickyMarkovChain(), torch.float64)
    assert np.allclose(small.values_sgd[0, 0], (StickyMarkovChain().means @ init["W_V"].T).numpy())
    # at initial loss ln 8, the losses of seed 3 and seed 11 differ (different sequences and weights)
    assert abs(small.loss_sgd[0, 0] - math.log(8)) < 0.05 and small.loss_sgd[0, 0] != small.loss_sgd[1, 0]
    # the speed-up is recomputable from the curves
    for s in range(2):
        em = np.append(small.loss_em[s], small.final_loss_em[s])
        t = int(np.argmax(em <= small.final_loss_sgd[s]))
        threshold = small.final_loss_sgd[s] * (1 + experiments.RTOL)
        assert em[t] <= threshold and (t == 0 or em[t - 1] > threshold)
        assert small.steps_to_sgd_final[s] == t and small.speedup[s] == pytest.approx(SMALL["steps"] / t)
    assert small.median_speedup == pytest.approx(np.median(small.speedup))


def test_bayes_loss_is_that_of_each_seeds_sequence(small):
    chain = StickyMarkovChain()
    for s, seed in enumerate(small.seeds):
        assert small.bayes_loss[s] == pytest.approx(chain.bayes_metrics(*chain.sample(SMALL["T"], seed))["loss"])


def test_ratio_one_is_sgd_itself():
    same = experiments.em_vs_sgd(seeds=(5,), value_ratio=1.0, lr=0.05, dtype=torch.float64, **SMALL)
    np.testing.assert_allclose(same.loss_sgd, same.loss_em, rtol=1e-12)
    assert same.steps_to_sgd_final[0] == SMALL["steps"] and same.speedup[0] == 1.0


def test_matches_the_plain_autograd_training_loop():
    """Seed 3's EM-like run equals train.train with torch.optim.SGD and a 10x W_V rate."""
    result = experiments.em_vs_sgd(seeds=(7, 3), lr=0.05, dtype=torch.float64, **SMALL)
    chain = StickyMarkovChain()
    x, y = chain.sample(SMALL["T"], 3, dtype=torch.float64)
    head = AttentionHead(20, experiments.D_K, experiments.D_V, 8, dtype=torch.float64)
    with torch.no_grad():
        for name, W in experiments.init_model(3, chain, torch.float64).items():
            getattr(head, name).copy_(W)
    history = train(head, lambda model, step: attention.loss(x, y, model.params()), Recipe(SMALL["steps"], lr=0.05, lr_multipliers={"W_V": 10.0}), progress=False)
    np.testing.assert_allclose(result.loss_em[1], history["loss"], rtol=1e-10)
    for name in PARAM_NAMES:
        assert torch.allclose(result.run.params["em"][name][1], getattr(head, name).detach(), atol=1e-12)


def test_run_schedules_layout_and_held_out():
    schedules = {"slow": rates(0.01), "fast V": rates(0.01, em_like(30)),
                 "frozen": rates(0.0)}
    run = experiments.run_schedules(schedules, seeds=(1, 2), dtype=torch.float64, **SMALL)
    assert list(run.loss) == list(schedules) and run.loss["fast V"].shape == (2, SMALL["steps"])
    assert np.allclose(run.loss["frozen"], run.loss["frozen"][:, :1])      # rate 0: the loss never moves
    steps_to, speedup = run.speedup("fast V", baseline="slow")
    assert (steps_to < SMALL["steps"]).all() and (speedup > 1).all()
    assert torch.equal(run.params["frozen"]["W_Q"][1], experiments.init_model(2, run.chain, torch.float64)["W_Q"])
    held = run.held_out(T=40)
    assert set(held) == {"slow", "fast V", "frozen", "bayes"}
    assert held["frozen"]["loss"].shape == (2,)
    assert (held["bayes"]["loss"] < held["frozen"]["loss"]).all()


@pytest.mark.parametrize("call, match", [
    (lambda: experiments.em_vs_sgd(value_ratio=0, **SMALL), "value_ratio"),
    (lambda: experiments.em_vs_sgd(lr=-0.1, **SMALL), "lr"),
    (lambda: experiments.em_vs_sgd(seeds=(1, 1), **SMALL), "seeds"),
    (lambda: experiments.em_vs_sgd(T=1, steps=2, progress=False), "T: expected an int >= 2"),
    (lambda: experiments.run_schedules({"x": {"W_V": 0.1}}, **SMALL), "rate for each of"),
    (lambda: experiments.run_schedules({}, **SMALL), "non-empty"),
])
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_extra_schedules_ride_along_and_cannot_shadow_the_main_pair():
    result = experiments.em_vs_sgd(seeds=(3,), lr=0.05, dtype=torch.float64,
                                   extra_schedules={"fast": rates(0.5)}, **SMALL)
    assert list(result.run.schedules) == ["sgd", "em", "fast"]
    assert (result.run.speedup("fast")[1] > 1).all()
    with pytest.raises(ValueError, match="taken"):
        experiments.em_vs_sgd(seeds=(3,), extra_schedules={"em": rates(0.5)}, **SMALL)


def test_config_paper_and_small_and_a_small_run():
    paper, small = experiments.EMvsSGDConfig.paper(), experiments.EMvsSGDConfig.small()
    assert (paper.seeds, paper.steps, paper.T, paper.lr, paper.value_ratio, paper.self_prob) == \
        (experiments.PAPER_SEEDS, 1000, 2000, 0.01, 10.0, 0.3)
    assert small.seeds == experiments.PAPER_SEEDS[:3] and small.T == 600 and small.steps == paper.steps
    result = experiments.EMvsSGDConfig.small(seeds=(3,), T=30, steps=5, self_prob=0.5, value_ratio=3.0).run(progress=False)
    assert result.value_ratio == 3.0 and result.run.chain.self_prob == 0.5 and result.loss_em.shape == (1, 5)
    assert result.run.schedules["em"]["W_V"] == pytest.approx(3 * paper.lr)


def test_value_pca_shares_one_basis_and_measures_paths():
    t = np.linspace(0, 1, 11)
    straight = np.zeros((11, 2, 3))
    straight[:, :, 0] = t[:, None]                                  # both symbols: a unit line along x
    corner = np.zeros((11, 2, 3))
    corner[:, :, 0] = np.minimum(t, 0.5)[:, None]                   # half along x, then half along y
    corner[:, :, 1] = np.maximum(t - 0.5, 0.0)[:, None]
    out = experiments.value_pca({"a": straight, "b": 2 * corner})
    assert out["path_length"]["a"] == pytest.approx(1.0) and out["straightness"]["a"] == pytest.approx(1.0)
    assert out["path_length"]["b"] == pytest.approx(2.0)
    assert out["straightness"]["b"] == pytest.approx(np.sqrt(0.5))
    assert out["projections"]["a"].shape == (11, 2, 2) and out["explained"].sum() <= 1 + 1e-12
    with pytest.raises(ValueError, match="snapshots >= 2"):
        experiments.value_pca({"a": straight[:1]})


# ----------------------------------------------------------------------------- frame and precision

@pytest.fixture(scope="module")
def frame_run():
    schedules = {"sgd": rates(0.02), "em": rates(0.02, em_like(10))}
    return experiments.run_schedules(schedules, seeds=(3, 11), steps=40, T=60, progress=False,
                                     record_every=5, dtype=torch.float64)


def test_frame_rate_is_a_total_variation_between_attention_rows():
    chain = StickyMarkovChain()
    x, _ = chain.sample(30, 1, dtype=torch.float64)
    p = experiments.init_model(1, chain, torch.float64)
    same = experiments.frame_rate(x, torch.stack([p["W_Q"]] * 3), torch.stack([p["W_K"]] * 3))
    assert same.shape == (2,) and np.all(same == 0)
    far = experiments.frame_rate(x, torch.stack([p["W_Q"], 50 * p["W_Q"]]), torch.stack([p["W_K"], 50 * p["W_K"]]))
    assert 0 < far[0] <= 1


def test_frame_rate_in_blocks_of_rows_is_the_mean_over_every_row_at_once():
    """The blocks skip keys no row of theirs sees; the rate is the plain mean of diagnostics.frame_change."""
    torch.manual_seed(0)
    x, W_Q, W_K = torch.randn(40, 6, dtype=torch.float64), torch.randn(4, 3, 6, dtype=torch.float64), torch.randn(4, 3, 6, dtype=torch.float64)
    alpha = [torch.softmax(attention.scores(x @ q.T, x @ k.T), -1) for q, k in zip(W_Q, W_K)]
    plain = [diagnostics.frame_change(a, b) for a, b in zip(alpha[:-1], alpha[1:])]
    for rows in (1, 7, 40, 100):
        np.testing.assert_allclose(experiments.frame_rate(x, W_Q, W_K, rows_per_block=rows), plain, rtol=1e-12)


def test_precision_rate_is_relative_to_the_final_size_not_the_start():
    chain = StickyMarkovChain()
    x, _ = chain.sample(30, 1, dtype=torch.float64)
    W = torch.randn(15, 20, dtype=torch.float64)
    # a value that grows from 1% to 100% of its size in two equal steps: equal rates, not a huge first one
    rates = experiments.precision_rate(x, torch.stack([0.01 * W, 0.505 * W, W]))
    np.testing.assert_allclose(rates, [0.495, 0.495])


def test_frame_precision_bookkeeping(frame_run):
    for name in ("sgd", "em"):
        fp = experiments.frame_precision(frame_run, name)
        assert fp.frame_rate.shape == fp.precision_rate.shape == (2, 8)
        assert len(fp.frame_settle) == len(fp.order()) == 2
        # settle steps are steps of the run, or nan (not settled); a share after t_frame only where it settled
        for t in (fp.t_frame, fp.t_values, fp.t_frame_10, fp.t_values_10):
            assert np.all(np.isnan(t) | ((t >= 5) & (t <= 40)))
        assert np.array_equal(np.isnan(fp.loss_after_frame), np.isnan(fp.t_frame))
        # small steps: the first-order account adds up to the realised decrease
        np.testing.assert_allclose(fp.first_order, 1.0, atol=0.03)
        np.testing.assert_allclose(sum(fp.attribution.values()), fp.first_order)
    # ten times the value rate buys a larger share of the decrease through the values
    assert np.all(experiments.frame_precision(frame_run, "em").attribution["values"]
                  > experiments.frame_precision(frame_run, "sgd").attribution["values"])
    with pytest.raises(ValueError, match="one of"):
        experiments.frame_precision(frame_run, "adam")


def test_frame_precision_per_step_shares_add_up_to_the_attribution(frame_run):
    fp = experiments.frame_precision(frame_run, "em")
    for group, shares in fp.bought.items():
        assert shares.shape == (2, 40)
        np.testing.assert_allclose(shares.sum(1), fp.attribution[group])


def test_bought_after_sums_each_groups_share_over_a_fixed_late_window(frame_run):
    fp = experiments.frame_precision(frame_run, "em")
    late = experiments.bought_after(fp, 20)
    drop = fp.loss[:, 0] - fp.loss[:, -1]
    np.testing.assert_allclose(late["routing"], fp.bought["routing"][:, 20:].sum(1) * drop)
    np.testing.assert_allclose(late["values + readout"], late["values"] + late["readout"])
    np.testing.assert_allclose(late["realised"], fp.loss[:, 20] - fp.loss[:, -1])
    whole = experiments.bought_after(fp, 0)
    np.testing.assert_allclose(sum(whole[g] for g in ("routing", "values", "readout")) / drop, fp.first_order)
    with pytest.raises(ValueError, match="after"):
        experiments.bought_after(fp, 40)
    with pytest.raises(ValueError, match="fp"):
        experiments.bought_after({"loss": 1}, 10)


def test_the_late_gate_needs_learned_seeds_a_plateau_before_the_last_fifth_and_no_memorising():
    record = experiments.load_long_run("pool64-std0.1")
    gate = experiments.late_gate(record, "SGD, lr 0.1")
    assert gate["meets"] and (gate["learned"] >= experiments.LEARNED).all()
    assert not experiments.late_gate(record, "SGD, lr 0.1", plateau=0.0025)["meets"]   # the line matters
    # a run that never left its start is "on its plateau" from update 0: not learned, so no gate
    never = experiments.late_gate(experiments.load_long_run("pool64-std0.03"), "em")
    assert (never["plateau_step"] == 0).all() and (never["learned"] < 0.1).all() and not never["meets"]

    def with_gaps(gaps):   # the record with the held-out minus training gap (above Bayes) set per seed
        edited = copy.deepcopy(record)
        m = edited["schedules"]["SGD, lr 0.1"]
        held_end = np.asarray(m["held_out"])[:, -1]
        m["final_train_loss"] = (held_end - np.asarray(m["bayes_held_out"]) + np.asarray(m["bayes_train_loss"])
                                 - np.asarray(gaps)).tolist()
        return experiments.late_gate(edited, "SGD, lr 0.1")
    spread = np.array([-2, -1, 0, 1, 2]) * 0.01   # sd 0.0158 (ddof 1), standard error 0.0071
    gate = with_gaps(0.013 + spread)               # between one and two standard errors: not measurable
    np.testing.assert_allclose([gate["gap_mean"], gate["gap_se"]], [0.013, 0.01 / math.sqrt(2)])
    assert gate["meets"]
    assert not with_gaps(0.015 + spread)["meets"]  # above two standard errors, though within one sd
    c = experiments.convergence(record, "SGD, lr 0.1")
    m = record["schedules"]["SGD, lr 0.1"]
    np.testing.assert_allclose(c["excess_gap"] - c["gap"],
                               np.asarray(m["bayes_train_loss"]) - np.asarray(m["bayes_held_out"]))
    assert not experiments.late_gate(record, "SGD, lr 0.1", learned=0.9)["meets"]   # its least seed is at 0.83
    # "learned" runs from the uniform predictor's loss, not from the run's first loss (a worse start is no credit)
    wide = experiments.load_long_run("pool64-std0.3")["schedules"]["em"]
    held, bayes = np.asarray(wide["held_out"]), np.asarray(wide["bayes_held_out"])
    assert (held[:, 0] > math.log(8)).all()
    np.testing.assert_allclose(experiments.convergence(experiments.load_long_run("pool64-std0.3"), "em")["learned"],
                               (math.log(8) - held[:, -1]) / (math.log(8) - bayes))
    # a plateau reached exactly at the start of the last fifth counts, as a settle step there does
    edge = copy.deepcopy(record)
    m = edge["schedules"]["SGD, lr 0.1"]
    steps, last_fifth = np.asarray(m["loss_steps"]), 0.8 * edge["config"]["steps"]
    k = int(np.searchsorted(steps, last_fifth))
    assert steps[k] == last_fifth
    held = np.asarray(m["held_out"])
    held[:, :k] = held.min() + 1.0   # every seed's loss drops to its lowest only at the last fifth's first snapshot
    held[:, k:] = held[:, k:].min(1, keepdims=True)
    m["held_out"] = held.tolist()
    gate = experiments.late_gate(edge, "SGD, lr 0.1")
    assert (gate["plateau_step"] == last_fifth).all() and gate["meets"]
    # one seed has no standard error: the gate cannot be met
    one = copy.deepcopy(record)
    for key, value in one["schedules"]["SGD, lr 0.1"].items():
        if isinstance(value, list) and len(value) == 5:
            one["schedules"]["SGD, lr 0.1"][key] = value[:1]
    gate = experiments.late_gate(one, "SGD, lr 0.1")
    assert math.isnan(gate["gap_se"]) and not gate["meets"]


def test_bought_late_starts_each_seeds_window_where_its_loss_has_covered_the_fraction(frame_run):
    fp = experiments.frame_precision(frame_run, "em")
    late = experiments.bought_late(fp, 0.9)
    drop = fp.loss[:, 0] - fp.loss[:, -1]
    for i, start in enumerate(late["from_step"]):
        k = int(np.searchsorted(fp.loss_steps, start))
        assert fp.loss[i, 0] - fp.loss[i, k] >= 0.9 * drop[i] - 1e-12          # covered by then
        assert (fp.loss[i, 0] - fp.loss[i, :k] < 0.9 * drop[i]).all()          # and not before
        np.testing.assert_allclose(late["routing"][i], fp.bought["routing"][i, k:].sum() * drop[i])
        np.testing.assert_allclose(late["realised"][i], fp.loss[i, k] - fp.loss[i, -1])
    np.testing.assert_allclose(late["values + readout"], late["values"] + late["readout"])
    assert (experiments.bought_late(fp, 0.5)["from_step"] <= late["from_step"]).all()
    for bad in (0, 1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            experiments.bought_late(fp, bad)


def test_settle_order_says_not_settled_for_a_rate_still_rising(frame_run):
    fp = experiments.frame_precision(frame_run, "sgd")
    rising = experiments.frame_precision_of({
        "rate_steps": fp.rate_steps, "frame_rate": np.tile(np.arange(1.0, 9.0), (2, 1)),
        "precision_rate": np.tile(np.exp(-np.arange(8.0)), (2, 1)), "frame_moved": fp.frame_moved,
        "values_moved": fp.values_moved, "loss_steps": np.arange(41), "loss": fp.loss, "bought": fp.bought})
    assert rising.order() == ["not both settled", "not both settled"] and np.all(np.isnan(rising.t_frame))
    assert np.all(np.isfinite(rising.t_values)) and np.all(np.isnan(rising.loss_after_frame))


# ----------------------------------------------------------------------------- pools and long runs

def test_a_pool_run_trains_on_fresh_sequences_and_scores_held_out():
    run = experiments.run_schedules({"em": rates(0.02, em_like(10))}, seeds=(3,), steps=12, T=40,
                                    pool=4, record_every=4, progress=False, dtype=torch.float64)
    x, _ = run.training_data()
    assert x.shape == (1, 4, 39, 20)
    paper, _ = StickyMarkovChain().sample(40, 3, dtype=torch.float64)
    held, _ = run.held_out_data()
    assert not any(torch.equal(x[0, k], paper) or torch.equal(x[0, k], held[0]) for k in range(4))
    curve, bayes = run.held_out_curve("em")
    assert curve.shape == (1, 4) and bayes.shape == (1,)
    fp = experiments.frame_precision(run, "em")
    np.testing.assert_allclose(fp.loss, curve)
    # the midpoint attribution adds up to the realised decrease of the held-out loss
    np.testing.assert_allclose(fp.first_order, 1.0, atol=0.02)


def test_a_fresh_run_sees_each_sequence_once_and_is_scored_on_unseen_ones():
    run = experiments.run_schedules({"sgd": rates(0.05), "em": rates(0.05, em_like(10))}, seeds=(3, 4), steps=8,
                                    T=30, fresh=True, record_every=2, progress=False, dtype=torch.float64)
    x0, _ = experiments.fresh_sequences(run.chain, 30, (3, 4), 0)
    x1, _ = experiments.fresh_sequences(run.chain, 30, (3, 4), 1)
    assert not torch.equal(x0[0], x1[0]) and not torch.equal(x0[0], x0[1])   # new per step, per seed
    # step 0 trained on step 0's sequences: the recorded loss is theirs
    first = batched.evaluate(x0, experiments.fresh_sequences(run.chain, 30, (3, 4), 0)[1],
                             run.snapshot_params("sgd", 0))["loss"]
    np.testing.assert_allclose(run.loss["sgd"][:, 0], first, rtol=1e-6)
    xs, ys = experiments.fresh_sequences(run.chain, 30, (3, 4), 8)             # the final score: unseen
    np.testing.assert_allclose(run.bayes["loss"], [run.chain.bayes_metrics(xs[i], ys[i])["loss"] for i in range(2)])
    fp = experiments.frame_precision(run, "em")                               # on the held-out sequence
    np.testing.assert_allclose(fp.loss, run.held_out_curve("em")[0])
    extra = experiments.rates_at_intervals(run, "em", [2])
    assert extra["frame_rate_4"].shape == (2, 2) and list(extra["rate_steps_4"]) == [4, 8]
    with pytest.raises(ValueError, match="pool"):
        experiments.run_schedules({"sgd": rates(0.05)}, seeds=(3,), steps=2, T=10, fresh=True, pool=2, progress=False)


def test_the_shipped_long_run_reproduces_from_a_short_rerun():
    shipped = experiments.load_long_run("pool64-std0.1")
    cfg = experiments.LongRunConfig.small(steps=50)
    rerun = experiments.long_run(cfg, progress=False)
    for name, rec in rerun["schedules"].items():
        original = shipped["schedules"][name]
        np.testing.assert_allclose(rec["held_out"][0], original["held_out"][0][:3], rtol=1e-5)
        np.testing.assert_allclose(rec["train_loss"][0], original["train_loss"][0][:2], rtol=1e-5)
    assert shipped["config"]["steps"] == experiments.LongRunConfig.paper().steps


def test_the_shipped_sgd_at_0_1_of_the_paper_run_reproduces_from_a_short_rerun():
    """Chapter 6 loads the paper run's third schedule instead of training it: the record is that run."""
    shipped = experiments.load_long_run(experiments.PAPER_RUN_LR01)
    cfg = next(c for c in experiments.LONG_RUNS if c.name == experiments.PAPER_RUN_LR01)
    assert (cfg.steps, cfg.T, cfg.pool, cfg.record_every) == (1000, 2000, 0, 10)   # the paper run's, as chapter 6 photographs it
    assert shipped["config"]["steps"] == cfg.steps and shipped["config"]["schedules"] == [list(s) for s in cfg.schedules]
    rerun = experiments.long_run(replace(cfg, seeds=cfg.seeds[:1], steps=30), progress=False)["schedules"]["SGD, lr 0.1"]
    original = shipped["schedules"]["SGD, lr 0.1"]
    np.testing.assert_allclose(rerun["frame_rate"][0][:2], original["frame_rate"][0][:2], rtol=1e-4)
    np.testing.assert_allclose(rerun["held_out"][0], original["held_out"][0][:4], rtol=1e-5)
    np.testing.assert_allclose(rerun["train_loss"][0], original["train_loss"][0][:3], rtol=1e-5)


def test_a_saved_schedule_run_loads_with_the_same_speedups_tables_and_held_out_scores(small, tmp_path):
    run = small.run
    experiments.save_schedule_run(run, tmp_path / "run.npz")
    loaded = experiments.load_schedule_run(tmp_path / "run.npz")
    assert loaded.schedules == run.schedules and loaded.seeds == run.seeds and loaded.T == run.T
    for name in run.schedules:
        np.testing.assert_allclose(loaded.speedup(name)[1], run.speedup(name)[1])
        np.testing.assert_allclose(loaded.held_out()[name]["loss"], run.held_out()[name]["loss"])
    assert loaded.table() == run.table()
    assert experiments.saved_run_config(tmp_path / "run.npz")["steps"] == run.steps
    with pytest.raises(ValueError, match=r"path: expected the path of a run's \.npz file .*missing\.npz', which does not exist"):
        experiments.saved_run_config(tmp_path / "missing.npz")
    with pytest.raises(FileNotFoundError, match="sticky_long_runs.py --only controls"):
        experiments.load_controls(tmp_path)


def test_the_shipped_controls_are_chapter_6s_schedules_and_reproduce_from_a_short_rerun():
    shipped = experiments.load_controls()
    assert shipped.schedules == experiments.CONTROLS
    assert (shipped.seeds, shipped.steps, shipped.T) == (experiments.PAPER_SEEDS, 1000, experiments.CONTROLS_T)
    rerun = experiments.controls_run(steps=20, progress=False)
    for name in experiments.CONTROLS:
        np.testing.assert_allclose(rerun.loss[name], shipped.loss[name][:, :20], rtol=1e-5)


def test_within_is_the_first_step_from_which_a_curve_stays_below():
    steps = np.array([0, 10, 20, 30])
    np.testing.assert_array_equal(experiments.within(steps, [[0.5, 0.01, 0.03, 0.01], [0.5, 0.4, 0.3, 0.2]], 0.02),
                                  [30, np.nan])


@pytest.mark.parametrize("call, name", [
    (lambda: experiments.run_schedules({"sgd": rates(0.01)}, seeds=(-1,), **SMALL), r"seeds\[0\]"),
    (lambda: experiments.em_vs_sgd(seeds=(0,), extra_schedules="x", **SMALL), "extra_schedules"),
    (lambda: experiments.first_step_at_or_below("curve", np.ones(2), 0.5), "curve"),
    (lambda: experiments.value_pca("traj"), "trajectories"),
    (lambda: experiments.load_schedule_run("/nonexistent/run.npz"), "path"),
    (lambda: experiments.save_schedule_run("run", "/tmp/unused.npz"), "run"),
    (lambda: experiments.convergence(experiments.load_long_run(), "sgd", plateau=-1), "plateau"),
    (lambda: experiments.LongRunConfig.small(steps=-5), "steps"),
    (lambda: experiments.LongRunConfig.small(seeds=(1, 1)), "seeds"),
    (lambda: experiments.LongRunConfig.small(schedules=(("sgd", -0.01, 1.0),)), "schedules"),
    (lambda: experiments.LongRunConfig.small(pool=-1), "pool"),
    (lambda: experiments.LongRunConfig.small(record_every=0), "record_every"),
    (lambda: experiments.LongRunConfig.small(fresh=True), "pool"),
    (lambda: experiments.LongRunConfig.small(pool=0, fresh=True, intervals=(30,)), "intervals"),
])
def test_bad_inputs_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_numpy_rates_are_accepted_and_saved_as_plain_floats(tmp_path):
    run = experiments.run_schedules({"a": {n: np.float32(0.01) for n in PARAM_NAMES}}, seeds=(0,), steps=1, T=3,
                                    progress=False)
    assert all(type(r) is float for r in run.schedules["a"].values())
    experiments.save_schedule_run(run, tmp_path / "a.npz")  # the rates go to JSON
    assert all(isinstance(c, experiments.LongRunConfig) for c in experiments.LONG_RUNS)


def test_save_schedule_run_refuses_a_folder_and_record_path_a_number(small, tmp_path):
    with pytest.raises(ValueError, match=r"path: expected a file path for the run's .npz file, got .*a folder"):
        experiments.save_schedule_run(small.run, tmp_path)   # an existing folder: it wrote folder.npz beside it
    assert not (tmp_path.parent / f"{tmp_path.name}.npz").exists()
    with pytest.raises(ValueError, match="name: expected a str, got 5"):
        experiments.record_path(5)

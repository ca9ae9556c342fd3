"""bayesattn_lite.comparison: training an architecture on a wind tunnel, scoring it in bits against
the exact posterior, and the architecture x task x seed table."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from bayesattn_lite import comparison, models, wind_tunnels
from bayesattn_lite.comparison import compare, evaluate, format_table, summarise, train_on_task

TINY = {"d_model": 8}  # every architecture accepts d_model; the tests need speed, not accuracy


def state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_same_weights(a, b):
    for (ka, va), (kb, vb) in zip(state(a).items(), state(b).items()):
        assert ka == kb
        torch.testing.assert_close(va, vb, rtol=0, atol=0)


class Oracle(nn.Module):
    """Returns the log exact posterior of the sequences ``evaluate`` will draw: the Bayes model."""

    def __init__(self, task, n_seqs, seed=12345, **horizon):
        super().__init__()
        self.batch = task.sample(n_seqs, seed=seed, **horizon)
        self.dummy = nn.Parameter(torch.zeros(()))  # evaluate reads the device of a parameter

    def forward(self, tokens):
        assert torch.equal(tokens, self.batch.tokens)
        p = self.batch.posterior.clone()
        p[~self.batch.mask] = 1.0  # unscored positions: any valid distribution
        return torch.log(p.clamp_min(1e-12)) + 0 * self.dummy


def test_training_lowers_the_loss_and_returns_a_history():
    model, history = train_on_task("lstm", "bijection", 60, seed=0, lr=1e-2, progress=False, log_every=1, **TINY)
    assert isinstance(model, models.LSTMModel) and model.d_model == 8
    assert len(history) == 60
    assert history["loss"][-10:].mean() < history["loss"][:10].mean()


def test_same_seed_same_weights_and_other_seed_differs():
    a, _ = train_on_task("mlp", "recall", 5, seed=3, progress=False, **TINY)
    b, _ = train_on_task("mlp", "recall", 5, seed=3, progress=False, **TINY)
    c, _ = train_on_task("mlp", "recall", 5, seed=4, progress=False, **TINY)
    assert_same_weights(a, b)
    assert not torch.equal(state(a)["embed.weight"], state(c)["embed.weight"])


def test_resume_from_checkpoint_equals_one_run(tmp_path):
    path = tmp_path / "run.pt"
    straight, h1 = train_on_task("transformer", "bijection", 12, seed=1, progress=False, log_every=1, **TINY,
                                 n_heads=2)
    train_on_task("transformer", "bijection", 5, seed=1, progress=False, checkpoint_path=str(path),
                  log_every=1, **TINY, n_heads=2)
    resumed, h2 = train_on_task("transformer", "bijection", 12, seed=1, progress=False,
                                checkpoint_path=str(path), log_every=1, **TINY, n_heads=2)
    assert_same_weights(straight, resumed)
    np.testing.assert_array_equal(h1["loss"], h2["loss"])


@pytest.mark.parametrize("name", sorted(wind_tunnels.WIND_TUNNELS))
def test_the_exact_posterior_scores_zero_bits(name):
    task = wind_tunnels.wind_tunnel(name)
    result = evaluate(Oracle(task, 64), task, n_seqs=64)
    assert result["entropy_error_bits"] < 1e-5 and result["kl_bits"] < 1e-5
    assert result["accuracy"] == pytest.approx(result["bayes_accuracy"])
    assert result["per_position_error_bits"].shape == (task.seq_len,)


def test_evaluate_at_a_longer_horizon():
    task = wind_tunnels.wind_tunnel("hmm")
    result = evaluate(Oracle(task, 16, K=30), task, n_seqs=16, K=30)
    assert result["per_position_error_bits"].shape == (task.prefix_len + 30,)
    assert result["kl_bits"] < 1e-5
    model = models.build("lstm", task.vocab_size, task.n_classes, d_model=8)
    out = evaluate(model, task, n_seqs=16, K=30)
    assert {"entropy_error_bits", "kl_bits", "accuracy", "bayes_accuracy"} <= set(out)
    assert all(math.isfinite(out[k]) for k in ("entropy_error_bits", "kl_bits", "accuracy"))
    assert model.training  # evaluate restores the mode it found


def test_compare_rows_and_keep_models():
    rows, trained = compare(["lstm", "mlp"], ["hmm"], seeds=[0, 1], steps=3, horizons={"hmm": [{"K": 20}]},
                            model_sizes={"lstm": TINY, "mlp": TINY}, n_eval=16, keep_models=True)
    assert len(rows) == 2 * 2 * 2  # archs x seeds x horizons
    assert [r["horizon"] for r in rows[:2]] == ["trained", "K=20"]
    for row in rows:
        assert row["task"] == "hmm" and row["primitive"] == "transport" and row["steps"] == 3
        assert row["n_params"] == models.count_parameters(trained[row["arch"], "hmm", row["seed"]])
    again = evaluate(trained["mlp", "hmm", 1], "hmm", n_seqs=16)
    row = next(r for r in rows if (r["arch"], r["seed"], r["horizon"]) == ("mlp", 1, "trained"))
    assert again["kl_bits"] == pytest.approx(row["kl_bits"])


def test_position_models_get_a_max_len_for_the_longest_horizon():
    rows = compare(["transformer"], ["hmm"], seeds=[0], steps=1, horizons={"hmm": [{"K": 200}]},
                   model_sizes={"transformer": {"d_model": 8, "n_heads": 2}}, n_eval=4)
    assert rows[1]["horizon"] == "K=200" and math.isfinite(rows[1]["kl_bits"])


def test_worker_processes_give_the_same_rows():
    kwargs = dict(archs=["mlp"], task_names=["bijection"], seeds=[0, 1], steps=4, n_eval=16,
                  model_sizes={"mlp": TINY})
    one = compare(**kwargs)
    two = compare(**kwargs, workers=2)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]  # noqa: E731
    assert strip(one) == strip(two)


def test_checkpoint_dir_resumes(tmp_path):
    kwargs = dict(archs=["mlp"], task_names=["recall"], seeds=[2], steps=4, n_eval=16,
                  model_sizes={"mlp": TINY}, checkpoint_dir=str(tmp_path))
    first = compare(**kwargs)
    assert (tmp_path / "mlp-recall-seed2.pt").exists()
    second = compare(**kwargs)  # loads the finished checkpoint, trains nothing
    assert first[0]["kl_bits"] == second[0]["kl_bits"]


def test_summarise_and_format_table():
    rows = [{"arch": "lstm", "task": "hmm", "horizon": "trained", "kl_bits": x} for x in (1.0, 2.0, 3.0)]
    rows.append({"arch": "mlp", "task": "hmm", "horizon": "trained", "kl_bits": 5.0})
    stats = summarise(rows, "kl_bits")
    assert stats["lstm", "hmm", "trained"] == {"mean": 2.0, "std": 1.0, "min": 1.0, "max": 3.0, "n": 3}
    assert stats["mlp", "hmm", "trained"]["std"] == 0.0
    text = format_table(rows, "kl_bits")
    assert "2.000 ± 1.000" in text and "5.000 ± 0.000" in text and text.splitlines()[0].strip() == "hmm"


@pytest.mark.parametrize("call, match", [
    (lambda: train_on_task("gru", "hmm", 1), "one of"),
    (lambda: train_on_task("lstm", "maze", 1), "one of"),
    (lambda: train_on_task("lstm", 3, 1), "wind tunnel"),
    (lambda: train_on_task("lstm", "hmm", -1), "steps"),
    (lambda: train_on_task("lstm", "hmm", 1, seed=-2), "seed"),
    (lambda: train_on_task("lstm", "hmm", 1, batch_size=0), "batch_size"),
    (lambda: evaluate(models.build("lstm", 16, 8), "bijection", n_seqs=0), "n_seqs"),
    (lambda: compare(["rnn"], ["hmm"], [0], 1), "archs"),
    (lambda: compare(["lstm"], ["maze"], [0], 1), "task_names"),
    (lambda: compare(["lstm"], ["hmm"], [0], 1, size="huge"), "size"),
    (lambda: compare(["lstm"], ["hmm"], [0], 1, workers=0), "workers"),
    (lambda: summarise([]), "rows"),
    (lambda: summarise([{"arch": "lstm", "kl_bits": 1.0}], "loss"), "metric"),
])
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_data_streams_do_not_overlap_the_evaluation_seed():
    base, steps = comparison.DATA_SEED_BASE, comparison.MAX_STEPS
    assert base > 12345 + 2**16 and base + 2**16 * steps < 2**63


@pytest.mark.parametrize("arch", models.ARCHITECTURES)
def test_paper_sizes_train_one_step_on_paper_tasks(arch):
    """The SIZE = "paper" route of chapter 8 builds and steps (one tiny batch; the real run is GPU work)."""
    rows = compare([arch], ["hmm"], seeds=[0], steps=1, size="paper", batch_size=2, n_eval=2,
                   horizons={"hmm": [{"K": 50}]})
    assert 2.5e6 <= rows[0]["n_params"] <= 7.5e6  # Paper I: 2.7M-7.4M
    assert [r["horizon"] for r in rows] == ["trained", "K=50"]
    assert all(math.isfinite(r["kl_bits"]) for r in rows)


# ----------------------------------------------------------------------------- converged, shipped models

COMMITTED = sorted(comparison.PRETRAINED_DIR.glob("cpu/*-seed*.json"))


def test_every_architecture_task_and_seed_is_shipped():
    names = {p.stem for p in COMMITTED}
    expected = {f"{a}-{t}-seed{s}" for a in models.ARCHITECTURES for t in ("bijection", "hmm", "recall")
                for s in (0, 1, 2)}
    assert expected <= names, f"missing: {sorted(expected - names)}; run scripts/train_wind_tunnels.py"
    for name in expected:  # weights beside every record, small enough to ship
        weights = comparison.PRETRAINED_DIR / "cpu" / f"{name}.pt"
        assert weights.exists() and weights.stat().st_size < 200_000, name


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_a_committed_record_is_reproduced_by_its_weights(path):
    """The record's final KL is what the shipped weights give on the same held-out sequences."""
    import json
    record = json.loads(path.read_text())
    model = comparison.load_pretrained(record["arch"], record["task"], record["seed"])
    assert not model.training and next(model.parameters()).device.type == "cpu"
    task = wind_tunnels.wind_tunnel(record["task"])
    assert record["task_settings"] == repr(task) and record["n_params"] == models.count_parameters(model)
    for label, metrics in record["final"].items():
        horizon = {} if label == "trained" else {k: int(v) for k, v in [label.split("=")]}
        again = evaluate(model, task, n_seqs=record["n_eval"], seed=record["eval_seed"], **horizon)
        # the same numbers up to float32 summation order (another CPU may sum in another order)
        assert again["kl_bits"] == pytest.approx(metrics["kl_bits"], rel=1e-3, abs=1e-6), label
        assert again["accuracy"] == pytest.approx(metrics["accuracy"], abs=2e-3), label
    curve = record["curve"]
    assert len(curve["steps"]) == len(curve["eval_kl_bits"]) >= 20 and curve["steps"][0] == 0
    assert record["steps"] == comparison.CONVERGED_STEPS["cpu"][record["task"]]


def test_load_pretrained_names_the_script_when_files_are_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_wind_tunnels.py --size cpu --archs lstm --tasks hmm --seeds 7"):
        comparison.load_pretrained("lstm", "hmm", 7)
    with pytest.raises(FileNotFoundError, match="RETRAIN"):
        comparison.load_record("mlp", "recall", 0, directory=tmp_path)


def test_train_converged_records_its_learning_curve_and_reloads(tmp_path):
    model, record = comparison.train_converged("lstm", "hmm", 1, steps=80, progress=False)
    assert record["recipe"]["schedule"] == "cosine" and record["steps"] == 80
    assert set(record["final"]) == {"trained", "K=18", "K=30"}       # Paper I's 1.5K and 2.5K
    assert record["curve"]["steps"][:2] == [0, 2] and len(record["curve"]["loss"]) == 80
    assert record["curve"]["eval_kl_bits"][-1] < record["curve"]["eval_kl_bits"][0]
    comparison.save_pretrained(model, record, tmp_path)
    again = comparison.load_pretrained("lstm", "hmm", 1, directory=tmp_path)
    assert_same_weights(model, again)


def test_longer_horizons_follow_paper_one_ratios():
    assert comparison.longer_horizons("hmm") == [{"K": 18}, {"K": 30}]
    assert comparison.longer_horizons(wind_tunnels.HMMTask.paper()) == [{"K": 30}, {"K": 50}]
    assert comparison.longer_horizons("recall") == []
    assert comparison.model_sizes_for("transformer", "hmm")["max_len"] >= wind_tunnels.HMMTask().prefix_len + 30


# ----------------------------------------------------------------------------- variants: the size ladder

def test_every_variant_names_real_runs_and_sizes():
    for name, v in comparison.VARIANTS.items():
        assert v.about and v.runs, name
        for arch, task in v.runs:
            assert arch in models.ARCHITECTURES and task in comparison.TASKS, name
            assert comparison.variant_seeds(name, arch), name
            for key in v.sizes.get(arch, {}):
                assert key in models.default_sizes(arch) or key == "stream_start", (name, key)
        assert set(v.sizes) <= {a for a, _ in v.runs}, name


def test_variant_task_steps_and_recipe():
    recall = comparison.variant_task("recall", "recall20")
    assert (recall.n_keys, recall.n_values, recall.n_pairs, recall.noise) == (20, 20, 40, 0.0)
    assert comparison.variant_task("recall") .n_keys == 6
    assert comparison.variant_steps("bijection", "no-wd-2x") == 2 * comparison.CONVERGED_STEPS["cpu"]["bijection"]
    assert comparison.variant_steps("hmm", "long") == 30_000
    assert comparison.variant_recipe("no-wd-2x")["weight_decay"] == 0.0
    assert comparison.variant_recipe(None) == comparison.RECIPE
    assert comparison.VARIANTS["stream"].sizes["transformer"]["stream_start"] == wind_tunnels.HMMTask().prefix_len
    with pytest.raises(ValueError, match="variant"):
        comparison.load_record("transformer", "hmm", 0, variant="d1000")


def test_a_variant_trains_saves_into_its_folder_and_reloads(tmp_path):
    model, record = comparison.train_converged("transformer", "hmm", 0, steps=30, progress=False, variant="stream")
    assert record["variant"] == "stream" and record["model_sizes"]["stream_start"] == 18
    weights, meta = comparison.save_pretrained(model, record, tmp_path)
    again = comparison.load_pretrained("transformer", "hmm", 0, variant="stream", directory=tmp_path)
    assert_same_weights(model, again)
    with pytest.raises(FileNotFoundError, match="--variants d48"):
        comparison.load_pretrained("transformer", "hmm", 0, variant="d48", directory=tmp_path / "none")


def test_measure_run_reports_errors_their_sign_and_the_geometry():
    task = wind_tunnels.wind_tunnel("recall")
    model = models.build("transformer", task.vocab_size, task.n_classes, **comparison.model_sizes_for("transformer", task))
    m = comparison.measure_run(model, task, n_seqs=64)
    assert m["entropy_error_bits"] >= abs(m["entropy_bias_bits"]) and m["kl_bits"] > 0
    g = m["geometry"]
    assert g["d_head"] == 12 and len(g["attention_entropy_bits"]) == 2 and len(g["pc1_share_heads"]) == 2
    assert set(g["key_groups"]) == {"keys", "values"} and g["key_groups"]["keys"]["n"] == task.n_keys
    assert 0 < g["pc1_share_residual"] <= 1
    assert "geometry" not in comparison.measure_run(models.build("lstm", task.vocab_size, task.n_classes), task, n_seqs=8)


def test_cost_estimate_counts_the_parameters_it_would_train():
    c = comparison.cost_estimate("transformer", "bijection", "cpu")
    task = wind_tunnels.wind_tunnel("bijection")
    real = models.build("transformer", task.vocab_size, task.n_classes, **comparison.model_sizes_for("transformer", task))
    assert c["n_params"] == models.count_parameters(real) and c["steps"] == 3000
    assert c["tflop"] == pytest.approx(6 * c["n_params"] * c["tokens"] / 1e12)
    paper = comparison.cost_estimate("transformer", "hmm", "paper", seeds=3)
    assert paper["n_params"] > 2_000_000 and paper["gpu_hours"] > 3 * comparison.cost_estimate("transformer", "hmm")["gpu_hours"] - 1e-9


SHIPPED_VARIANTS = [(v, a, t, s) for v, runs in comparison.pretrained_variants().items() for a, t, s, w in runs if w]


def test_the_ladder_ships_and_stays_small():
    shipped = comparison.pretrained_variants()
    for name in ("d48", "d96", "d96-l4", "d88", "d176", "long", "stream", "no-wd-2x", "recall20"):
        assert name in shipped, f"variant {name} has no record; run scripts/train_wind_tunnels.py --variants {name}"
    total = sum(p.stat().st_size for p in comparison.PRETRAINED_DIR.rglob("*") if p.is_file())
    assert total < 15e6, f"package data {total / 1e6:.1f} MB"
    for name, runs in shipped.items():  # what does not ship its weights has its measurements
        for arch, task, seed, has in runs:
            assert has or "measured" in comparison.load_record(arch, task, seed, name), (name, arch, task, seed)


@pytest.mark.parametrize("variant,arch,task,seed", SHIPPED_VARIANTS, ids=lambda x: str(x))
def test_a_shipped_variant_reproduces_its_record_on_sequences_the_course_never_uses(variant, arch, task, seed):
    """A held-out evaluation (seed 777, used nowhere else) gives the record's KL within 20%, and
    the weights give the record's measurements exactly where the record has them."""
    record = comparison.load_record(arch, task, seed, variant)
    model = comparison.load_pretrained(arch, task, seed, variant)
    tunnel = comparison.variant_task(task, variant)
    fresh = evaluate(model, tunnel, n_seqs=record["n_eval"], seed=777)["kl_bits"]
    assert fresh == pytest.approx(record["final"]["trained"]["kl_bits"], rel=0.2)
    if "measured" in record:
        again = comparison.measure_run(model, tunnel)
        assert again["kl_bits"] == pytest.approx(record["measured"]["kl_bits"], rel=1e-3)

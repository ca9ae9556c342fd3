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
    (lambda: summarise([{"arch": "lstm", "kl_bits": 1.0}], "kl_bits", by=("nope",)), "by"),
    (lambda: format_table([{"arch": "a", "task": "t", "horizon": "trained", "entropy_error_bits": 1.0}], digits=-1),
     "digits"),
    (lambda: evaluate("model", "bijection", n_seqs=2), "model"),
    (lambda: comparison.task_loss(models.build("lstm", 16, 8, d_model=4), "batch"), "batch"),
    (lambda: comparison.task_loss("model", wind_tunnels.wind_tunnel("bijection").sample(2, seed=0)), "model"),
    (lambda: comparison.score(models.build("lstm", 16, 8, d_model=4), "bijection", horizons="L=2", n_seqs=2),
     "horizons"),
    (lambda: comparison.model_sizes_for("transformer", "hmm", overrides="d_model=4"), "overrides"),
    (lambda: comparison.model_sizes_for("transformer", "hmm", horizons={"K": 30}), "horizons"),
    (lambda: compare(["lstm"], ["hmm"], [], 1), "seeds"),
    (lambda: compare(["lstm"], ["hmm"], 0, 1), "seeds"),
    (lambda: compare(["lstm"], ["hmm"], [0, 0], 1), r"seeds: expected one or more distinct ints"),
    (lambda: compare(["lstm"], ["hmm"], [0], 1, horizons={"hmn": [{"K": 30}]}), r"horizons: expected keys among \['hmm'\]"),
    (lambda: compare(["lstm"], ["hmm"], [0], 1, model_sizes={"lstn": {"d_model": 8}}), r"model_sizes: .*\['lstn'\]"),
    (lambda: comparison.horizon_label("K=3"), "horizon"),
    (lambda: comparison.run_name("lstm", "hmm", -1), "seed"),
])
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("arch", models.ARCHITECTURES)
def test_paper_sizes_train_one_step_on_paper_tasks(arch):
    """The SIZE = "paper" route of chapter 8 builds and steps (one tiny batch; the real run is GPU work)."""
    rows = compare([arch], ["hmm"], seeds=[0], steps=1, size="paper", batch_size=2, n_eval=2,
                   horizons={"hmm": [{"K": 50}]})
    assert 2.5e6 <= rows[0]["n_params"] <= 7.5e6  # Paper I: 2.7M-7.4M
    assert [r["horizon"] for r in rows] == ["trained", "K=50"]
    assert all(math.isfinite(r["kl_bits"]) for r in rows)


def test_run_name_and_horizon_label():
    assert comparison.run_name("lstm", "hmm", 2) == "lstm-hmm-seed2"
    assert comparison.horizon_label({}) == "trained" and comparison.horizon_label({"K": 30}) == "K=30"


def test_model_sizes_cover_the_test_horizons():
    hmm = wind_tunnels.wind_tunnel("hmm")
    longest = hmm.prefix_len + hmm.test_horizons()[-1]["K"]
    assert comparison.model_sizes_for("transformer", "hmm")["max_len"] >= longest
    assert comparison.model_sizes_for("transformer", "hmm", horizons=[{"K": 200}])["max_len"] >= hmm.prefix_len + 200
    assert comparison.model_sizes_for("transformer", "hmm", overrides={"max_len": 40})["max_len"] == 40
    assert "max_len" not in comparison.model_sizes_for("lstm", "hmm")


def test_training_draws_the_data_stream_of_wind_tunnels_data_seed(monkeypatch):
    """train_on_task's batch at step t is task.sample(batch_size, seed=data_seed(seed, t))."""
    task = wind_tunnels.wind_tunnel("bijection")
    seen = []
    original = type(task).sample

    def spy(self, batch_size, seed=None, **kw):
        seen.append(seed)
        return original(self, batch_size, seed=seed, **kw)

    monkeypatch.setattr(type(task), "sample", spy)
    train_on_task("mlp", task, 3, seed=5, progress=False, **TINY)
    assert seen == [wind_tunnels.data_seed(5, step) for step in range(3)]


def test_summarise_says_when_the_rows_hold_no_number():
    with pytest.raises(ValueError, match=r"metric: .*rows\[0\] has none among \['arch', 'horizon', 'task'\]"):
        summarise([{"arch": "lstm", "task": "hmm", "horizon": "trained"}])


@pytest.mark.parametrize("kwargs, match", [
    ({"keep_models": "yes"}, "keep_models: expected True or False, got 'yes'"),
    ({"horizons": [{"L": 3}]}, r"horizons: expected a mapping \(a dict\) \(\{task: \[horizon, ...\]\}"),
])
def test_compare_names_a_flag_and_horizons_of_the_wrong_kind(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compare(["lstm"], ["bijection"], [0], 2, n_eval=4, **kwargs)

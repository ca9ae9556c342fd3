"""The training loop of bayesattn_lite.train: devices, seeds, parameter groups, history,
the divergence guard and resumable checkpoints."""

import math
import os
import random

import numpy as np
import pytest
import torch

from bayesattn_lite import attention
from bayesattn_lite.attention import AttentionHead
from bayesattn_lite import train as train_module
from bayesattn_lite.train import (GROUPS, History, Recipe, TrainingDiverged, lr_factor, param_groups, pick_device,
                                  seed_everything, train)


def make_head(dtype=torch.float32):
    return AttentionHead(d_x=6, d_k=4, d_v=5, n_classes=3, std=0.3, seed=0, dtype=dtype)


def fixed_task(dtype=torch.float32):
    """A learnable task: the class of each position is the argmax of its first 3 features."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 5, 6, generator=gen, dtype=dtype)
    return x, x[..., :3].argmax(-1)


def fixed_loss(task):
    x, y = task

    def loss_fn(model, step):
        return attention.loss(x, y, model.params(), model.causal)
    return loss_fn


def random_batch_loss(model, step):
    """Fresh data from the global torch RNG each step, so resuming must restore the RNG."""
    x = torch.randn(4, 5, 6)
    y = torch.randint(0, 3, (4, 5))
    loss = attention.loss(x, y, model.params(), model.causal)
    return loss, {"x_mean": x.mean(), "noise": float(np.random.rand()) + random.random()}


# ----------------------------------------------------------------------------- devices, seeds

@pytest.mark.skipif(torch.cuda.is_available(), reason="the default is cuda on a machine with one")
def test_pick_device_defaults_to_cpu_and_refuses_missing_cuda():
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ValueError, match="CUDA is not available"):
        pick_device("cuda")


def test_usable_cpus_counts_a_cpu_quota(tmp_path, monkeypatch):
    """A container limited to 1.5 CPUs on a larger machine may use 2 cores, not os.cpu_count()."""
    allowed = len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    monkeypatch.setattr(train_module, "CPU_MAX", str(quota))
    for text, expected in (("150000 100000\n", min(allowed, 2)), ("max 100000\n", allowed), ("garbled", allowed),
                           ("50000 100000", 1)):
        quota.write_text(text)
        assert train_module.usable_cpus() == expected, text
    quota.unlink()   # no cgroup v2 file: the cores it may run on
    assert train_module.usable_cpus() == allowed


def test_seed_everything_reproduces_and_differs():
    def draws(seed):
        seed_everything(seed)
        return torch.randn(5), np.random.rand(5), random.random()

    a, b, c = draws(3), draws(3), draws(4)
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    assert not torch.equal(a[0], c[0]) and not np.array_equal(a[1], c[1]) and a[2] != c[2]
    for bad in (-1, 1.5, "3", True, 2**32):
        with pytest.raises(ValueError, match="seed"):
            seed_everything(bad)
    seed_everything(np.int64(3)), seed_everything(torch.tensor(3))  # numpy and 0-d scalars are seeds too


# ----------------------------------------------------------------------------- parameter groups

def test_param_groups_em_like_schedule():
    groups = param_groups(make_head(), 0.01, {"W_V": 10.0})
    lrs = {name: g["lr"] for g in groups for name in g["name"].split("+")}
    assert lrs == {"W_Q": 0.01, "W_K": 0.01, "W_O": 0.01, "W_V": pytest.approx(0.1)}
    assert [g["name"] for g in groups] == ["W_Q+W_K+W_O", "W_V"]
    routing = param_groups(make_head(), 0.1, dict.fromkeys(GROUPS["routing"], 0.1))
    assert [(g["name"], g["lr"]) for g in routing] == [("W_Q+W_K", pytest.approx(0.01)), ("W_V+W_O", 0.1)]


def test_param_groups_first_matching_pattern_wins():
    groups = param_groups(make_head(), 1.0, {"W_V": 2.0, "W_*": 3.0})
    assert [(g["name"], g["lr"]) for g in groups] == [("W_Q+W_K+W_O", 3.0), ("W_V", 2.0)]


def test_one_sgd_step_with_em_schedule_moves_values_ten_times_faster():
    head, (x, y) = make_head(torch.float64), fixed_task(torch.float64)
    before = {name: W.detach().clone() for name, W in head.params().items()}
    grads = attention.gradients(x, y, before)  # closed form: independent of the loop's autograd
    history = train(head, fixed_loss((x, y)), Recipe(1, lr=0.01, lr_multipliers={"W_V": 10.0}), progress=False)
    for name, W in head.params().items():
        rate = 0.1 if name == "W_V" else 0.01
        torch.testing.assert_close(W.detach() - before[name], -rate * grads[name], rtol=1e-9, atol=1e-15)
    total = torch.sqrt(sum((grads[n] ** 2).sum() for n in attention.PARAM_NAMES)).item()
    assert history["grad_norm"][0] == pytest.approx(total, rel=1e-9)


def test_param_groups_rejects_bad_patterns_and_rates():
    with pytest.raises(ValueError, match=r"'W_X'.*W_Q"):
        param_groups(make_head(), 0.1, {"W_X": 2.0})
    for lr, mult in ((0.0, None), (float("nan"), None), (0.1, {"W_V": -1.0}), (0.1, {"W_V": float("inf")})):
        with pytest.raises(ValueError):
            param_groups(make_head(), lr, mult)


# ----------------------------------------------------------------------------- training and history

@pytest.mark.parametrize("optimizer, lr", [("sgd", 1.0), ("adam", 0.05)])
def test_training_lowers_the_loss(optimizer, lr):
    history = train(make_head(), fixed_loss(fixed_task()), Recipe(150, optimizer=optimizer, lr=lr), progress=False)
    assert history["loss"][-1] < 0.7 * history["loss"][0]


def test_history_records_every_step_with_metrics():
    history = train(make_head(), random_batch_loss, Recipe(6), progress=False, seed=0)
    assert len(history) == 6 and history.steps.tolist() == list(range(6))
    assert history.keys() == ["loss", "x_mean", "noise", "grad_norm"]
    assert history["x_mean"].dtype == np.float64 and np.all(history["grad_norm"] > 0)
    assert history.last("loss") == history["loss"][-1]
    assert History.from_dict(history.to_dict()).to_dict() == history.to_dict()
    with pytest.raises(KeyError, match="accuracy"):
        history["accuracy"]


def test_log_every():
    history = train(make_head(), random_batch_loss, Recipe(23), log_every=5, progress=False)
    assert history.steps.tolist() == [0, 5, 10, 15, 20]


def test_history_fills_late_metrics_with_nan():
    h = History()
    h.append(0, loss=1.0)
    h.append(1, loss=0.5, acc=torch.tensor(0.25))
    assert h["acc"][1] == 0.25 and np.isnan(h["acc"][0])


def test_progress_bar_on_and_off(capsys, monkeypatch):
    monkeypatch.delenv("BAYESATTN_PROGRESS", raising=False)
    train(make_head(), random_batch_loss, Recipe(3), progress=False, desc="quietrun")
    assert capsys.readouterr().err == ""
    train(make_head(), random_batch_loss, Recipe(3), progress=True, desc="loudrun")
    assert "loudrun" in capsys.readouterr().err
    monkeypatch.setenv("BAYESATTN_PROGRESS", "0")  # what CI sets
    train(make_head(), random_batch_loss, Recipe(3), progress=True, desc="cirun")
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- divergence guard

def test_huge_learning_rate_diverges_with_the_step_named():
    with pytest.raises(TrainingDiverged, match=r"^step [1-9]\d*: .*lr=1e\+06"):
        train(make_head(), fixed_loss(fixed_task()), Recipe(50, lr=1e6), progress=False)


def test_nan_loss_names_the_step(tmp_path):
    def loss_fn(model, step):
        loss = random_batch_loss(model, step)[0]
        return loss * float("nan") if step == 4 else loss

    path = tmp_path / "run.pt"
    with pytest.raises(TrainingDiverged, match=r"^step 4: loss is nan"):
        train(make_head(), loss_fn, Recipe(10), checkpoint_path=path, checkpoint_every=2, progress=False)
    assert torch.load(path, weights_only=True)["step"] == 4  # the last good checkpoint stays


def test_inf_gradient_names_the_parameter():
    head = make_head()
    head.W_K.register_hook(lambda g: g * float("inf"))
    with pytest.raises(TrainingDiverged, match=r"^step 0: the gradient of W_K contains nan/inf"):
        train(head, fixed_loss(fixed_task()), Recipe(5), progress=False)


# ----------------------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_resume_equals_uninterrupted_run(tmp_path, optimizer):
    straight_head = make_head()
    straight = train(straight_head, random_batch_loss, Recipe(30, optimizer=optimizer), seed=7, progress=False)

    path = tmp_path / "ckpt" / "run.pt"
    train(make_head(), random_batch_loss, Recipe(12, optimizer=optimizer), seed=7, progress=False, checkpoint_path=path, checkpoint_every=5)
    random.random(), np.random.rand(), torch.randn(3)  # disturb every RNG between the two runs
    resumed_head = AttentionHead(d_x=6, d_k=4, d_v=5, n_classes=3, seed=99)  # other weights: all must load
    resumed = train(resumed_head, random_batch_loss, Recipe(30, optimizer=optimizer), seed=7, progress=False, checkpoint_path=path, checkpoint_every=5)

    assert resumed.to_dict() == straight.to_dict()
    for name, W in straight_head.state_dict().items():
        assert torch.equal(resumed_head.state_dict()[name], W), name
    assert torch.load(path, weights_only=True)["step"] == 30


def test_keyboard_interrupt_saves_the_last_completed_step(tmp_path):
    def loss_fn(model, step):
        out = random_batch_loss(model, step)  # draw first: the checkpoint must not keep these draws
        if step == 7:
            raise KeyboardInterrupt
        return out

    path = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        train(make_head(), loss_fn, Recipe(20), seed=1, checkpoint_path=path, progress=False)
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["step"] == 7 and ckpt["history"]["steps"] == list(range(7))

    straight = train(make_head(), random_batch_loss, Recipe(20), seed=1, progress=False)
    resumed = train(make_head(), random_batch_loss, Recipe(20), checkpoint_path=path, progress=False)
    assert resumed.to_dict() == straight.to_dict()


def test_checkpoint_of_another_model_is_refused(tmp_path):
    path = tmp_path / "run.pt"
    train(make_head(), random_batch_loss, Recipe(2), checkpoint_path=path, progress=False)
    other = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="another model"):
        train(other, lambda m, s: m(torch.ones(2)).sum(), Recipe(4), checkpoint_path=path, progress=False)


# ----------------------------------------------------------------------------- the recipe: schedule, clipping, decay

def cosine_with_warmup(step, steps, warmup):
    """The schedule written out independently of the package: linear warm-up, then half a cosine."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))


def test_the_rate_at_every_step_is_the_formula():
    history = train(make_head(), random_batch_loss, Recipe(40, optimizer="adamw", lr=0.02, schedule="cosine", warmup=4, lr_multipliers={"W_V": 10.0}), seed=0, progress=False)
    expected = [0.02 * cosine_with_warmup(s, 40, 4) for s in range(40)]
    np.testing.assert_allclose(history["lr"], expected, rtol=1e-12)
    assert history["lr"][3] == pytest.approx(0.02) and history["lr"][-1] < 1e-4  # peak after warm-up, ~0 at the end
    # constant with a warm-up: the ramp, then flat
    ramp = train(make_head(), random_batch_loss, Recipe(10, lr=0.1, warmup=5), progress=False)
    np.testing.assert_allclose(ramp["lr"], [0.1 * min(1, (s + 1) / 5) for s in range(10)], rtol=1e-12)
    # the plain constant rate of chapters 1-6 logs no rate: their histories are unchanged
    assert "lr" not in train(make_head(), random_batch_loss, Recipe(3), progress=False).keys()


def test_every_group_is_scaled_by_the_same_factor(monkeypatch):
    made = []  # the optimizer the loop makes, to read every group's rate before each update
    make = train_module._make_optimizer
    monkeypatch.setattr(train_module, "_make_optimizer", lambda model, recipe: made.append(make(model, recipe)) or made[0])
    seen = []
    train(make_head(), random_batch_loss, Recipe(6, lr=0.01, lr_multipliers={"W_V": 10.0}, schedule="cosine", warmup=2),
          on_step=lambda model, step: seen.append(sorted(g["lr"] for g in made[0].param_groups)), progress=False)
    for step, lrs in enumerate(seen):
        factor = cosine_with_warmup(step, 6, 2)
        assert lrs == pytest.approx(sorted([0.01 * factor, 0.1 * factor]))


def test_lr_factor_names_a_bad_schedule():
    assert lr_factor(0, 10, "cosine") == 1.0
    with pytest.raises(ValueError, match="constant"):
        lr_factor(0, 10, "linear")


def test_clipping_bounds_the_step():
    # plain SGD: a clipped step moves the weights by exactly lr * max_norm when the gradient is larger
    head = make_head()
    before = torch.cat([p.detach().flatten().clone() for p in head.parameters()])
    history = train(head, fixed_loss(fixed_task()), Recipe(1, lr=0.5, clip_grad_norm=1e-3), progress=False)
    after = torch.cat([p.detach().flatten() for p in head.parameters()])
    assert history["grad_norm"][0] > 1e-3  # the logged norm is the one before clipping
    assert torch.linalg.vector_norm(after - before).item() == pytest.approx(0.5 * 1e-3, rel=1e-3)


def test_weight_decay_shrinks_weights_without_a_gradient():
    head = make_head()
    W_O = head.W_O.detach().clone()
    # W_O's gradient is zero: only the decay moves it (AdamW: W <- W (1 - lr * wd))
    train(head, lambda m, s: (m.W_Q ** 2).sum() + 0 * m.W_O.sum(), Recipe(1, optimizer="adamw", lr=0.1, weight_decay=0.5), progress=False)
    torch.testing.assert_close(head.W_O.detach(), W_O * (1 - 0.1 * 0.5))


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_resume_with_the_recipe_equals_uninterrupted_run(tmp_path, optimizer):
    recipe = Recipe(25, optimizer=optimizer, lr=0.05, schedule="cosine", warmup=3, clip_grad_norm=0.5, weight_decay=0.01)
    straight_head = make_head()
    straight = train(straight_head, random_batch_loss, recipe, seed=5, progress=False)
    path = tmp_path / "run.pt"
    train(make_head(), random_batch_loss, recipe, seed=5, checkpoint_path=path, progress=False)
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["recipe"]["schedule"] == "cosine" and ckpt["recipe"]["steps"] == 25
    first = tmp_path / "first.pt"

    def stop_at_11(model, step):  # the full run above, now cut short and resumed
        if step == 11:
            raise KeyboardInterrupt
        return random_batch_loss(model, step)
    with pytest.raises(KeyboardInterrupt):
        train(make_head(), stop_at_11, recipe, seed=5, checkpoint_path=first, progress=False)
    resumed_head = make_head()
    resumed = train(resumed_head, random_batch_loss, recipe, seed=5, checkpoint_path=first, progress=False)
    assert resumed.to_dict() == straight.to_dict()
    for name, W in straight_head.state_dict().items():
        assert torch.equal(resumed_head.state_dict()[name], W), name


@pytest.mark.parametrize("change, named", [
    ({"lr": 0.1}, "lr"),
    ({"schedule": "constant"}, "schedule"),
    ({"steps": 30}, "steps"),          # a cosine schedule depends on the length of the run
    ({"clip_grad_norm": None}, "clip_grad_norm"),
    ({"weight_decay": 0.0}, "weight_decay"),
    ({"lr_multipliers": {"W_V": 10.0}}, "lr_multipliers"),
    ({"optimizer": "adam"}, "optimizer"),
])
def test_resume_with_another_recipe_is_refused(tmp_path, change, named):
    recipe = dict(steps=20, optimizer="adamw", lr=0.05, schedule="cosine", warmup=2, clip_grad_norm=0.5,
                  weight_decay=0.01)
    path = tmp_path / "run.pt"
    train(make_head(), random_batch_loss, Recipe(**recipe), checkpoint_path=path, progress=False)
    with pytest.raises(ValueError, match=f"written by another run.*{named}"):
        train(make_head(), random_batch_loss, Recipe(**{**recipe, **change}), checkpoint_path=path, progress=False)


def test_a_constant_run_still_resumes_to_more_steps(tmp_path):
    path = tmp_path / "run.pt"
    train(make_head(), random_batch_loss, Recipe(5), seed=2, checkpoint_path=path, progress=False)
    history = train(make_head(), random_batch_loss, Recipe(9), seed=2, checkpoint_path=path, progress=False)
    assert len(history) == 9


def test_a_checkpoint_of_another_size_is_refused(tmp_path):
    path = tmp_path / "run.pt"
    train(make_head(), random_batch_loss, Recipe(2), checkpoint_path=path, progress=False)
    bigger = AttentionHead(d_x=6, d_k=7, d_v=5, n_classes=3, seed=0)
    with pytest.raises(ValueError, match="another size"):
        train(bigger, random_batch_loss, Recipe(4), checkpoint_path=path, progress=False)


# ----------------------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("kwargs, match", [
    ({"steps": -1}, "steps"),
    ({"steps": 2.5}, "steps"),
    ({"lr": 0}, "lr"),
    ({"lr": float("inf")}, "lr"),
    ({"optimizer": "rmsprop"}, "sgd"),
    ({"schedule": "step"}, "schedule"),
    ({"warmup": -1}, "warmup"),
    ({"clip_grad_norm": 0}, "clip_grad_norm"),
    ({"weight_decay": -0.1}, "weight_decay"),
    ({"weight_decay": float("nan")}, "weight_decay"),
    ({"lr_multipliers": ["W_V"]}, "lr_multipliers"),
    ({"lr_multipliers": {"W_V": -1.0}}, "lr_multipliers"),
])
def test_a_bad_recipe_is_refused_when_it_is_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Recipe(**{"steps": 3, **kwargs})


def test_bad_run_options_raise():
    with pytest.raises(ValueError, match="log_every"):
        train(make_head(), random_batch_loss, Recipe(3), log_every=0, progress=False)
    with pytest.raises(ValueError, match="recipe: expected a train.Recipe"):
        train(make_head(), random_batch_loss, 3, progress=False)


def test_a_factor_of_zero_freezes_a_matrix():
    head = make_head()
    before = {n: W.detach().clone() for n, W in head.params().items()}
    train(head, fixed_loss(fixed_task()), Recipe(3, lr=0.1, lr_multipliers={"W_Q": 0.0, "W_K": 0.0}), progress=False)
    assert torch.equal(head.W_Q, before["W_Q"]) and torch.equal(head.W_K, before["W_K"])
    assert not torch.equal(head.W_V, before["W_V"])


def test_on_step_sees_the_gradients_before_the_update_and_logs_what_it_returns():
    seen = []

    def on_step(model, step):
        seen.append((step, model.W_V.grad.clone(), model.W_V.detach().clone()))
        return {"grad_sq_W_V": model.W_V.grad.pow(2).sum()}

    head = make_head()
    history = train(head, fixed_loss(fixed_task()), Recipe(4, lr=0.1), log_every=2, on_step=on_step, progress=False)
    assert [s for s, _, _ in seen] == [0, 1, 2, 3]
    step1, grad1, before1 = seen[1]
    torch.testing.assert_close(seen[2][2], before1 - 0.1 * grad1)  # the update came after the call
    np.testing.assert_allclose(history["grad_sq_W_V"], [seen[0][1].pow(2).sum().item(), seen[2][1].pow(2).sum().item()],
                               rtol=1e-6)


def test_a_checkpoint_past_the_recipes_steps_is_refused(tmp_path):
    """Resumed with fewer steps than it has, a run used to come back as the longer run."""
    path = tmp_path / "run.pt"
    train(make_head(), random_batch_loss, Recipe(6), seed=2, checkpoint_path=path, progress=False)
    with pytest.raises(ValueError, match=r"at most recipe.steps=4 steps .* got 6 steps done"):
        train(make_head(), random_batch_loss, Recipe(4), seed=2, checkpoint_path=path, progress=False)


@pytest.mark.parametrize("returned, message", [
    ([1.0], r"on_step: expected a function returning a dict of numbers or None, got a list at step 0"),
    ({"grad_norm": 1.0}, r"without the run's own keys .* got keys \['grad_norm'\] at step 0")])
def test_what_on_step_returns_is_checked_where_it_is_read(returned, message):
    with pytest.raises(ValueError, match=message):
        train(make_head(), random_batch_loss, Recipe(2), on_step=lambda model, step: returned, progress=False)


def test_a_warm_up_as_long_as_a_cosine_run_is_refused():
    with pytest.raises(ValueError, match=r"warmup: expected fewer steps than steps=10 \(the cosine schedule"):
        Recipe(10, schedule="cosine", warmup=10)
    assert Recipe(10, schedule="cosine", warmup=9).warmup == 9 and Recipe(10, warmup=10).warmup == 10


def test_a_nan_metric_of_loss_fn_stops_the_run_naming_it():
    def nan_accuracy(model, step):
        loss, _ = random_batch_loss(model, step)
        return loss, {"acc": math.nan if step == 2 else 0.5}

    with pytest.raises(TrainingDiverged, match="step 2: loss_fn's metric 'acc' is nan"):
        train(make_head(), nan_accuracy, Recipe(5), progress=False)


def test_from_dict_names_a_value_that_is_not_a_number():
    with pytest.raises(ValueError, match=r"metric 'loss\[1\]': expected a number.*got 'a'"):
        History.from_dict({"steps": [0, 1], "metrics": {"loss": [1.0, "a"]}})


def test_rates_refuses_no_names():
    with pytest.raises(ValueError, match=r"names: expected a non-empty list of matrix names, .* got \[\]"):
        train_module.rates(0.01, names=[])

"""bayesattn_lite._validate, and the public API's answer to bad input.

The table below tries several hundred bad inputs on the public functions, the way a new user's
mistakes look: a count of 0 or -1, a rate of nan, a string for a number, a tensor of the wrong
shape or with NaN in it, an unknown name, a damaged or mismatched checkpoint. Each must raise a
ValueError or TypeError whose message says what was expected ("expected ..."), never a deep torch
error, and never return a result as if nothing were wrong. Valid numpy and 0-d tensor scalars
must be accepted wherever a Python number is.

    python -m pytest tests/test_validate.py -s -k report     # prints the counts by category
"""

import collections
import math

import numpy as np
import pytest
import torch

from bayesattn_lite import (_validate, attention, batched, checkpoints, comparison, converged, diagnostics, em,
                            experiments, models, specialisation, tasks, train, wind_tunnels)

# ----------------------------------------------------------------------------- _validate itself


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), torch.tensor(3), np.array(3)])
def test_integer_accepts_every_kind_of_int(value):
    assert _validate.integer("n", value, 1) == 3 and type(_validate.integer("n", value, 1)) is int


@pytest.mark.parametrize("value", [True, 2.0, "3", None, torch.tensor([3]), float("nan"), 0])
def test_integer_refuses_what_is_not_a_count(value):
    with pytest.raises(ValueError, match=r"^n: expected an int >= 1, got "):
        _validate.integer("n", value, 1)


@pytest.mark.parametrize("value", [0.1, np.float32(0.1), np.float64(0.1), torch.tensor(0.1), 1])
def test_positive_accepts_every_kind_of_number(value):
    assert math.isclose(_validate.positive("lr", value), 0.1 if value != 1 else 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "0.1", None, False, torch.tensor([0.1])])
def test_positive_refuses_what_is_not_a_positive_number(value):
    with pytest.raises(ValueError, match="lr: expected a positive finite number"):
        _validate.positive("lr", value)


def test_real_names_its_interval():
    with pytest.raises(ValueError, match=r"p: expected a number in \[0, 1\), got 1"):
        _validate.real("p", 1, 0, 1, high_open=True)


def test_tensor_finds_the_first_nan():
    bad = torch.zeros(2, 3)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"x: expected finite values, got 1 NaN/inf entries \(the first at index \(1, 2\)\)"):
        _validate.tensor("x", bad)


def test_shape_names_what_the_shape_must_match():
    alpha = torch.zeros(2, 6, 6)
    assert _validate.shape("advantage", np.zeros((2, 6, 6)), alpha.shape, "the shape of alpha").shape == (2, 6, 6)
    with pytest.raises(ValueError, match=r"^advantage: expected the shape of alpha \(2, 6, 6\), got \(2, 6, 5\)$"):
        _validate.shape("advantage", torch.zeros(2, 6, 5), alpha.shape, "the shape of alpha")
    with pytest.raises(ValueError, match=r"^w: expected shape \(3,\), got \(\)$"):
        _validate.shape("w", torch.tensor(1.0), (3,))


def test_same_shape_refuses_what_would_broadcast():
    a, b = _validate.same_shape("before, after", torch.ones(3), np.ones(3))
    assert a.shape == b.shape == (3,)
    with pytest.raises(ValueError, match=r"^before, after: expected the same shape, got \(3, 1\) and \(3,\)$"):
        _validate.same_shape("before, after", torch.ones(3, 1), torch.ones(3))


@pytest.mark.parametrize("bad", [np.ones(5), np.ones((1, 3)), torch.ones(2, 2, 3)])
def test_matrix_wants_enough_rows(bad):
    assert _validate.matrix("keys", torch.ones(2, 3), min_rows=2).shape == (2, 3)
    with pytest.raises(ValueError, match=r"^keys: expected shape \(n >= 2, d\), got \("):
        _validate.matrix("keys", bad, min_rows=2)


# ----------------------------------------------------------------------------- the table of bad inputs

NAN, INF = float("nan"), float("inf")
BAD_COUNTS = [0, -1, 2.5, "3", None, True, NAN]          # for an int >= 1
BAD_RATES = [0, -0.1, NAN, INF, "0.1", None, True]      # for a positive number
BAD_PROBABILITIES = [-0.1, 1.5, NAN, "0.5", None]       # for a number in [0, 1]


def _x(T=5, d=4, nan=False):
    x = torch.randn(2, T, d, generator=torch.Generator().manual_seed(0))
    if nan:
        x[0, 1, 2] = NAN
    return x


def _params(d=4, d_k=3, d_v=3, C=2):
    return attention.init_params(d, d_k, d_v, C, seed=0)


def _head():
    return attention.AttentionHead(4, 3, 3, 2)


def _loss(m, step):
    x, y = _x(), torch.zeros(2, 5, dtype=torch.long)
    return attention.loss(x, y, m.params())


def _scalar_cases(label, call, kinds):
    """One case per bad value of each named scalar argument; ``call(**{name: value})`` runs it."""
    for name, bad_values in kinds.items():
        for value in bad_values:
            yield f"{label}({name}={value!r})", "scalars", (lambda n=name, v=value: call(**{n: v}))


def _tensor_cases(label, call, name, shapes_ok, any_shape=False):
    """A list instead of a tensor, a tensor with a NaN and one with an inf, and (unless the function
    takes ``any_shape``: "any" rank, or True for any number of batch axes in front) a dimension too
    few and one too many."""
    good = shapes_ok()
    nan, inf = good.clone(), good.clone()
    nan.view(-1)[1] = NAN
    inf.view(-1)[0] = INF
    yield f"{label}({name}=list)", "tensors", lambda: call(good.tolist())
    yield f"{label}({name} with NaN)", "nan/inf", lambda: call(nan)
    yield f"{label}({name} with inf)", "nan/inf", lambda: call(inf)
    if any_shape != "any":
        yield f"{label}({name} missing a dimension)", "tensors", lambda: call(good[0])
    if not any_shape:
        yield f"{label}({name} with an extra dimension)", "tensors", lambda: call(good[None, None])


def _train_checkpoint(tmp, **recipe):
    path = tmp / "run.pt"
    train.train(_head(), _loss, train.Recipe(2), checkpoint_path=path, progress=False, **recipe)
    return path


def cases(tmp):
    """(label, category, thunk) for every bad input; ``tmp`` is a scratch folder for checkpoints."""
    # tasks
    yield from _scalar_cases("StickyMarkovChain", lambda **kw: tasks.StickyMarkovChain(**kw), {
        "n_symbols": BAD_COUNTS + [1], "d_embed": BAD_COUNTS, "self_prob": BAD_PROBABILITIES,
        "noise": BAD_RATES, "embed_seed": [-1, 2.5, "0", None, 2**64]})
    chain = tasks.StickyMarkovChain()
    yield from _scalar_cases("chain.sample", lambda **kw: chain.sample(**{"T": 10, "seed": 0, **kw}), {
        "T": BAD_COUNTS + [1], "seed": [-1, 2.5, "0", None, NAN]})
    yield from _tensor_cases("chain.posterior", chain.posterior, "x", lambda: chain.sample(10, 0)[0], any_shape="any")
    yield "chain.posterior(x of another width)", "tensors", lambda: chain.posterior(torch.zeros(9, 7))
    yield from _scalar_cases("sources_task", lambda **kw: tasks.sources_task(**kw), {
        "n_sources": BAD_COUNTS + [1], "d_x": BAD_COUNTS + [3], "seq_len": BAD_COUNTS,
        "signal_prob": BAD_PROBABILITIES + [0], "noise": BAD_RATES, "separation": BAD_RATES,
        "seed": [-1, 2.5, "0", None]})
    sources = tasks.sources_task(d_x=6, seq_len=5)
    yield from _scalar_cases("sources.sample", lambda **kw: sources.sample(**{"n_seqs": 2, **kw}), {
        "n_seqs": BAD_COUNTS, "seed": [-1, 2.5, "0", None]})
    yield from _tensor_cases("sources.posterior", sources.posterior, "x", lambda: sources.sample(2)[0])
    x_src, _, _ = sources.sample(2)
    yield from _tensor_cases("sources.kl_bits", lambda lg: sources.kl_bits(lg, x_src), "logits",
                             lambda: torch.zeros(2, 5, 3))
    # wind tunnels
    yield from _scalar_cases("BijectionTask", lambda **kw: wind_tunnels.BijectionTask(**kw), {
        "V": BAD_COUNTS + [1], "L": [0, -1, 2.5, "3", True, NAN, 99]})
    yield from _scalar_cases("HMMTask", lambda **kw: wind_tunnels.HMMTask(**kw), {
        "S": BAD_COUNTS + [1], "O": BAD_COUNTS, "K": BAD_COUNTS, "resolution": BAD_PROBABILITIES + [0.3],
        "floor": BAD_PROBABILITIES})
    yield from _scalar_cases("AssociativeRecallTask", lambda **kw: wind_tunnels.AssociativeRecallTask(**kw), {
        "n_keys": BAD_COUNTS, "n_values": BAD_COUNTS + [1], "n_pairs": BAD_COUNTS, "noise": BAD_PROBABILITIES})
    yield from _scalar_cases("wind_tunnel", lambda **kw: wind_tunnels.wind_tunnel(**{"name": "hmm", **kw}), {
        "name": ["HMM", "nope", 3, None], "size": ["gpu", None, 1]})
    bijection = wind_tunnels.BijectionTask()
    yield from _scalar_cases("bijection.sample", lambda **kw: bijection.sample(**{"batch_size": 2, **kw}), {
        "batch_size": BAD_COUNTS, "seed": [-1, 2.5, "0"]})
    # models
    yield from _scalar_cases("Transformer", lambda **kw: models.Transformer(**{"vocab_size": 8, "n_classes": 4, **kw}), {
        "vocab_size": BAD_COUNTS + [1], "n_classes": BAD_COUNTS, "d_model": BAD_COUNTS, "n_layers": BAD_COUNTS,
        "n_heads": BAD_COUNTS + [3], "max_len": BAD_COUNTS})
    yield from _scalar_cases("SelectiveSSM", lambda **kw: models.SelectiveSSM(**{"vocab_size": 8, "n_classes": 4, **kw}), {
        "d_model": BAD_COUNTS, "n_layers": BAD_COUNTS, "d_state": BAD_COUNTS})
    yield from _scalar_cases("LSTMModel", lambda **kw: models.LSTMModel(**{"vocab_size": 8, "n_classes": 4, **kw}), {
        "d_model": BAD_COUNTS, "n_layers": BAD_COUNTS})
    yield from _scalar_cases("WindowMLP", lambda **kw: models.WindowMLP(**{"vocab_size": 8, "n_classes": 4, **kw}), {
        "window": BAD_COUNTS, "hidden": BAD_COUNTS})
    yield from _scalar_cases("models.sizes", lambda **kw: models.sizes(**{"name": "transformer", **kw}), {
        "name": ["gpt", None, 3], "scale": ["huge", None]})
    yield from _scalar_cases("models.build", lambda **kw: models.build(**{"name": "lstm", "vocab_size": 8, "n_classes": 4, **kw}), {
        "name": ["rnn", None], "d_model": BAD_COUNTS[:3]})
    model = models.Transformer(8, 4, d_model=8, n_layers=1, n_heads=2, max_len=6)
    yield "Transformer(tokens out of range)", "tensors", lambda: model(torch.full((1, 3), 9))
    yield "Transformer(tokens too long)", "tensors", lambda: model(torch.zeros(1, 7, dtype=torch.long))
    yield "Transformer(float tokens)", "tensors", lambda: model(torch.zeros(1, 3))
    yield "Transformer(tokens list)", "tensors", lambda: model([[1, 2]])
    # attention
    yield from _scalar_cases("init_params", lambda **kw: attention.init_params(**{"d_x": 4, "d_k": 3, "d_v": 3, "n_classes": 2, **kw}), {
        "d_x": BAD_COUNTS, "d_k": BAD_COUNTS, "d_v": BAD_COUNTS, "n_classes": BAD_COUNTS + [1],
        "std": BAD_RATES, "seed": [-1, "0", None]})
    params = _params()
    y = torch.zeros(2, 5, dtype=torch.long)
    # x: (*B, T, d_x), any batch axes in front (issue 38), so one too many is a batch
    yield from _tensor_cases("attention.forward", lambda x: attention.forward(x, params), "x", lambda: _x()[0], True)
    yield from _tensor_cases("attention.loss", lambda x: attention.loss(x, y[0], params), "x", lambda: _x()[0], True)
    yield "attention.forward(params missing W_V)", "tensors", lambda: attention.forward(_x(), {k: v for k, v in params.items() if k != "W_V"})
    yield "attention.forward(params with NaN)", "nan/inf", lambda: attention.forward(_x(), {**params, "W_Q": params["W_Q"] * NAN})
    yield "attention.loss(y out of range)", "tensors", lambda: attention.loss(_x(), torch.full((2, 5), 7), params)
    yield "attention.loss(y of another shape)", "tensors", lambda: attention.loss(_x(), torch.zeros(2, 4, dtype=torch.long), params)
    yield "attention.gradients(x with NaN)", "nan/inf", lambda: attention.gradients(_x(nan=True), y, params)
    yield "AttentionHead(d_x=0)", "scalars", lambda: attention.AttentionHead(0, 3, 3, 2)
    yield "AttentionHead(std=nan)", "scalars", lambda: attention.AttentionHead(4, 3, 3, 2, std=NAN)
    # train
    yield from _scalar_cases("train.Recipe", lambda **kw: train.Recipe(**{"steps": 2, **kw}), {
        "steps": [-1, 2.5, "3", None, NAN], "lr": BAD_RATES, "warmup": [-1, 2.5, "1"],
        "clip_grad_norm": [0, -1, NAN, "1"], "weight_decay": [-0.1, NAN, INF, "0"],
        "schedule": ["linear", None, 3], "optimizer": ["rmsprop", None, 3],
        "lr_multipliers": [{"W_V": -1}, {"W_V": NAN}, ["W_V"], "W_V"]})
    yield from _scalar_cases("train.train", lambda **kw: train.train(**{
        "model": _head(), "loss_fn": _loss, "recipe": train.Recipe(2), "progress": False, **kw}), {
        "log_every": BAD_COUNTS, "checkpoint_every": BAD_COUNTS, "model": [None, "head", lambda x: x],
        "loss_fn": [None, "loss", 3], "recipe": [None, 2, {"steps": 2}]})
    yield "train.train(loss reaches no parameter)", "scalars", lambda: train.train(
        _head(), lambda m, step: torch.tensor(1.0, requires_grad=True) * 2, train.Recipe(2), progress=False)
    yield "train.train(loss is a float)", "scalars", lambda: train.train(_head(), lambda m, step: 1.0, train.Recipe(2),
                                                                          progress=False)
    yield "train.train(loss of a constant)", "scalars", lambda: train.train(
        _head(), lambda m, step: torch.tensor(1.0), train.Recipe(2), progress=False)
    yield from _scalar_cases("train.em_like", lambda **kw: train.em_like(**kw), {"value_ratio": BAD_RATES})
    yield from _scalar_cases("train.rates", lambda **kw: train.rates(**{"lr": 0.1, **kw}), {
        "lr": [-0.1, NAN, "0.1", None], "lr_multipliers": [{"W_X": 2.0}, {"W_V": -1.0}, {"W_V": NAN}]})
    yield from _scalar_cases("train.lr_factor", lambda **kw: train.lr_factor(**{"step": 0, "steps": 10, **kw}), {
        "schedule": ["linear", None], "warmup": [-1, 2.5], "steps": [-1, 2.5]})
    yield from _scalar_cases("train.seed_everything", lambda **kw: train.seed_everything(**kw), {"seed": [-1, 2.5, "0", None]})
    yield from _scalar_cases("train.pick_device", lambda **kw: train.pick_device(**kw), {"device": ["tpu", 3, "cuda:x"]})
    # checkpoints of train.train
    yield "resume: a damaged file", "checkpoints", lambda: (
        (tmp / "damaged.pt").write_bytes(b"\x00garbage"),
        train.train(_head(), _loss, train.Recipe(2), checkpoint_path=tmp / "damaged.pt", progress=False))
    yield "resume: another recipe's learning rate", "checkpoints", lambda: train.train(_head(), _loss, train.Recipe(4, lr=0.05), checkpoint_path=_train_checkpoint(tmp), progress=False)
    yield "resume: other parameter groups", "checkpoints", lambda: train.train(_head(), _loss, train.Recipe(4, lr_multipliers={"W_V": 10.0}), checkpoint_path=_train_checkpoint(tmp), progress=False)
    yield "resume: another model", "checkpoints", lambda: train.train(models.LSTMModel(8, 2, d_model=4), lambda m, s: m(torch.zeros(1, 3, dtype=torch.long)).sum(), train.Recipe(4), checkpoint_path=_train_checkpoint(tmp), progress=False)
    yield "resume: a model of another size", "checkpoints", lambda: train.train(attention.AttentionHead(4, 5, 3, 2), _loss, train.Recipe(4), checkpoint_path=_train_checkpoint(tmp), progress=False)
    yield "resume: another optimizer", "checkpoints", lambda: train.train(_head(), _loss, train.Recipe(4, optimizer="adam"), checkpoint_path=_train_checkpoint(tmp), progress=False)
    yield "resume: a file that is a plain tensor", "checkpoints", lambda: (
        torch.save(torch.ones(3), tmp / "tensor.pt"),
        train.train(_head(), _loss, train.Recipe(2), checkpoint_path=tmp / "tensor.pt", progress=False))
    yield "resume: the batched loop's checkpoint", "checkpoints", lambda: train.train(_head(), _loss, train.Recipe(2), checkpoint_path=_batched_checkpoint(tmp), progress=False)
    # batched
    xb, yb = torch.randn(2, 5, 4), torch.zeros(2, 5, dtype=torch.long)
    pb = batched.stack([_params(), _params()])
    lrs = {n: 0.1 for n in attention.PARAM_NAMES}
    yield from _tensor_cases("batched.train", lambda x: batched.train(x, yb, pb, lrs, 2, progress=False), "x", lambda: xb)
    yield from _scalar_cases("batched.train", lambda **kw: batched.train(**{"x": xb, "y": yb, "params": pb, "lrs": lrs, "steps": 2, "progress": False, **kw}), {
        "steps": BAD_COUNTS, "record_every": BAD_COUNTS,
        "lrs": [{"W_Q": 0.1}, {**lrs, "W_V": -1.0}, {**lrs, "W_V": NAN}, {**lrs, "W_V": [0.1, 0.2, 0.3]}, None],
        "params": [None, {"W_Q": pb["W_Q"]}, "params"], "names": [["only one"]]})
    yield "batched.train(y out of range)", "tensors", lambda: batched.train(xb, torch.full((2, 5), 9), pb, lrs, 2, progress=False)
    yield "batched.stack(no dicts)", "tensors", lambda: batched.stack([])
    # em
    xe = torch.randn(20, 3, dtype=torch.float64)
    means = torch.randn(2, 3, dtype=torch.float64)
    yield from _tensor_cases("em.e_step", lambda x: em.e_step(x, means, 1.0), "x", lambda: xe)
    yield from _scalar_cases("em.e_step", lambda **kw: em.e_step(**{"x": xe, "means": means, "variance": 1.0, **kw}), {
        "variance": BAD_RATES, "means": [means[:, :2], None, means * NAN]})
    yield from _scalar_cases("em.fit", lambda **kw: em.fit(**{"x": xe, "n_components": 2, **kw}), {
        "n_components": BAD_COUNTS + [21], "n_iter": BAD_COUNTS, "variance": BAD_RATES, "seed": [-1, "0"]})
    # diagnostics
    yield from _tensor_cases("diagnostics.entropy", diagnostics.entropy, "probs", lambda: torch.full((3, 4), 0.25), any_shape="any")
    yield "diagnostics.entropy(rows not summing to 1)", "tensors", lambda: diagnostics.entropy(torch.full((3, 4), 0.5))
    yield "diagnostics.entropy(negative probabilities)", "tensors", lambda: diagnostics.entropy(torch.tensor([1.5, -0.5]))
    yield from _tensor_cases("diagnostics.kl_divergence", lambda p: diagnostics.kl_divergence(p, torch.full((3, 4), -1.386)), "p",
                             lambda: torch.full((3, 4), 0.25))
    alpha = torch.softmax(torch.randn(5, 5), -1)
    yield from _tensor_cases("diagnostics.attention_entropy", diagnostics.attention_entropy, "alpha", lambda: alpha, any_shape="any")
    yield "diagnostics.attention_entropy(one row)", "tensors", lambda: diagnostics.attention_entropy(alpha[0])
    yield "diagnostics.attention_entropy(rows not summing to 1)", "tensors", lambda: diagnostics.attention_entropy(alpha * 2)
    yield from _scalar_cases("diagnostics.pearson", lambda **kw: diagnostics.pearson(**{"a": np.arange(5.0), "b": np.arange(5.0), **kw}), {
        "a": [np.arange(4.0), np.array([1.0, NAN, 2, 3, 4]), "abc", None], "b": [np.arange(6.0), [1, 2, INF, 4, 5]]})
    yield from _scalar_cases("diagnostics.pca", lambda **kw: diagnostics.pca(**{"points": torch.randn(10, 4), **kw}), {
        "n_components": BAD_COUNTS + [5], "points": [torch.randn(10), torch.full((10, 4), NAN), None]})
    yield from _scalar_cases("diagnostics.settling_step", lambda **kw: diagnostics.settling_step(**{
        "steps": np.arange(5), "rates": np.ones(5), "threshold": 0.1, **kw}), {
        "threshold": [-1, NAN, "0.1"], "rates": [np.ones(4), np.ones((5, 2))]})
    yield from _scalar_cases("diagnostics.progress_step", lambda **kw: diagnostics.progress_step(**{
        "steps": np.arange(5), "curve": np.arange(5.0), "fraction": 0.9, **kw}), {
        "fraction": [0, 1.5, NAN, "0.9"], "curve": [np.arange(4.0), np.array([1.0, NAN, 1, 1, 1])]})
    # experiments
    yield from _scalar_cases("run_schedules", lambda **kw: experiments.run_schedules(**{
        "schedules": {"a": train.rates(0.01)}, "seeds": (1,), "steps": 2, "T": 20, "progress": False, **kw}), {
        "schedules": [{}, {"a": {"W_Q": 0.1}}, {"a": {**train.rates(0.01), "W_V": NAN}}, None],
        "seeds": [(), (1, 1), (-1,), ("a",)], "steps": BAD_COUNTS, "T": BAD_COUNTS + [1]})
    yield from _scalar_cases("em_vs_sgd", lambda **kw: experiments.em_vs_sgd(**{"seeds": (1,), "steps": 2, "T": 20, "progress": False, **kw}), {
        "lr": BAD_RATES, "value_ratio": BAD_RATES})
    # comparison
    yield from _scalar_cases("train_on_task", lambda **kw: comparison.train_on_task(**{
        "arch": "lstm", "task": "bijection", "steps": 1, "progress": False, **kw}), {
        "arch": ["rnn", None], "task": ["nope", None, 3], "steps": [-1, 2.5, "1", None],
        "seed": [-1, 2**20, "0"], "lr": BAD_RATES, "batch_size": BAD_COUNTS, "log_every": BAD_COUNTS,
        "eval_every": [0, 3, -10, 2.5]})
    lstm = models.LSTMModel(8, 8, d_model=4)
    yield from _scalar_cases("comparison.evaluate", lambda **kw: comparison.evaluate(**{"model": lstm, "task": "bijection", **kw}), {
        "n_seqs": BAD_COUNTS, "task": ["nope", None]})
    yield from _scalar_cases("comparison.compare", lambda **kw: comparison.compare(**{
        "archs": ["lstm"], "task_names": ["bijection"], "seeds": (0,), "steps": 1, **kw}), {
        "archs": [["rnn"], "lstm", None], "task_names": [["nope"], None], "seeds": [(-1,), ("a",)],
        "size": ["huge", None], "workers": BAD_COUNTS})
    yield from _scalar_cases("comparison.format_table", lambda **kw: comparison.format_table(**{"rows": [{"arch": "lstm", "task": "hmm", "horizon": "trained", "kl_bits": 0.1}], **kw}), {
        "rows": [[], None], "metric": ["accuracy_bits", None]})
    yield from _scalar_cases("converged.verdict", lambda **kw: converged.verdict(**{"kl_per_seed": [0.1, 0.2], "baseline_kl": 1.0, **kw}), {
        "kl_per_seed": [[], [NAN, 0.1], "0.1", None], "baseline_kl": [0, -1, NAN, "1"]})
    # specialisation
    yield from _scalar_cases("specialisation.run", lambda **kw: specialisation.run(specialisation.Config.small(**{"steps": 20, "log_every": 10, **kw})), {
        "steps": [-10, 15, 0], "lr": BAD_RATES[:4], "value_ratio": [0, -1, NAN], "n_train": BAD_COUNTS[:3],
        "d_k": BAD_COUNTS[:3], "signal_prob": [0, 1.5, NAN], "log_every": [0, -1]})
    yield "specialisation.run(cfg=dict)", "scalars", lambda: specialisation.run({"steps": 10})
    yield "specialisation.run(device='tpu')", "scalars", lambda: specialisation.run(specialisation.Config.small(steps=10, log_every=10), device="tpu")


def _batched_checkpoint(tmp):
    path = tmp / "batched.pt"
    x, y = torch.randn(1, 5, 4), torch.zeros(1, 5, dtype=torch.long)
    batched.train(x, y, batched.stack([_params()]), {n: 0.1 for n in attention.PARAM_NAMES}, 2,
                  checkpoint_path=path, progress=False)
    return path


def outcome(thunk):
    """"clear" (ValueError/TypeError that says what was expected), "unclear" (one that does not),
    "deep" (any other exception: a torch or Python internal) or "silent" (no error at all)."""
    try:
        thunk()
    except (ValueError, TypeError) as exc:
        return "clear" if "expected" in str(exc) else "unclear"
    except Exception:  # noqa: BLE001 - the point is to classify whatever comes out
        return "deep"
    return "silent"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bad-inputs")
    torch.manual_seed(0)
    out = []
    for label, category, thunk in cases(tmp):
        out.append((label, category, outcome(thunk)))
    return out


def test_report_every_bad_input_gets_a_clear_error(results, capsys):
    counts = collections.Counter(o for _, _, o in results)
    by_category = collections.defaultdict(collections.Counter)
    for _, category, o in results:
        by_category[category][o] += 1
    with capsys.disabled():
        print(f"\n{len(results)} bad inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        for category, c in sorted(by_category.items()):
            print(f"  {category:<12} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    assert len(results) >= 293
    failing = [f"{label}: {o}" for label, _, o in results if o != "clear"]
    assert not failing, f"{len(failing)} of {len(results)} bad inputs get no clear error:\n" + "\n".join(failing)


# ----------------------------------------------------------------------------- valid scalars of every kind

VALID = [
    ("StickyMarkovChain(n_symbols=np.int64)", lambda: tasks.StickyMarkovChain(n_symbols=np.int64(4))),
    ("chain.sample(T=0-d tensor, seed=np.int32)", lambda: tasks.StickyMarkovChain().sample(torch.tensor(10), np.int32(3))),
    ("sources_task(signal_prob=np.float32)", lambda: tasks.sources_task(signal_prob=np.float32(0.3))),
    ("sources.sample(n_seqs=np.int64)", lambda: tasks.sources_task().sample(np.int64(2))),
    ("init_params(d_x=np.int64, std=0-d tensor)", lambda: attention.init_params(np.int64(4), 3, 3, 2, std=torch.tensor(0.1))),
    ("Transformer(d_model=np.int64)", lambda: models.Transformer(np.int64(8), 4, d_model=np.int64(8), n_layers=1, n_heads=2)),
    ("train.train(steps=np.int64, lr=np.float64)", lambda: train.train(_head(), _loss, train.Recipe(np.int64(2), lr=np.float64(0.1)), progress=False)),
    ("train.train(lr=0-d tensor)", lambda: train.train(_head(), _loss, train.Recipe(2, lr=torch.tensor(0.1)), progress=False)),
    ("train.em_like(np.float32)", lambda: train.em_like(np.float32(3.0))),
    ("BijectionTask(V=np.int64)", lambda: wind_tunnels.BijectionTask(V=np.int64(6))),
    ("HMMTask(K=0-d tensor)", lambda: wind_tunnels.HMMTask(K=torch.tensor(5))),
    ("bijection.sample(batch_size=np.int64)", lambda: wind_tunnels.BijectionTask().sample(np.int64(2), seed=np.int64(1))),
    ("em.e_step(variance=0-d tensor)", lambda: em.e_step(torch.randn(5, 2, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64), torch.tensor(1.0))),
    ("converged.verdict(np.float64)", lambda: converged.verdict(np.array([0.1, 0.2]), np.float64(1.0))),
    ("batched.train(steps=np.int64)", lambda: batched.train(torch.randn(1, 5, 4), torch.zeros(1, 5, dtype=torch.long),
                                                            batched.stack([_params()]), {n: 0.1 for n in attention.PARAM_NAMES},
                                                            np.int64(2), progress=False)),
]


@pytest.mark.parametrize("label, call", VALID, ids=[v[0] for v in VALID])
def test_numpy_and_zero_d_scalars_are_accepted(label, call):
    call()


def test_checkpoint_errors_name_the_file_and_both_fingerprints(tmp_path):
    path = _train_checkpoint(tmp_path)
    with pytest.raises(checkpoints.CheckpointMismatch, match=r"run\.pt: expected a checkpoint of this run \(fingerprint \w{16}\), but it was written by another run \(its fingerprint \w{16}\)"):
        train.train(_head(), _loss, train.Recipe(4, lr=0.05), checkpoint_path=path, progress=False)


def test_distributions_accepts_rows_that_sum_to_1_or_0_and_names_the_rest():
    ok = torch.tensor([[0.25, 0.75], [0.0, 0.0]])
    assert _validate.distributions("p", ok) is ok
    for bad in (torch.tensor([[0.5, 0.6]]), torch.tensor([[-0.1, 1.1]])):
        with pytest.raises(ValueError, match="^p: expected probability distributions along dim -1"):
            _validate.distributions("p", bad)
    with pytest.raises(ValueError, match="^alpha: expected rows"):  # the caller's tolerance and words
        _validate.distributions("alpha", torch.tensor([[0.5, 0.5005]]), sum_tol=1e-4, expected="rows")

"""bayesattn_lite.batched: many heads at once, against the one-head closed form of
bayesattn_lite.attention, and its training loop (per-model rates, divergence, checkpoints)."""

import pytest
import torch

from bayesattn_lite import attention, batched
from bayesattn_lite.attention import PARAM_NAMES
from bayesattn_lite.train import TrainingDiverged


def problem(M=3, N=37, d_x=6, d_k=4, d_v=3, n_classes=5, std=0.7, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, d_x, generator=gen, dtype=dtype)
    y = torch.randint(0, n_classes, (M, N), generator=gen)
    params = batched.stack([attention.init_params(d_x, d_k, d_v, n_classes, std=std, seed=seed + m, dtype=dtype)
                            for m in range(M)])
    return x, y, params


def reference(x, y, params, m):
    """Model m alone, by the closed form of attention.py (itself checked against autograd)."""
    one = {name: W[m] for name, W in params.items()}
    logits = attention.forward(x[m], one)["logits"]
    p = torch.softmax(logits, -1)
    metrics = {"loss": attention.loss(x[m], y[m], one).item(),
               "entropy": -(p * torch.log(p)).sum(-1).mean().item(),
               "accuracy": (logits.argmax(-1) == y[m]).double().mean().item()}
    return metrics, attention.gradients(x[m], y[m], one)


@pytest.mark.parametrize("block_size", [1, 5, 16, 64])
def test_gradients_and_metrics_match_one_model_at_a_time(block_size):
    x, y, params = problem()
    metrics, grads = batched.forward_backward(x, y, params, block_size=block_size)
    for m in range(x.shape[0]):
        ref_metrics, ref = reference(x, y, params, m)
        for key, value in ref_metrics.items():
            assert abs(metrics[key][m].item() - value) < 1e-12, key
        for name in PARAM_NAMES:  # per model: not summed over the model axis as attention.gradients would
            assert torch.allclose(grads[name][m], ref[name], rtol=1e-10, atol=1e-14), name


def test_the_default_block_size_over_several_full_blocks():
    """N = 300 > 2 x 128: the CPU default's full blocks and a short last one, against the one-model reference."""
    x, y, params = problem(M=2, N=300)
    assert batched.default_block_size("cpu") < 300
    metrics, grads = batched.forward_backward(x, y, params)
    for m in range(x.shape[0]):
        ref_metrics, ref = reference(x, y, params, m)
        assert abs(metrics["loss"][m].item() - ref_metrics["loss"]) < 1e-12
        for name in PARAM_NAMES:
            assert torch.allclose(grads[name][m], ref[name], rtol=1e-10, atol=1e-14), name


def test_saturated_scores_take_the_exact_max_path():
    """Huge weights: the cheap score bound underflows exp, so the exact row maxima are used."""
    x, y, params = problem(std=30.0)
    assert batched._forward_backward(x, y, params, 8, True, exact_max=False) is None
    metrics, grads = batched.forward_backward(x, y, params, block_size=8)
    for m in range(x.shape[0]):
        ref_metrics, ref = reference(x, y, params, m)
        assert abs(metrics["loss"][m].item() - ref_metrics["loss"]) < 1e-9 * ref_metrics["loss"]
        scale = max(ref[name].abs().max().item() for name in PARAM_NAMES)
        for name in PARAM_NAMES:
            assert (grads[name][m] - ref[name]).abs().max().item() < 1e-10 * scale, name


def test_float32_agrees_with_float64():
    x, y, params = problem(M=2, N=300, d_x=20, d_k=10, d_v=15, n_classes=8, std=0.1)
    m64, g64 = batched.forward_backward(x, y, params)
    m32, g32 = batched.forward_backward(x.float(), y, {n: p.float() for n, p in params.items()})
    assert torch.allclose(m32["loss"].double(), m64["loss"], atol=1e-5)
    for name in PARAM_NAMES:
        assert (g32[name].double() - g64[name]).abs().max() < 1e-4 * g64[name].abs().max(), name


def test_bad_inputs_raise():
    x, y, params = problem()
    with pytest.raises(ValueError, match=r"x: expected a float tensor of shape \(M, N, d_x\)"):
        batched.forward_backward(x[0], y, params)
    with pytest.raises(ValueError, match=r"W_V: expected .* with M = 3 \(as in x\)"):
        batched.forward_backward(x, y, dict(params, W_V=params["W_V"][:2]))
    with pytest.raises(ValueError, match="y: expected an integer tensor"):
        batched.forward_backward(x, y[:, :-1], params)
    with pytest.raises(ValueError, match="class indices"):
        batched.forward_backward(x, y + 10, params)
    with pytest.raises(ValueError, match="lrs"):
        batched.train(x, y, params, {"W_Q": 0.1}, steps=1, progress=False)
    with pytest.raises(ValueError, match=r"lrs\['W_V'\]"):
        batched.train(x, y, params, {"W_Q": 0.1, "W_K": 0.1, "W_V": -1.0, "W_O": 0.1}, steps=1, progress=False)
    with pytest.raises(ValueError, match="steps"):
        batched.train(x, y, params, dict.fromkeys(PARAM_NAMES, 0.1), steps=0, progress=False)
    with pytest.raises(ValueError, match="at least one"):
        batched.stack([])


def test_one_training_step_is_plain_gradient_descent_per_model():
    x, y, params = problem()
    lrs = {"W_Q": 0.1, "W_K": 0.1, "W_V": [0.1, 1.0, 0.0], "W_O": 0.2}
    run = batched.train(x, y, params, lrs, steps=1, dtype=torch.float64, progress=False)
    _, grads = batched.forward_backward(x, y, params)
    for m, v_rate in enumerate([0.1, 1.0, 0.0]):
        rates = {"W_Q": 0.1, "W_K": 0.1, "W_V": v_rate, "W_O": 0.2}
        for name in PARAM_NAMES:
            expected = params[name][m] - rates[name] * grads[name][m]
            assert torch.allclose(run.params[name][m], expected, atol=1e-14), (m, name)
    assert torch.equal(run.params["W_V"][2], params["W_V"][2])  # rate 0: untouched
    assert run.loss.shape == (1, 3) and run.final["loss"].shape == (3,)
    assert run.final["loss"][1] < run.loss[0, 1]  # a descent step lowers the loss


def test_models_train_independently_and_record_snapshots():
    x, y, params = problem(M=2, N=20)
    lrs = dict.fromkeys(PARAM_NAMES, 0.5)
    both = batched.train(x, y, params, lrs, steps=7, record_every=3, dtype=torch.float64, progress=False)
    alone = batched.train(x[1:], y[1:], {n: p[1:] for n, p in params.items()}, lrs, steps=7, record_every=3,
                          dtype=torch.float64, progress=False)
    assert torch.allclose(both.params["W_Q"][1], alone.params["W_Q"][0], atol=1e-13)
    assert abs(both.loss[6, 1] - alone.loss[6, 0]) < 1e-13
    assert both.snapshot_steps.tolist() == [0, 3, 6, 7]
    assert both.W_V.shape == (4, 2, 3, 6)
    assert torch.allclose(torch.as_tensor(both.W_V[0]), params["W_V"])
    assert torch.allclose(torch.as_tensor(both.W_V[-1]), both.params["W_V"])


def test_divergence_stops_with_a_message_naming_the_model():
    x, y, params = problem(M=2)
    lrs = {"W_Q": 1.0, "W_K": 1.0, "W_V": [1.0, 1e30], "W_O": 1.0}
    with pytest.raises(TrainingDiverged, match=r"em, seed 2 \(lr .*W_V=1e\+30"):
        batched.train(x, y, params, lrs, steps=50, names=["sgd, seed 1", "em, seed 2"], progress=False)


def test_checkpoint_resume_gives_the_uninterrupted_run(tmp_path):
    x, y, params = problem(M=2, N=25)
    lrs = {"W_Q": 0.3, "W_K": 0.3, "W_V": [0.3, 3.0], "W_O": 0.3}
    kwargs = dict(record_every=2, dtype=torch.float64, progress=False)
    whole = batched.train(x, y, params, lrs, steps=9, **kwargs)
    path = tmp_path / "run.pt"
    first = batched.train(x, y, params, lrs, steps=5, checkpoint_path=path, checkpoint_every=2, **kwargs)
    assert first.loss.shape == (5, 2)
    resumed = batched.train(x, y, params, lrs, steps=9, checkpoint_path=path, checkpoint_every=2, **kwargs)
    assert resumed.resumed_from == 5
    assert (resumed.loss == whole.loss).all()
    assert (resumed.W_V == whole.W_V).all() and resumed.snapshot_steps.tolist() == whole.snapshot_steps.tolist()
    assert torch.equal(resumed.params["W_K"], whole.params["W_K"])
    with pytest.raises(ValueError, match="another run"):
        batched.train(x, y, params, dict(lrs, W_O=0.1), steps=9, checkpoint_path=path, **kwargs)
    with pytest.raises(ValueError, match="past steps=4"):
        batched.train(x, y, params, lrs, steps=4, checkpoint_path=path, **kwargs)


def test_train_records_every_matrix_and_its_squared_gradient():
    x, y, params = problem()
    run = batched.train(x, y, params, {n: 0.05 for n in PARAM_NAMES}, 6, record_every=3, progress=False,
                        dtype=torch.float64)
    assert list(run.snapshot_steps) == [0, 3, 6]
    for name in PARAM_NAMES:
        assert run.snapshots[name].shape == (3, x.shape[0], *params[name].shape[1:])
        torch.testing.assert_close(torch.as_tensor(run.snapshots[name][0]), params[name])
        torch.testing.assert_close(torch.as_tensor(run.snapshots[name][-1]), run.params[name])
        _, grads = batched.forward_backward(x, y, params)      # step 0's gradient, from the start weights
        torch.testing.assert_close(torch.as_tensor(run.grad_sq[name][0]), grads[name].pow(2).sum((1, 2)))
    assert run.W_V is run.snapshots["W_V"]


def test_processes_give_the_run_of_one_process_in_model_order(tmp_path):
    """workers=2: each process trains its share of the models on one thread; the joined run is the
    one-process run (float64 here; the models never meet, so only the reduction order could differ)."""
    x, y, params = problem(M=3, N=21)
    lrs = {"W_Q": 0.3, "W_K": 0.3, "W_V": [0.3, 3.0, 1.0], "W_O": 0.3}
    kwargs = dict(record_every=2, dtype=torch.float64, progress=False, names=["a", "b", "c"])
    one = batched.train(x, y, params, lrs, steps=5, **kwargs)
    two = batched.train(x, y, params, lrs, steps=5, workers=2, **kwargs)
    assert two.names == ["a", "b", "c"] and two.extra["workers"] == 2
    for key in ("loss", "entropy", "accuracy"):
        assert getattr(two, key).shape == (5, 3) and abs(getattr(two, key) - getattr(one, key)).max() < 1e-12
    assert all(abs(two.final[k] - one.final[k]).max() < 1e-12 for k in one.final)
    for n in PARAM_NAMES:
        assert two.snapshots[n].shape == one.snapshots[n].shape and abs(two.snapshots[n] - one.snapshots[n]).max() < 1e-12
        assert abs(two.grad_sq[n] - one.grad_sq[n]).max() < 1e-12
        assert torch.allclose(two.params[n], one.params[n], rtol=0, atol=1e-12)
    with pytest.raises(TrainingDiverged, match=r"c \(lr .*W_V=1e\+30"):   # a part's error, naming its model
        batched.train(x, y, params, dict(lrs, W_V=[0.3, 0.3, 1e30]), steps=50, workers=2, **kwargs)
    with pytest.raises(ValueError, match="workers: expected 1 on a GPU, with a sampler or with a checkpoint_path"):
        batched.train(x, y, params, lrs, steps=5, workers=2, checkpoint_path=tmp_path / "run.pt", **kwargs)


def test_stack_refuses_a_parameter_dict_with_an_unknown_key():
    p = attention.init_params(4, 3, 3, 2)
    with pytest.raises(ValueError, match=r"^param_dicts\[1\]: .*unknown keys 'b_Q'"):
        batched.stack([p, {**p, "b_Q": torch.zeros(3)}])


@pytest.mark.parametrize("sampler, match", [
    (lambda s: (torch.randn(2, 5, 6), torch.zeros(2, 5, dtype=torch.long)),
     r"sampler: expected a function returning \(x, y\) of shapes \(2, 5, 4\) and \(2, 5\), got one returning "
     r"\(Tensor of shape \(2, 5, 6\) and dtype torch.float32, Tensor of shape \(2, 5\) .*\) at step 0"),
    (lambda s: (torch.randn(2, 5, 4), torch.full((2, 5), 7)),
     r"sampler\(0\)'s y: expected class indices in \[0, 2\], got values from 7 to 7"),
])
def test_a_samplers_first_batch_is_checked_naming_the_sampler(sampler, match):
    params = batched.stack([attention.init_params(4, 3, 3, 3, seed=s) for s in range(2)])
    x, y = torch.randn(2, 5, 4), torch.randint(0, 3, (2, 5))
    with pytest.raises(ValueError, match=match):
        batched.train(x, y, params, {n: 0.1 for n in attention.PARAM_NAMES}, 3, sampler=sampler, progress=False)

"""bayesattn_lite.checks: right answers pass, typical mistakes are named in words, nothing raises.

The sections follow the package: the engine (``checks._engine``, through the chapter 1 check), the
checks of chapters 1-3, 4-5 and 6-9, and those of the problem sets."""

import ast
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.functional import one_hot

from bayesattn_lite import attention, checks, diagnostics
from bayesattn_lite.checks import _engine, chapters_1_3, problem_sets
from checking import failed


# ----------------------------------------------------------------------------- the result

def test_result_displays_a_verdict():
    ok = checks.CheckResult("demo", True, "fine")
    assert ok and repr(ok) == "✅ demo: fine" and ok._repr_markdown_() == "✅ demo: fine"
    bad = checks.CheckResult("demo", False, "broken")
    assert not bad and repr(bad) == "❌ demo: broken" and bad._repr_markdown_() == "❌ demo: broken"


# ----------------------------------------------------------------------------- error signal (chapter 1), and the engine

def dlogits(logits, y):
    return torch.softmax(logits, dim=-1) - one_hot(y, logits.shape[-1]).to(logits.dtype)


def u_right(logits, y, W_O):
    return dlogits(logits, y) @ W_O / len(y)


def test_error_signal_reference_and_numpy_pass():
    result = checks.check_error_signal(lambda logits, y, W_O: attention.error_signal(logits, y, W_O)[1])
    assert result and "✅" in result._repr_markdown_() and "5 random inputs" in result.message
    assert checks.check_error_signal(u_right)
    assert checks.check_error_signal(lambda *args: u_right(*args).numpy())


@pytest.mark.parametrize("fn, phrases", [
    (lambda logits, y, W_O: -u_right(logits, y, W_O), ["sign", "softmax(z_i) - onehot(y_i)"]),
    (lambda logits, y, W_O: (torch.softmax(logits, 0) - one_hot(y, logits.shape[-1])) @ W_O / len(y),
     ["wrong axis", "dim=-1"]),
    (lambda logits, y, W_O: dlogits(logits, y) @ W_O, ["1/T", "mean"]),
    (lambda logits, y, W_O: torch.softmax(logits, -1) @ W_O / len(y), ["target is missing", "onehot"]),
    (lambda logits, y, W_O: -dlogits(logits, y) @ W_O, ["two mistakes", "sign", "1/T"]),
])
def test_error_signal_mistakes_are_named(fn, phrases):
    failed(checks.check_error_signal(fn), *phrases)


def test_error_signal_untransposed_W_O_raises_and_is_explained():
    result = checks.check_error_signal(lambda logits, y, W_O: dlogits(logits, y) @ W_O.T / len(y))
    failed(result, "RuntimeError", "cannot be multiplied", "transpose", "W_O (2, 5) = (n_classes, d_v)")


@pytest.mark.parametrize("fn, phrases", [
    (lambda logits, y, W_O: W_O.T @ dlogits(logits, y).T / len(y),
     ["expected a tensor of shape (4, 5) (T, d_v), got (5, 4) = (d_v, T)", "ransposed"]),
    (lambda logits, y, W_O: dlogits(logits, y) / len(y), ["got (4, 2) = (T, n_classes)", "W_O"]),
    (lambda logits, y, W_O: u_right(logits, y, W_O).float(), ["dtype torch.float64", "float32"]),
    (lambda logits, y, W_O: u_right(logits, y, W_O) * float("nan"), ["NaN"]),
    (lambda logits, y, W_O: u_right(logits, y, W_O).tolist(), ["got a list"]),
    (lambda logits, y, W_O: None, ["got None"]),
    (lambda logits, y, W_O: np.array([[None]]), ["numpy array of dtype object"]),
])
def test_error_signal_wrong_output_is_described(fn, phrases):
    failed(checks.check_error_signal(fn), *phrases)


def test_a_function_that_raises_gives_a_failed_result():
    def broken(logits, y, W_O):
        raise ValueError("not implemented yet\nsecond line")
    result = failed(checks.check_error_signal(broken), "ValueError", "not implemented yet", "should return u (4, 5)")
    assert "second line" not in result.message and "\n" not in result.message


def test_a_function_that_calls_sys_exit_gives_a_failed_result_and_keyboard_interrupt_still_stops():
    failed(checks.check_score_gradient(lambda alpha, b: sys.exit(0)), "SystemExit")
    failed(checks.check_markov_floors(lambda P: sys.exit(1)), "SystemExit")

    def interrupted(alpha, b):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        checks.check_score_gradient(interrupted)


def test_inplace_changes_do_not_corrupt_the_check():
    def destructive(logits, y, W_O):
        logits -= logits.max(dim=-1, keepdim=True).values  # in place, and harmless for softmax
        u = u_right(logits, y, W_O)
        W_O.zero_()
        return u
    assert checks.check_error_signal(destructive)
    assert checks.check_error_signal(u_right)  # the check's own tensors are untouched


# ----------------------------------------------------------------------------- score gradient

def E(alpha, b):
    return (alpha * b).sum(dim=-1, keepdim=True)


def test_score_gradient_reference_passes_on_causal_and_full_float64_inputs():
    seen = []

    def spy(alpha, b):
        seen.append(alpha)
        return attention.score_gradient(alpha, b)[0]

    assert checks.check_score_gradient(spy)
    assert all(a.dtype == torch.float64 and a.shape[0] >= 4 for a in seen)
    causal = [bool(torch.all(a.triu(1) == 0)) for a in seen]
    assert any(causal) and not all(causal)


@pytest.mark.parametrize("fn, phrases", [
    (lambda alpha, b: -alpha * (b - E(alpha, b)), ["sign"]),
    (lambda alpha, b: alpha * b, ["missing the subtraction", "weighted mean"]),
    (lambda alpha, b: alpha * (b - (alpha * b).sum(dim=0, keepdim=True)), ["weighted mean", "wrong axis", "queries"]),
    (lambda alpha, b: alpha * (b - (alpha * b).sum(dim=-1)), ["axis", "keepdim=True"]),
    (lambda alpha, b: b - E(alpha, b), ["weights alpha are missing"]),
    (lambda alpha, b: alpha * (b - b.mean(dim=-1, keepdim=True)), ["not attention-weighted"]),
    (lambda alpha, b: E(alpha, b).squeeze(-1), ["got (4,) = (T,)", "weighted mean"]),
])
def test_score_gradient_mistakes_are_named(fn, phrases):
    failed(checks.check_score_gradient(fn), *phrases)


def test_unknown_mistake_reports_largest_error_and_formula():
    def off_by_a_bit(alpha, b):
        ds = alpha * (b - E(alpha, b))
        ds[2, 1] += 0.5
        return ds
    failed(checks.check_score_gradient(off_by_a_bit), "largest absolute error 0.5", "index (2, 1)", "Compare with")


def test_scaled_answer_is_reported_as_a_factor():
    failed(checks.check_score_gradient(lambda alpha, b: 3 * alpha * (b - E(alpha, b))), "3 times")


# ----------------------------------------------------------------------------- q, k, v gradients

def qkv_right(q, k, v, alpha, ds, u):
    scale = math.sqrt(q.shape[-1])
    return ds @ k / scale, ds.T @ q / scale, alpha.T @ u


def replace(index, value):
    """The right (dq, dk, dv) with entry ``index`` computed by ``value(q, k, v, alpha, ds, u)``."""
    def fn(*args):
        grads = list(qkv_right(*args))
        grads[index] = value(*args)
        return tuple(grads)
    return fn


def test_qkv_reference_passes():
    assert checks.check_qkv_gradients(qkv_right)
    assert checks.check_qkv_gradients(lambda *args: list(qkv_right(*args)))


@pytest.mark.parametrize("fn, phrases", [
    (lambda q, k, v, alpha, ds, u: (ds @ k, ds.T @ q, alpha.T @ u),
     ["dv is right", "dq and dk are wrong", "missing the 1/sqrt(d_k)"]),
    (lambda q, k, v, alpha, ds, u: (ds @ k / q.shape[-1], ds.T @ q / q.shape[-1], alpha.T @ u),
     ["dq and dk are wrong", "divided by d_k instead of sqrt(d_k)"]),
    (replace(2, lambda q, k, v, alpha, ds, u: alpha @ u),
     ["dq and dk are right", "dv is wrong", "transpose", "alpha^T @ u"]),
    (replace(1, lambda q, k, v, alpha, ds, u: ds @ q / math.sqrt(q.shape[-1])),
     ["dq and dv are right", "dk is wrong", "transpose", "ds^T @ q"]),
    (replace(0, lambda q, k, v, alpha, ds, u: ds.T @ k / math.sqrt(q.shape[-1])), ["dq is wrong", "transposed ds"]),
    (replace(2, lambda q, k, v, alpha, ds, u: alpha.T @ u / math.sqrt(q.shape[-1])), ["dv is wrong", "no 1/sqrt(d_k)"]),
    (replace(0, lambda q, k, v, alpha, ds, u: -ds @ k / math.sqrt(q.shape[-1])), ["dq is wrong", "sign"]),
])
def test_qkv_mistakes_say_which_gradient_and_why(fn, phrases):
    failed(checks.check_qkv_gradients(fn), *phrases)


@pytest.mark.parametrize("fn, phrases", [
    (lambda *args: qkv_right(*args)[:2], ["a tuple of 3 tensors (dq, dk, dv)", "length 2"]),
    (lambda *args: qkv_right(*args)[2], ["a tuple of 3 tensors", "a single tensor"]),
    (replace(1, lambda q, k, v, alpha, ds, u: (ds.T @ q).T), ["dk: expected a tensor of shape", "(d_k, T)"]),
])
def test_qkv_wrong_structure_is_described(fn, phrases):
    failed(checks.check_qkv_gradients(fn), *phrases)


# ----------------------------------------------------------------------------- projection gradients

def projections_right(x, dq, dk, dv):
    return dq.T @ x, dk.T @ x, dv.T @ x


def test_projection_reference_passes():
    assert checks.check_projection_gradients(projections_right)


@pytest.mark.parametrize("fn, phrases", [
    (lambda x, dq, dk, dv: (x.T @ dq, x.T @ dk, x.T @ dv),
     ["dW_Q: expected a tensor of shape (3, 6) (d_k, d_x), got (6, 3) = (d_x, d_k)", "Transposed",
      "nn.Linear stores (out, in)"]),
    (lambda x, dq, dk, dv: (-dq.T @ x, -dk.T @ x, -dv.T @ x), ["dW_Q, dW_K and dW_V are wrong", "sign"]),
    (lambda x, dq, dk, dv: (dq.T @ x / len(x), dk.T @ x / len(x), dv.T @ x / len(x)), ["divided by T", "1/T"]),
    (lambda x, dq, dk, dv: (dk.T @ x, dq.T @ x, dv.T @ x), ["dW_V is right", "order of the returned tuple"]),
    (lambda x, dq, dk, dv: (dq.T @ x, dk.T @ x, dq.T @ x), ["dW_V: expected", "(d_k, d_x)", "(d_v, d_x)"]),
])
def test_projection_mistakes_are_named(fn, phrases):
    failed(checks.check_projection_gradients(fn), *phrases)


def test_projection_function_that_raises_is_explained():
    result = checks.check_projection_gradients(lambda x, dq, dk, dv: (dq.T @ x, dk.T @ x, dv @ x))
    failed(result, "RuntimeError", "nn.Linear stores (out, in)", "should return dW_Q (3, 6) = (d_k, d_x)")


@pytest.mark.parametrize("check", [checks.check_error_signal, checks.check_score_gradient,
                                   checks.check_qkv_gradients, checks.check_projection_gradients])
def test_no_exception_escapes_any_check(check):
    def wrong_arity():
        return None
    failed(check(wrong_arity), "TypeError", "takes 0 positional arguments")
    lam = failed(check(lambda: 0), "<lambda>() takes 0 positional arguments")
    assert "&lt;lambda&gt;()" in lam._repr_markdown_()  # escaped, or Markdown would eat it as an HTML tag
    failed(check(lambda *args: "not a tensor"), "str")


# ----------------------------------------------------------------------------- chapters 1-3: attended gap, score kernel

def gap_right(alpha, b):
    return b - (alpha * b).sum(dim=-1, keepdim=True)


def test_attended_gap_reference_passes():
    assert checks.check_attended_gap(gap_right)
    assert checks.check_attended_gap(lambda alpha, b: b - torch.einsum("ij,ij->i", alpha, b)[:, None])


@pytest.mark.parametrize("fn, phrases", [
    (lambda alpha, b: b.clone(), ["you returned b itself", "sums to one", "attended mean"]),
    (lambda alpha, b: -gap_right(alpha, b), ["wrong sign", "advantage"]),
    (lambda alpha, b: b - (alpha * b).sum(dim=0, keepdim=True), ["wrong axis", "dim=-1"]),
    (lambda alpha, b: b - (alpha * b).sum(dim=-1), ["broadcasts along the wrong axis", "keepdim=True"]),
    (lambda alpha, b: b - b.mean(dim=-1, keepdim=True), ["not attention-weighted"]),
    (lambda alpha, b: alpha * gap_right(alpha, b), ["multiplied by alpha", "dL/ds"]),
    (lambda alpha, b: -b, ["two mistakes", "wrong sign", "b itself"]),
])
def test_attended_gap_mistakes_are_named(fn, phrases):
    failed(checks.check_attended_gap(fn), *phrases)


def kernel_right(x, q, k):
    xx = x @ x.T
    return (torch.einsum("ai,bj->abij", xx, k @ k.T) + torch.einsum("bj,ai->abij", xx, q @ q.T)) / q.shape[1]


def test_score_kernel_reference_passes():
    assert checks.check_score_kernel(kernel_right)
    assert checks.check_score_kernel(attention.score_kernel)


def kernel_loops(x, q, k, pair_q, pair_k, scale):
    """A slow, explicit version with the two routes' factors chosen by the caller, for the mistakes."""
    T = x.shape[0]
    K = torch.zeros(T, T, T, T, dtype=x.dtype)
    for a, b_, i, j in np.ndindex(T, T, T, T):
        K[a, b_, i, j] = pair_q(x, q, k, a, b_, i, j) + pair_k(x, q, k, a, b_, i, j)
    return K * scale(q.shape[1])


def route_q(x, q, k, a, b, i, j):
    return (x[i] @ x[a]) * (k[j] @ k[b])


def route_k(x, q, k, a, b, i, j):
    return (x[j] @ x[b]) * (q[i] @ q[a])


def swapped_q(x, q, k, a, b, i, j):
    return (x[i] @ x[a]) * (q[i] @ q[a])


def swapped_k(x, q, k, a, b, i, j):
    return (x[j] @ x[b]) * (k[j] @ k[b])


def nothing(*args):
    return 0.0


def test_the_explicit_loops_are_the_reference():
    assert checks.check_score_kernel(lambda x, q, k: kernel_loops(x, q, k, route_q, route_k, lambda d: 1 / d))


@pytest.mark.parametrize("fn, phrases", [
    (lambda x, q, k: kernel_right(x, q, k) * math.sqrt(q.shape[1]), ["sqrt(d_k) instead of d_k", "J J^T"]),
    (lambda x, q, k: kernel_right(x, q, k) * q.shape[1], ["missing the 1/d_k"]),
    (lambda x, q, k: kernel_loops(x, q, k, route_q, nothing, lambda d: 1 / d), ["only the W_Q route"]),
    (lambda x, q, k: kernel_loops(x, q, k, nothing, route_k, lambda d: 1 / d), ["only the W_K route"]),
    (lambda x, q, k: kernel_loops(x, q, k, swapped_q, swapped_k, lambda d: 1 / d), ["paired the wrong way"]),
    (lambda x, q, k: kernel_right(x, q, k).permute(0, 2, 1, 3), ["wrong order", "K[i', i, j', j]"]),
    (lambda x, q, k: kernel_loops(x, q, k, route_q, nothing, lambda d: d ** -0.5),
     ["two mistakes", "only the W_Q route", "sqrt(d_k) instead of d_k"]),
])
def test_score_kernel_mistakes_are_named(fn, phrases):
    failed(checks.check_score_kernel(fn), *phrases)


@pytest.mark.parametrize("fn, phrases", [
    (lambda x, q, k: kernel_right(x, q, k).reshape(x.shape[0] ** 2, -1), ["expected a tensor of shape (4, 4, 4, 4)"]),
    (lambda x, q, k: x @ x.T, ["one (T, T) block"]),
    (lambda x, q, k: torch.zeros(4 * (x.shape[0],), dtype=x.dtype), ["all zeros"]),
    (lambda x, q, k: q @ k, ["raised RuntimeError", "einsum"]),
])
def test_score_kernel_wrong_structure_is_described(fn, phrases):
    failed(checks.check_score_kernel(fn), *phrases)


# ----------------------------------------------------------------------------- chapters 4-5

def _flow_right(alpha, advantage, key_mask):
    return (alpha * advantage * key_mask.to(alpha.dtype)[None, :]).sum(-1)


def test_advantage_flow_check_passes_the_reference_and_names_each_mistake():
    assert checks.check_advantage_flow(diagnostics.advantage_flow)
    assert checks.check_advantage_flow(_flow_right)
    failed(checks.check_advantage_flow(lambda a, A, m: -_flow_right(a, A, m)), "wrong sign")
    failed(checks.check_advantage_flow(lambda a, A, m: (A * m.to(A.dtype)[None, :]).sum(-1)), "weights are missing")
    failed(checks.check_advantage_flow(lambda a, A, m: (a * A).sum(-1)), "not over the set", "exactly 0")
    failed(checks.check_advantage_flow(lambda a, A, m: (a * A * m.to(a.dtype)[None, :]).sum(0)), "wrong axis")
    failed(checks.check_advantage_flow(lambda a, A, m: a * A), "One number per query")
    failed(checks.check_advantage_flow(lambda a, A, m: 1 / 0), "ZeroDivisionError")


def _resp_right(x, means, variance, weights):
    return torch.softmax(x @ means.T / variance - (means ** 2).sum(1) / (2 * variance) + torch.log(weights), dim=1)


def test_responsibilities_check_passes_the_reference_and_names_each_mistake():
    assert checks.check_responsibilities_as_attention(_resp_right)

    def sq(m):
        return (m ** 2).sum(1)

    failed(checks.check_responsibilities_as_attention(
        lambda x, m, v, w: torch.softmax(x @ m.T / v, dim=1)), "bias beta_k is missing")
    failed(checks.check_responsibilities_as_attention(
        lambda x, m, v, w: torch.softmax(x @ m.T / v + torch.log(w), dim=1)), "||mu_k||^2 / (2 sigma^2) is missing")
    failed(checks.check_responsibilities_as_attention(
        lambda x, m, v, w: torch.softmax(x @ m.T / v - sq(m) / (2 * v), dim=1)), "log pi_k is missing")
    failed(checks.check_responsibilities_as_attention(
        lambda x, m, v, w: torch.softmax(x @ m.T / v.sqrt() - sq(m) / (2 * v.sqrt()) + torch.log(w), dim=1)),
        "divided by sigma")
    failed(checks.check_responsibilities_as_attention(
        lambda x, m, v, w: torch.softmax(x @ m.T / v - sq(m) / (2 * v) + torch.log(w), dim=0)), "wrong axis")
    failed(checks.check_responsibilities_as_attention(lambda *a: "resp"), "str")


# ----------------------------------------------------------------------------- chapters 6-9: numbers answers

def _steps_to_right(curve, final, threshold):
    from bayesattn_lite import experiments
    return experiments.first_step_at_or_below(curve, final, threshold)


def _steps_to_mine(curve, final, threshold, strict=False, with_final=True, never=np.nan, shift=0):
    losses = np.concatenate([curve, final[:, None]], axis=1) if with_final else curve
    hit = losses < threshold[:, None] if strict else losses <= threshold[:, None]
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + shift, never).astype(float)


@pytest.mark.parametrize("fn, phrases", [
    (lambda c, f, t: _steps_to_mine(c, f, t, never=0), ["never reaches", "nan"]),
    (lambda c, f, t: _steps_to_mine(c, f, t, shift=1), ["off by one"]),
    (lambda c, f, t: _steps_to_mine(c, f, t, with_final=False), ["final loss is missing"]),
    (lambda c, f, t: _steps_to_mine(c, f, t, strict=True), ["strictly below", "<="]),
    (lambda c, f, t: np.zeros(len(f)), ["on problem 1", "first_step_at_or_below"]),
    (lambda c, f, t: 1 / 0, ["raised ZeroDivisionError"]),
    (lambda c, f, t: None, ["None"]),
])
def test_steps_to_mistakes_are_named(fn, phrases):
    failed(checks.check_steps_to(fn), *phrases)


def test_steps_to_reference_passes_and_matches_a_real_run():
    assert checks.check_steps_to(_steps_to_right)
    assert checks.check_steps_to(lambda c, f, t: torch.as_tensor(_steps_to_mine(c, f, t)))  # a tensor is fine


def _recall(counts, noise, split=True, normalise=True, others=True):
    counts = np.asarray(counts, float)
    M, n = len(counts), counts.sum()
    p = (1 - noise) ** counts * ((noise / (M - 1) if split else noise) ** (n - counts) if others else 1.0)
    return p / p.sum() if normalise else p


def test_recall_posterior_reference_matches_the_task():
    from bayesattn_lite import wind_tunnels
    assert checks.check_recall_posterior(_recall)
    task = wind_tunnels.wind_tunnel("recall")  # key 0 shown with 3, 3, 5; the fourth pair asks for it
    batch = task.batch_from_pairs(torch.tensor([[0, 0, 0, 0]]), torch.tensor([[3, 3, 5, 3]]), torch.tensor([[3, 3, 3, 3]]))
    counts = np.bincount([3, 3, 5], minlength=task.n_values)
    assert np.allclose(batch.posterior[0, 6].double().numpy(), _recall(counts, task.noise), atol=1e-6)


@pytest.mark.parametrize("fn, phrases", [
    (lambda c, e: _recall(c, e, split=False), ["noise / (M - 1)"]),
    (lambda c, e: _recall(c, e, normalise=False), ["not normalised"]),
    (lambda c, e: _recall(c, e, others=False), ["other* values"]),
    (lambda c, e: np.ones(len(c)) / len(c), ["Hint: suppose the true value is v", "Compare with"]),
    (lambda c, e: [1.0], ["expected shape"]),
    (lambda c, e: (lambda p: p / p.sum())((1 - e) ** c * (e / len(c)) ** (c.sum() - c)), ["over all M values"]),
    (lambda c, e: np.eye(len(c))[np.argmax(c)], ["majority vote"]),
])
def test_recall_posterior_mistakes_are_named(fn, phrases):
    failed(checks.check_recall_posterior(fn), *phrases)


def _lstm(f, i, first=1, last=0, gate=True):
    T = len(f)
    omega = np.zeros((T, T))
    for t in range(T):
        for s in range(t + 1):
            omega[t, s] = np.prod(f[s + first:t + 1 - last]) * {True: i[s], False: 1.0, "reader": i[t]}[gate]
    return omega


def test_lstm_mixing_reference_matches_the_recurrence():
    assert checks.check_lstm_mixing(_lstm)
    rng = np.random.default_rng(0)
    f, i, c_tilde = rng.uniform(0.2, 0.9, 5), rng.uniform(0.2, 0.9, 5), rng.normal(size=5)
    c = 0.0
    for t in range(5):  # the LSTM's cell update, step by step
        c = f[t] * c + i[t] * c_tilde[t]
    assert np.isclose(c, _lstm(f, i)[-1] @ c_tilde)


@pytest.mark.parametrize("fn, phrases", [
    (lambda f, i: _lstm(f, i, first=0), ["one step early"]),
    (lambda f, i: _lstm(f, i, last=1), ["own forget gate"]),
    (lambda f, i: _lstm(f, i, gate=False), ["input gate is missing"]),
    (lambda f, i: _lstm(f, i, gate="reader"), ["reader's, i_t"]),
    (lambda f, i: _lstm(f, i).T, ["transposed"]),
    (lambda f, i: np.cumprod(f)[:, None] / np.cumprod(f)[None, :] * i[None, :], ["not causal"]),
    (lambda f, i: np.zeros((2, 2)), ["expected shape"]),
])
def test_lstm_mixing_mistakes_are_named(fn, phrases):
    failed(checks.check_lstm_mixing(fn), *phrases)

def test_a_numbers_answer_with_two_mistakes_is_named_too():
    """The chapters 6-9 checks run on the same engine as the others: two mistakes at once are named."""
    failed(checks.check_steps_to(lambda c, f, t: _steps_to_mine(c, f, t, never=0, shift=1)),
           "two mistakes at once", "never reaches", "off by one")
    failed(checks.check_lstm_mixing(lambda f, i: _lstm(f, i, gate=False).T), "two mistakes at once",
           "input gate is missing", "transposed")


# ----------------------------------------------------------------------------- problem set 1: temperature, ALiBi, rank

def biased_right(q, k, v, u, tau, slope, bias_sign=1, chain_tau=True, causal=True):
    T, d_k = q.shape
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).to(q.dtype)
    s = q @ k.T / (tau * d_k ** 0.5) - bias_sign * slope * distance
    if causal:
        s = s.masked_fill(~attention.causal_mask(T), float("-inf"))
    alpha = torch.softmax(s, -1)
    b = u @ v.T
    ds = alpha * (b - (alpha * b).sum(-1, keepdim=True))
    scale = (tau if chain_tau else 1.0) * d_k ** 0.5
    return ds @ k / scale, ds.T @ q / scale


def biased_autograd(q, k, v, u, tau, slope):
    """The same gradients by autograd: an independent reference for the check's own formula."""
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    T, d_k = q.shape
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).to(q.dtype)
    s = (q @ k.T / (tau * d_k ** 0.5) - slope * distance).masked_fill(~attention.causal_mask(T), float("-inf"))
    (torch.softmax(s, -1) @ v * u).sum().backward()  # dL/dg = u, so L = sum(g * u) to first order
    return q.grad, k.grad


def test_biased_qk_gradients_reference_and_autograd_pass():
    assert checks.check_biased_qk_gradients(biased_right)
    assert checks.check_biased_qk_gradients(biased_autograd)


@pytest.mark.parametrize("fn, phrases", [
    (lambda *a: biased_right(*a, bias_sign=-1), ["wrong sign", "*penalises* distance"]),
    (lambda *a: biased_right(*a, chain_tau=False), ["lost its 1/tau"]),
    (lambda *a: biased_right(*a, causal=False), ["no causal mask"]),
    (lambda q, k, v, u, tau, slope: biased_right(q, k, v, u, tau, 0.0 * slope), ["bias is missing"]),
    (lambda q, k, v, u, tau, slope: biased_right(q, k, v, u, 1.0, slope), ["two mistakes", "temperature is missing"]),
    (lambda q, k, v, u, tau, slope: tuple(-g for g in biased_right(q, k, v, u, tau, slope)), ["wrong sign", "advantage"]),
])
def test_biased_qk_gradients_mistakes_are_named(fn, phrases):
    failed(checks.check_biased_qk_gradients(fn), *phrases)


def test_the_published_head_copied_into_the_mup_variant_is_told_the_scale_not_the_fix():
    """A class variant's head divides by d_k: the published answer gets the mistake named, without the formula."""
    result = checks.check_biased_qk_gradients(biased_right, form="mup")
    failed(result, "scaled as in the usual head, not as in this one")
    assert "d_k" not in result.message and "muP" in result.practice


def basis_right(W_O):
    C = W_O.shape[0]
    return torch.linalg.svd(W_O.T @ (torch.eye(C, dtype=W_O.dtype) - 1.0 / C), full_matrices=False)[0][:, : C - 1]


def test_value_update_basis_passes_for_any_orthonormal_basis_of_the_subspace():
    assert checks.check_value_update_basis(basis_right)
    # another basis of the same subspace (rotated) passes too: only the subspace is graded
    def rotated(W_O):
        B = basis_right(W_O)
        R = torch.linalg.qr(torch.randn(B.shape[1], B.shape[1], dtype=B.dtype,
                                        generator=torch.Generator().manual_seed(0)))[0]
        return B @ R
    assert checks.check_value_update_basis(rotated)
    assert checks.check_value_update_basis(lambda W_O: basis_right(W_O).numpy())


@pytest.mark.parametrize("fn, phrases", [
    (lambda W: torch.linalg.svd(W.T, full_matrices=False)[0], ["C directions", "sum to 0"]),
    (lambda W: torch.linalg.svd(W.T, full_matrices=False)[0][:, : W.shape[0] - 1], ["top C - 1 singular", "centre"]),
    (lambda W: basis_right(W).T, ["*columns*"]),
    (lambda W: 2 * basis_right(W), ["not orthonormal"]),
    (lambda W: W, ["W_O^T r, not W_O r"]),
    (lambda W: torch.linalg.qr(torch.randn(W.shape[1], W.shape[0] - 1, dtype=W.dtype))[0], ["wrong subspace"]),
    (lambda W: 1 / 0, ["ZeroDivisionError"]),
    (lambda W: None, ["None"]),
])
def test_value_update_basis_mistakes_are_named(fn, phrases):
    failed(checks.check_value_update_basis(fn), *phrases)


def test_value_update_basis_holds_a_real_gradient_of_rank_C_minus_1():
    """The claim the check grades: dW_V of a head lies in the subspace, and fills it."""
    x = torch.randn(4, 7, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 3, (4, 7), generator=torch.Generator().manual_seed(2))
    params = attention.init_params(6, 3, 5, 3, std=0.7, seed=0, dtype=torch.float64)
    dW_V = attention.gradients(x, y, params)["W_V"]
    B = basis_right(params["W_O"])
    assert torch.allclose(B @ (B.T @ dW_V), dW_V, atol=1e-12)
    assert int((torch.linalg.svdvals(dW_V) > 1e-10).sum()) == 2


# ----------------------------------------------------------------------------- problem set 2: second order, kernel

def second_right(alpha, delta):
    c = delta - (alpha * delta).sum(-1, keepdim=True)
    return 0.5 * alpha * (c ** 2 - (alpha * c ** 2).sum(-1, keepdim=True))


def test_second_order_reference_passes_and_is_the_taylor_term():
    assert checks.check_second_order_attention_change(second_right)
    # independent of the check's formula: the error of first + second order shrinks like eta^3
    s = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    d = torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    alpha = torch.softmax(s, -1)
    errors = []
    for eta in (1e-2, 1e-3):
        exact = torch.softmax(s + eta * d, -1) - alpha
        first = alpha * (eta * d - (alpha * eta * d).sum(-1, keepdim=True))
        errors.append(float((exact - first - second_right(alpha, eta * d)).abs().max()))
    assert errors[1] < errors[0] / 500  # a factor 1000 for an O(eta^3) remainder


@pytest.mark.parametrize("fn, phrases", [
    (lambda a, d: 2 * second_right(a, d), ["the 1/2 is missing", "Taylor expansion"]),
    (lambda a, d: -second_right(a, d), ["wrong sign"]),
    (lambda a, d: 0.5 * a * (d - (a * d).sum(-1, keepdim=True)) ** 2, ["do not sum to 0"]),
    (lambda a, d: 0.5 * a * (d ** 2 - (a * d ** 2).sum(-1, keepdim=True)), ["not centred"]),
    (lambda a, d: second_right(a, d) + a * (d - (a * d).sum(-1, keepdim=True)), ["first- plus the second-order"]),
])
def test_second_order_mistakes_are_named(fn, phrases):
    failed(checks.check_second_order_attention_change(fn), *phrases)


def tempered_right(x, W_Q, W_K, ds, eta, tau, tau_power=2, route="both", exact=False):
    """tau_power 2 is right: 1/tau in dL/dW (chain) and 1/tau in how the moved weights move s (score)."""
    q, k = x @ W_Q.T, x @ W_K.T
    root = q.shape[1] ** 0.5
    chain = root * (tau if tau_power == 2 else 1.0)
    score = root * (tau if tau_power >= 1 else 1.0)
    dq = -eta * x @ ((ds @ k / chain).T @ x).T if route != "K" else torch.zeros_like(q)
    dk = -eta * x @ ((ds.T @ q / chain).T @ x).T if route != "Q" else torch.zeros_like(k)
    return (dq @ k.T + q @ dk.T + (dq @ dk.T if exact else 0.0)) / score


def test_tempered_score_change_matches_the_kernel_and_a_real_step():
    assert checks.check_tempered_score_change(tempered_right)
    # the tau = 1 kernel of the package, divided by tau^2
    assert checks.check_tempered_score_change(lambda x, W_Q, W_K, ds, eta, tau: attention.predicted_score_change(
        x, x @ W_Q.T, x @ W_K.T, ds, float(eta)) / tau ** 2)
    # and a real gradient step by autograd, to first order: the error shrinks like eta^2
    gen = torch.Generator().manual_seed(0)
    x, W_Q, W_K = (torch.randn(*shape, dtype=torch.float64, generator=gen) for shape in ((5, 4), (3, 4), (3, 4)))
    target, tau = torch.randn(5, 5, dtype=torch.float64, generator=gen), 2.0

    def scores(W_Q, W_K):
        return (x @ W_Q.T) @ (x @ W_K.T).T / (tau * 3 ** 0.5)
    W_Q.requires_grad_(), W_K.requires_grad_()
    loss = (scores(W_Q, W_K) * target).sum()  # dL/ds = target
    gQ, gK = torch.autograd.grad(loss, (W_Q, W_K))
    with torch.no_grad():
        errors = [float((scores(W_Q - eta * gQ, W_K - eta * gK) - scores(W_Q, W_K)
                         - tempered_right(x, W_Q, W_K, target, eta, tau)).abs().max()) for eta in (1e-2, 1e-3)]
    assert errors[1] < errors[0] / 50


@pytest.mark.parametrize("fn, phrases", [
    (lambda *a: tempered_right(*a, tau_power=1), ["appears once", "1/tau^2"]),
    (lambda *a: tempered_right(*a, tau_power=0), ["temperature is missing"]),
    (lambda *a: tempered_right(*a, route="Q"), ["only the W_Q route"]),
    (lambda *a: tempered_right(*a, route="K"), ["only the W_K route"]),
    (lambda *a: tempered_right(*a, exact=True), ["second-order term"]),
    (lambda *a: -tempered_right(*a), ["wrong sign", "descent"]),
])
def test_tempered_score_change_mistakes_are_named(fn, phrases):
    failed(checks.check_tempered_score_change(fn), *phrases)


# ----------------------------------------------------------------------------- problem set 3: Markov floors

def floors_right(P, weights="stationary", base=2.0):
    P = P.numpy()
    values, vectors = np.linalg.eig(P.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1))])
    pi = pi / pi.sum()
    w = pi if weights == "stationary" else np.full(len(pi), 1 / len(pi))
    rows = -(P * np.log(P)).sum(1) / math.log(base)
    return float(w @ rows), float(-(pi * np.log(pi)).sum() / math.log(base))


def test_markov_floors_reference_passes_and_agrees_with_a_long_sample():
    assert checks.check_markov_floors(floors_right)
    assert checks.check_markov_floors(lambda P: tuple(torch.tensor(v) for v in floors_right(P)))
    # the paper's chain: circulant, so pi is uniform and the rate is h_min (nats) in bits
    from bayesattn_lite import tasks
    chain = tasks.StickyMarkovChain()
    rate, shuffled = floors_right(torch.from_numpy(chain.transition_matrix))
    assert math.isclose(rate, chain.h_min / math.log(2), rel_tol=1e-9) and math.isclose(shuffled, 3.0, rel_tol=1e-9)


@pytest.mark.parametrize("fn, phrases", [
    (lambda P: floors_right(P, base=math.e), ["nats"]),
    (lambda P: floors_right(P, weights="uniform"), ["entropy rate is wrong", "stationary probability"]),
    (lambda P: (floors_right(P, weights="uniform", base=math.e)[0], floors_right(P)[1]), ["two mistakes", "nats"]),
    (lambda P: (floors_right(P)[0], math.log2(P.shape[0])), ["shuffled floor is wrong", "log2(n)"]),
    (lambda P: floors_right(P.T.contiguous()), ["entropy rate is wrong"]),
    (lambda P: floors_right(P)[0], ["two numbers"]),
    (lambda P: 1 / 0, ["ZeroDivisionError"]),
])
def test_markov_floors_mistakes_are_named(fn, phrases):
    failed(checks.check_markov_floors(fn), *phrases)


@pytest.mark.parametrize("check", [checks.check_biased_qk_gradients, checks.check_value_update_basis,
                                   checks.check_second_order_attention_change, checks.check_tempered_score_change,
                                   checks.check_markov_floors])
def test_problem_set_checks_never_raise(check):
    failed(check(lambda: 0), "takes 0 positional arguments")
    failed(check(lambda *args: "not a tensor"))
    def not_implemented(*args):
        raise NotImplementedError("the student version's stub")
    failed(check(not_implemented), "NotImplementedError")


# ----------------------------------------------------------------------------- problem set 3: an experiment

def test_experiment_checks():
    results = {"a": {0: 1.0, 1: 1.1, 2: 1.2}, "b": {0: 2.0, 1: 2.1, 2: 2.2}}
    assert checks.check_seeds(results)
    assert not checks.check_seeds({"a": {0: 1.0}, "b": {0: 2.0}})
    assert not checks.check_seeds({"a": {0: 1, 1: 1, 2: 1}, "b": {0: 1, 1: 1, 3: 1}})
    assert not checks.check_seeds({"a": {0: float("nan")}, "b": {0: 1.0}})
    def experiment(condition, seed):  # a stand-in experiment: a number for any seed, the same every time
        return {"a": 1.0, "b": 2.0}[condition] + 0.1 * seed

    assert checks.check_reproducible(experiment, results)
    lookup = checks.check_reproducible(lambda c, s: results[c][s], results)  # a made-up table, read back
    assert not lookup and "not read a table" in lookup.message
    assert not checks.check_reproducible(lambda c, s: experiment(c, s) + 1, results)
    assert not checks.check_reproducible(lambda c, s: 1 / 0, results)
    assert checks.check_seeds(results, experiment) and not checks.check_seeds(results, lambda c, s: results[c][s])
    # the grader passes run_condition whatever the notebook set it to: None is no experiment (a hostile
    # student's made-up table with run_condition = None passed q3 when None meant "not given")
    for not_a_function in (None, 3, "run"):
        result = checks.check_seeds(results, not_a_function)
        assert not result and "to be a function" in result.message


RESULTS = {"a": {0: 1.0, 1: 1.1, 2: 1.2}, "b": {0: 2.0, 1: 2.1, 2: 2.2}}


def stand_in_experiment(condition, seed):
    """A number for any condition of RESULTS and any seed, the same every time, different for each seed."""
    return {"a": 1.0, "b": 2.0}[condition] + 0.1 * seed


# the holes of issue 35 (item 5): each scored 3 of 10 points without running anything
FAKE_EXPERIMENTS = {
    "a constant": (lambda c, s: 0.5, {c: {s: 0.5 for s in range(3)} for c in "ab"}, "does not change with the seed"),
    "a constant per condition": (lambda c, s: {"a": 0.5, "b": 0.7}[c],
                                 {"a": {s: 0.5 for s in range(3)}, "b": {s: 0.7 for s in range(3)}},
                                 "does not change with the seed"),
    "a constant beside a made-up table": (lambda c, s: 0.5, RESULTS, "a lookup with a made-up default"),
    "a lookup with a made-up default": (lambda c, s: RESULTS[c].get(s, 0.3), RESULTS, "a lookup with a made-up default"),
    "a lookup with a random default": (lambda c, s: RESULTS[c].get(s, float(np.random.rand())), RESULTS,
                                       "a table read back"),
    "string seeds": (lambda c, s: {"0": 1.0, "1": 1.1, "2": 1.2}.get(str(s), 0.3),
                     {c: {"0": 1.0, "1": 1.1, "2": 1.2} for c in "ab"}, "a string"),
}


@pytest.mark.parametrize("offset", [0, 7, 40_961])
@pytest.mark.parametrize("attack", sorted(FAKE_EXPERIMENTS))
def test_a_fake_experiment_fails_both_experiment_questions(attack, offset, monkeypatch):
    """Problem set 3's q2 and q3 certify that run_condition runs: a constant, a table with a default for the
    seeds it lacks, string seeds fail both, with the mistake named (the hint only in the practice words)."""
    monkeypatch.setattr(_engine, "SEED_OFFSET", offset)
    run_condition, results, named = FAKE_EXPERIMENTS[attack]
    for result in (checks.check_reproducible(run_condition, results), checks.check_seeds(results, run_condition)):
        assert not result and named in result.message and named in result.practice, (attack, result.message)
        assert "Hint:" not in result.message and result.mistakes == ()


def test_the_experiment_check_runs_its_own_fresh_integer_seeds_and_a_regrade_replays_them(monkeypatch):
    calls = []

    def experiment(condition, seed):
        calls.append((condition, seed))
        return stand_in_experiment(condition, seed)

    monkeypatch.setattr(_engine, "SEED_OFFSET", 12_345)
    assert checks.check_reproducible(experiment, RESULTS)
    first, calls[:] = list(calls), []
    assert all(type(seed) is int and condition in RESULTS for condition, seed in first)
    fresh = [(c, s) for c, s in first if s not in RESULTS[c]]
    assert len(first) - len(fresh) == 2  # two entries of results run again
    assert fresh[0] == fresh[1] and len({s for _, s in fresh}) == 2  # one seed twice, then another
    assert checks.check_reproducible(experiment, RESULTS) and calls == first  # a regrade: the same draws
    assert checks.check_seeds(RESULTS, experiment) and calls == first  # q3 reads q2's runs, runs nothing
    monkeypatch.setattr(_engine, "SEED_OFFSET", 12_346)
    calls[:] = []
    assert checks.check_reproducible(experiment, RESULTS) and calls != first  # another submission, other seeds


@pytest.mark.parametrize("offset", range(4))
def test_an_experiment_whose_measure_saturates_in_one_condition_is_an_experiment(offset, monkeypatch):
    """A measure may be the same for every seed of one condition (a task solved every time); the other
    condition's spread shows the numbers depend on the seed. Whichever condition the check draws, it passes."""
    monkeypatch.setattr(_engine, "SEED_OFFSET", offset)
    results = {"solved": {s: 1.0 for s in range(3)}, "not solved": {s: 0.5 + 0.1 * s for s in range(3)}}
    run = lambda c, s: 1.0 if c == "solved" else 0.5 + 0.1 * s  # noqa: E731
    assert checks.check_reproducible(run, results) and checks.check_seeds(results, run)


def test_an_experiment_that_is_not_seeded_fails_reproducibility_only():
    draws = np.random.default_rng()
    run = lambda c, s: stand_in_experiment(c, s) + draws.random()  # noqa: E731
    result = checks.check_reproducible(run, RESULTS)
    assert not result and "not reproducible" in result.message and result.mistakes == ("not_reproducible",)
    assert "seed everything" in result.practice and "seed everything" not in result.message
    assert checks.check_seeds(RESULTS, run)  # the seeds question is about the seeds, not the seeding


@pytest.mark.parametrize("bad, phrase", [("0.5", "expected one number"), (torch.zeros(2), "expected one number"),
                                         (float("nan"), "nan")])
def test_run_condition_must_return_one_finite_number(bad, phrase):
    result = checks.check_reproducible(lambda c, s: bad, RESULTS)
    assert not result and phrase in result.message


# ----------------------------------------------------------------------------- the grader's random inputs

@pytest.mark.parametrize("offset", [1, 40_961, 2**31 - 1])
def test_checks_draw_other_inputs_under_an_offset_and_still_pass_the_references(offset, monkeypatch):
    """The grader shifts every seed of the checks by a random offset per submission (``_engine.SEED_OFFSET``):
    the inputs change, and a correct answer still passes (here the package's own formulas)."""
    base = chapters_1_3._score_gradient_spec().cases[0].inputs["alpha"]
    monkeypatch.setattr(_engine, "SEED_OFFSET", offset)
    assert not torch.equal(base, chapters_1_3._score_gradient_spec().cases[0].inputs["alpha"])
    assert checks.check_score_gradient(lambda alpha, b: attention.score_gradient(alpha, b)[0])
    assert checks.check_advantage_flow(diagnostics.advantage_flow)
    assert checks.check_steps_to(_steps_to_right)


# ----------------------------------------------------------------------------- the package

def test_the_package_exports_every_check_of_its_modules():
    """checks.check_<name> is how chapters, problem sets and the grader reach a check: a check defined in
    a module of the package but not exported would be unreachable (dead)."""
    folder = Path(checks.__file__).parent
    defined = {node.name for path in folder.glob("*.py") for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")}
    exported = {name for name in checks.__all__ if name.startswith("check_")}
    assert defined == exported, f"defined, not exported: {defined - exported}; exported, undefined: {exported - defined}"
    assert all(callable(getattr(checks, name)) for name in checks.__all__)


# ----------------------------------------------------------------------------- until_written (learner copies)

@pytest.mark.parametrize("check", list(checks.fallback.SPEC_OF), ids=lambda c: c.__name__)
def test_every_reference_answer_passes_its_check(check):
    """The stand-in answers with each Output's compute without knobs: it must be the check's reference."""
    assert check(_engine.reference(checks.fallback.SPEC_OF[check]()))


def test_an_unwritten_stub_answers_with_the_reference_and_says_so(capsys):
    @checks.until_written(checks.check_qkv_gradients)
    def qkv_gradients(q, k, v, alpha, ds, u):
        raise NotImplementedError("write qkv_gradients: see the exercise above")

    T, d = 4, 3
    gen = torch.Generator().manual_seed(0)
    q, k, v, ds, u = (torch.randn(T, d, generator=gen, dtype=torch.float64) for _ in range(5))
    alpha = torch.softmax(torch.randn(T, T, generator=gen, dtype=torch.float64), -1)
    ds = torch.randn(T, T, generator=gen, dtype=torch.float64)
    dq, dk, dv = qkv_gradients(q, k, v, alpha, ds=ds, u=u)
    assert torch.allclose(dq, ds @ k / math.sqrt(d)) and torch.allclose(dv, alpha.T @ u)
    assert "qkv_gradients is not written yet" in capsys.readouterr().out
    qkv_gradients(q, k, v, alpha, ds, u)  # outside IPython: said once
    assert capsys.readouterr().out == ""
    verdict = checks.check_qkv_gradients(qkv_gradients)  # the check sees the stub, not the reference
    assert not verdict and "NotImplementedError" in verdict.message


def test_a_written_function_that_passes_its_check_is_used_as_it_is():
    reference, calls = _engine.reference(chapters_1_3._error_signal_spec()), []

    @checks.until_written(checks.check_error_signal)
    def error_signal(logits, y, W_O):
        calls.append(1)
        return reference(logits, y, W_O)

    spec = chapters_1_3._error_signal_spec()
    inputs = list(spec.cases[0].inputs.values())
    assert torch.allclose(error_signal(*inputs)[0], reference(*inputs)[0]) and calls


def test_a_written_function_that_fails_its_check_gives_way_to_the_reference_and_says_why(capsys):
    """A subtly wrong function (here: the wrong sign) would make every later figure disagree with the
    text; the cell says so and uses the reference instead. The check still sees the learner's function."""
    reference = _engine.reference(chapters_1_3._error_signal_spec())

    @checks.until_written(checks.check_error_signal)
    def error_signal(logits, y, W_O):
        return tuple(-t for t in reference(logits, y, W_O))

    inputs = list(chapters_1_3._error_signal_spec().cases[0].inputs.values())
    assert torch.allclose(error_signal(*inputs)[0], reference(*inputs)[0])
    assert "error_signal does not pass its check yet" in capsys.readouterr().out
    assert not checks.check_error_signal(error_signal)


def test_until_written_names_what_it_expected():
    with pytest.raises(ValueError, match="expected one of the chapters' checks"):
        checks.until_written(checks.check_seeds)
    with pytest.raises(ValueError, match="expected a function"):
        checks.until_written(checks.check_error_signal)(3)
    reference = _engine.reference(chapters_1_3._qkv_spec())
    with pytest.raises(TypeError, match="missing u"):
        reference(1, 2, 3, 4, 5)


def test_score_gradient_returning_b_itself_is_named_as_such():
    """Returning b is two mistakes of the pair table at once; its message must not claim b - E_alpha[b]."""
    result = failed(checks.check_score_gradient(lambda alpha, b: b), "you returned b itself")
    assert "b - E_alpha[b]" not in result.message


def test_a_mistake_no_flaw_explains_gets_the_relative_error_a_hint_and_the_formula_folded():
    """The diagonal of the Jacobian alone, alpha (1 - alpha) b: no flaw of the table fits. The message says
    how far off it is relative to the reference, gives the hint in words, and the notebook view folds the
    formula away so that the hint comes first."""
    result = failed(checks.check_score_gradient(lambda alpha, b: alpha * (1 - alpha) * b),
                    "of the reference there", "Hint: go through the weights", "Compare with dL/ds")
    shown = result._repr_markdown_()
    assert shown.index("Hint:") < shown.index("<details>") < shown.index("dL/ds = alpha")


# ----------------------------------------------------------------------------- a check the wheel lacks

def test_a_check_the_installed_package_lacks_fails_in_words_instead_of_raising():
    # a question the instructor added in course.toml: its check lives only where the grader runs
    from bayesattn_lite.checks import check_my_added_question  # the import a check cell does works too
    result = check_my_added_question(lambda x: x, "any", extra=1)
    assert isinstance(result, checks.CheckResult) and not result
    assert result.name == "my_added_question"
    assert "not in the installed bayesattn_lite" in result.message and "grader decides" in result.message
    assert checks.check_other_one().name == "other_one"
    assert "Did you mean" not in result.message
    assert "Did you mean check_score_gradient?" in checks.check_score_gradients(lambda x: x).message   # a typo
    assert checks.check_score_gradient is chapters_1_3.check_score_gradient  # real checks are untouched
    with pytest.raises(AttributeError, match="no attribute 'not_a_check'"):
        checks.not_a_check  # noqa: B018 - only check_* names fall back


def test_markov_floors_say_which_floors_are_right_and_which_mistake_for_partial_credit():
    nats = checks.check_markov_floors(lambda P: tuple(v * math.log(2) for v in floors_right(P)))
    assert nats.right == () and nats.mistakes == ("log",) and nats.outputs == ("The entropy rate", "The shuffled floor")
    half = checks.check_markov_floors(lambda P: (floors_right(P)[0], 0.123))
    assert half.right == ("The entropy rate",) and half.mistakes == ()  # no named mistake gives 0.123


def _zeros_like_reference(spec):
    reference = _engine.reference(spec)

    def zeros(*args):
        out = reference(*args)
        return tuple(o * 0 for o in out) if isinstance(out, tuple) else out * 0
    return zeros


@pytest.mark.parametrize("check, spec", [
    (checks.check_biased_qk_gradients, problem_sets._biased_spec),
    (checks.check_second_order_attention_change, problem_sets._second_order_spec),
    (checks.check_tempered_score_change, problem_sets._tempered_spec),
])
def test_a_problem_set_check_names_the_mistake_without_the_answers_formula(check, spec):
    """The problem sets are graded: a student's check cell must not print the answer's formula, however
    wrong the answer (zeros are how a student would ask for it); the grader's practice mode keeps it."""
    result = check(_zeros_like_reference(spec()))
    assert not result.passed and "all zeros" in result.message
    for out in spec().outputs:
        assert out.formula not in result.message and out.formula in result.practice
    assert _engine.FORMULA not in result.message and "Hint:" not in result.message


def test_the_floors_and_the_basis_checks_name_the_mistake_without_the_answer():
    result = checks.check_markov_floors(lambda P: (0.123, 0.456))
    assert "Compare with" not in result.message and "sum_i pi_i H(P_i)" in result.practice
    weights = checks.check_markov_floors(lambda P: (floors_right(P, weights="uniform")[0], floors_right(P)[1]))
    assert "1/n" in weights.message and "sum_i pi_i" not in weights.message and weights.mistakes == ("weights",)

    def top_directions(W_O):
        u, _, _ = torch.linalg.svd(W_O.T, full_matrices=False)
        return u[:, : W_O.shape[0] - 1]
    basis = checks.check_value_update_basis(top_directions)
    assert "singular directions" in basis.message and "11^T" not in basis.message and "11^T" in basis.practice


@pytest.mark.parametrize("wrong, said", [
    (lambda right: 2 * right, "constant multiple"),
    (lambda right: right + 0.1 * (right == right.max()), "differs from the reference"),
])
def test_a_problem_set_check_says_where_an_unnamed_mistake_is_without_the_fix(wrong, said):
    """An answer no known mistake explains: the student's cell says where it is wrong, never by what factor
    or what the reference is (either would be the fix); the grader's practice mode keeps both."""
    reference = _engine.reference(problem_sets._tempered_spec())
    result = checks.check_tempered_score_change(lambda *args: wrong(reference(*args)))
    assert not result.passed and said in result.message, result.message
    assert "the reference is" not in result.message and "times the right answer" not in result.message
    assert "the reference is" in result.practice or "times the right answer" in result.practice


@pytest.mark.parametrize("check, spec", [
    (checks.check_tempered_score_change, problem_sets._tempered_spec),
    (checks.check_second_order_attention_change, problem_sets._second_order_spec),
])
def test_a_transposed_square_answer_is_named(check, spec):
    """A (T, T) answer's shape cannot show a transpose: its numbers do."""
    reference = _engine.reference(spec())
    result = check(lambda *args: reference(*args).T)
    assert not result.passed and "transpose of the right answer" in result.message, result.message
    assert "no known mistake fits" not in result.message and "differs from the reference" not in result.message
    assert _engine.FORMULA not in result.message and "transpose of the right answer" in result.practice


def test_the_floors_check_does_not_print_the_reference_floors():
    result = checks.check_markov_floors(lambda P: (0.123, 0.456))
    assert "0.123" in result.message and "the reference is" not in result.message, result.message
    assert "the reference is" in result.practice


def test_a_named_mistake_is_cut_at_its_first_clause():
    assert _engine.named_only("the temperature appears once; it appears twice: 1/tau^2.") == \
        "the temperature appears once."


def test_every_named_mistake_of_the_problem_sets_reads_as_a_sentence():
    """What a graded cell shows of a named mistake is its first clause: never cut inside a formula."""
    specs = [problem_sets._second_order_spec()] + [problem_sets._biased_spec(f) for f in problem_sets.BIASED_FORMS] \
        + [problem_sets._tempered_spec(f) for f in problem_sets.TEMPERED_FORMS]
    for spec in specs:
        for out in spec.outputs:
            for flaw in out.flaws:
                named = _engine.named_only(flaw.words)
                assert not named.endswith((" .", "+ .", "= .")) and len(named.split()) >= 2, (spec.name, named)


@pytest.mark.parametrize("name", [n for n in checks.__all__ if n.startswith("check_")
                                  and next(iter(__import__("inspect").signature(getattr(checks, n)).parameters)) == "fn"])
def test_a_check_given_something_else_than_a_function_says_so(name):
    """The usual slip: the function's result (or the function called) passed instead of the function."""
    failed(getattr(checks, name)(torch.zeros(3)), "expected your function", "got Tensor of shape (3,)",
           "pass the function itself")


def test_the_value_basis_check_gives_its_layout_hint_only_for_an_error_about_shapes():
    def typo(W_O):
        return W_O.dtyp

    def wrong_layout(W_O):
        return torch.zeros(2, 3) @ W_O

    assert "nn.Linear stores it" not in checks.check_value_update_basis(typo).message
    assert "nn.Linear stores it" in checks.check_value_update_basis(wrong_layout).message

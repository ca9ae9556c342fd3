"""bayesattn_lite.checks: right answers pass, typical mistakes are named in words, nothing raises."""

import math

import numpy as np
import pytest
import torch
from torch.nn.functional import one_hot

from bayesattn_lite import attention, checks


def failed(result, *phrases):
    """Assert the result failed, displays as such, and its message says every phrase."""
    assert isinstance(result, checks.CheckResult)
    assert not result and result.passed is False
    assert "❌" in result._repr_markdown_() and "❌" in repr(result)
    assert "Traceback" not in result.message
    for phrase in phrases:
        assert phrase in result.message, (phrase, result.message)
    return result


# ----------------------------------------------------------------------------- CheckResult

def test_result_displays_a_verdict():
    ok = checks.CheckResult("demo", True, "fine")
    assert ok and repr(ok) == "✅ demo: fine" and ok._repr_markdown_() == "✅ demo: fine"
    bad = checks.CheckResult("demo", False, "broken")
    assert not bad and repr(bad) == "❌ demo: broken" and bad._repr_markdown_() == "❌ demo: broken"


# ----------------------------------------------------------------------------- error signal

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


# ----------------------------------------------------------------------------- problem sets 2 and 3

def test_assignment_checks_pass_the_references_and_name_typical_mistakes():
    from bayesattn_lite import diagnostics
    assert checks.check_predicted_attention_change(diagnostics.predicted_attention_change)
    wrong = checks.check_predicted_attention_change(lambda a, A, eta: -diagnostics.predicted_attention_change(a, A, eta))
    assert not wrong and "wrong sign" in wrong.message
    assert checks.check_e_step(lambda x, m, v: torch.softmax(-torch.cdist(x, m) ** 2 / (2 * v), dim=1))
    wrong = checks.check_e_step(lambda x, m, v: torch.softmax(-torch.cdist(x, m) ** 2 / (2 * v), dim=0))
    assert not wrong and "wrong axis" in wrong.message
    assert checks.check_m_step_means(lambda x, r: r.T @ x / r.sum(0)[:, None])
    wrong = checks.check_m_step_means(lambda x, r: r.T @ x)
    assert not wrong and "not divided" in wrong.message
    assert checks.check_settling_step(diagnostics.settling_step)
    wrong = checks.check_settling_step(lambda steps, rates, t: int(steps[(rates < t).argmax()]))
    assert not wrong and "stays" in wrong.message
    assert not checks.check_settling_step(lambda *a: 1 / 0)  # a verdict, not an exception


def test_experiment_checks():
    results = {"a": {0: 1.0, 1: 1.1, 2: 1.2}, "b": {0: 2.0, 1: 2.1, 2: 2.2}}
    assert checks.check_hypothesis("On bijection the Transformer reaches a lower entropy error in bits than the LSTM")
    assert not checks.check_hypothesis("too short")
    assert not checks.check_hypothesis("this is a long sentence with many words but it says nothing testable at all")
    assert checks.check_seeds(results)
    assert not checks.check_seeds({"a": {0: 1.0}, "b": {0: 2.0}})
    assert not checks.check_seeds({"a": {0: 1, 1: 1, 2: 1}, "b": {0: 1, 1: 1, 3: 1}})
    assert not checks.check_seeds({"a": {0: float("nan")}, "b": {0: 1.0}})
    assert checks.check_reproducible(lambda c, s: results[c][s], results)
    assert not checks.check_reproducible(lambda c, s: results[c][s] + 1, results)
    assert not checks.check_reproducible(lambda c, s: 1 / 0, results)
    good = "The mean error of a was 1.10 bits against 2.10 for b, which supports the hypothesis that a is lower."
    assert checks.check_conclusion(good, results)
    assert not checks.check_conclusion(good.replace("1.10", "1.50").replace("2.10", "2.50"), results)
    assert not checks.check_conclusion(good.replace("supports", "goes with"), results)


# ---- Chapter exercises, chapters 1-3 (keep this marker; add above the next one) ----


# ---- Chapter exercises, chapters 4-5 (keep this marker; add above the next one) ----


# ---- Chapter exercises, chapters 6-9 (keep this marker; add above the next one) ----


# ---- Problem-set checks (keep this marker; add below it) ----

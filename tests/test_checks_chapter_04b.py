"""The checks of chapter 4b's coding exercises: the reference passes, each named mistake fails with its
explanation, and a function that raises or returns the wrong thing gets a readable verdict.

- ``check_content_margin`` (``checks.chapter_04b``), the measure of the chapter's ablations;
- ``check_advantage_flow`` (``checks.chapters_4_5``): its mask-on-the-query-axis mistake, found by the
  learner review, and that no mistake's message gives the whole answer away."""

import numpy as np
import pytest
import torch

from bayesattn_lite import checks, diagnostics, specialisation
from bayesattn_lite.checks import chapter_04b, chapters_4_5
from checking import failed


# ----------------------------------------------------------------------------- content margin

def _logits(W_O, W_V, means):
    return means @ (W_O @ W_V).T          # row z: the logits of the input mu_z


def margin_right(W_O, W_V, means):
    logits = _logits(W_O, W_V, means)
    K, own = logits.shape[0], logits.diagonal()
    return ((own - (logits.sum(1) - own) / (K - 1)).mean())


def margin_all_classes(W_O, W_V, means):
    logits = _logits(W_O, W_V, means)
    return (logits.diagonal() - logits.mean(1)).mean()


def margin_own_only(W_O, W_V, means):
    return _logits(W_O, W_V, means).diagonal().mean()


def margin_max_rival(W_O, W_V, means):
    logits = _logits(W_O, W_V, means)
    others = logits.masked_fill(torch.eye(len(logits), dtype=torch.bool), float("-inf"))
    return (logits.diagonal() - others.max(1).values).mean()


def test_content_margin_is_exported_and_listed():
    assert "check_content_margin" in chapter_04b.__all__
    assert checks.check_content_margin is chapter_04b.check_content_margin


def test_content_margin_reference_and_other_forms_pass():
    assert checks.check_content_margin(margin_right)
    assert checks.check_content_margin(lambda W_O, W_V, m: float(margin_right(W_O, W_V, m)))      # a float
    assert checks.check_content_margin(lambda W_O, W_V, m: margin_right(W_O, W_V, m).numpy())     # numpy
    assert checks.check_content_margin(
        lambda W_O, W_V, m: specialisation.content_margin({"W_O": W_O, "W_V": W_V}, m))           # the package


def test_content_margin_reference_is_the_package_function():
    spec = chapter_04b._content_margin_spec()
    for case in spec.cases:
        inp = case.inputs
        package = specialisation.content_margin({"W_O": inp["W_O"], "W_V": inp["W_V"]}, inp["means"])
        assert float(case.expected[0]) == pytest.approx(package, rel=1e-12)
        assert package > 0          # the problems look like a learned content map


@pytest.mark.parametrize("fn, phrases", [
    (lambda W_O, W_V, m: -margin_right(W_O, W_V, m), ["wrong sign"]),
    (margin_all_classes, ["all K classes", "(K - 1)/K"]),
    (margin_own_only, ["own class's logit alone"]),
    (margin_max_rival, ["strongest other class"]),
])
def test_content_margin_mistakes_are_named(fn, phrases):
    failed(checks.check_content_margin(fn), *phrases)


def test_content_margin_flaw_messages_do_not_give_the_answer():
    for flaw in chapter_04b._MARGIN.flaws:
        assert "content_margin" not in flaw.words and "W_O @ W_V" not in flaw.words and "sum(" not in flaw.words


@pytest.mark.parametrize("fn, phrases", [
    (lambda W_O, W_V, m: 1 / 0, ["raised ZeroDivisionError"]),
    (lambda: 0, ["TypeError", "takes 0 positional arguments"]),
    (lambda W_O, W_V, m: None, ["got None"]),
    (lambda W_O, W_V, m: "margin", ["got str"]),
    (lambda W_O, W_V, m: _logits(W_O, W_V, m), ["expected shape ()"]),
    (lambda W_O, W_V, m: 3 * margin_right(W_O, W_V, m), ["the reference is", "Hint:", "Compare with"]),
])
def test_content_margin_raising_or_wrong_answers_get_a_readable_verdict(fn, phrases):
    failed(checks.check_content_margin(fn), *phrases)


# ----------------------------------------------------------------------------- advantage flow: the mask's axis

def flow_right(alpha, advantage, key_mask):
    return (alpha * advantage * key_mask.to(alpha.dtype)[None, :]).sum(-1)


def flow_mask_on_queries(alpha, advantage, key_mask):
    return (alpha * advantage * key_mask.to(alpha.dtype)[:, None]).sum(-1)


def test_advantage_flow_reference_still_passes():
    assert checks.check_advantage_flow(diagnostics.advantage_flow)
    assert checks.check_advantage_flow(flow_right)
    assert checks.check_advantage_flow(lambda a, A, m: (a * A * m).sum(-1))   # broadcasting does it right


def test_advantage_flow_mask_on_the_query_axis_is_named_not_taken_for_a_missing_mask():
    result = failed(checks.check_advantage_flow(flow_mask_on_queries), "wrong axis", "[:, None]", "flags keys")
    assert "not over the set" not in result.message
    failed(checks.check_advantage_flow(lambda a, A, m: (a * A * m.unsqueeze(1)).sum(-1)), "mask is on the wrong axis")
    # the missing mask keeps its own explanation
    missing = failed(checks.check_advantage_flow(lambda a, A, m: (a * A).sum(-1)), "not over the set", "exactly 0")
    assert "[:, None]" not in missing.message


def test_advantage_flow_problems_tell_the_two_mask_mistakes_apart():
    """On a real advantage map both mistakes return zeros; one problem's map is shifted per query so they differ."""
    spec = chapters_4_5._advantage_flow_spec()
    no_mask = [chapters_4_5._flow(c.inputs, masked=False) for c in spec.cases]
    on_queries = [chapters_4_5._flow(c.inputs, masked="queries") for c in spec.cases]
    assert any(not torch.allclose(a, b) for a, b in zip(no_mask, on_queries))
    # the other problems are real advantage maps: each row averages to zero under alpha
    for case in spec.cases[:-1]:
        assert torch.allclose((case.inputs["alpha"] * case.inputs["advantage"]).sum(-1),
                              torch.zeros(case.dims["T"], dtype=torch.float64), atol=1e-12)


def test_advantage_flow_flaw_messages_do_not_print_the_answer_formula():
    formula = chapters_4_5._FLOW.formula
    answer_code = formula.split("i.e. ")[-1]
    for flaw in chapters_4_5._FLOW.flaws:
        assert answer_code not in flaw.words
        assert "alpha_ij A_ij" not in flaw.words, flaw.words      # the summand, written out
        assert "* key_mask" not in flaw.words and "key_mask[None" not in flaw.words
    assert "alpha_ij A_ij" not in chapters_4_5._FLOW.hint


def test_advantage_flow_is_never_raised_through():
    failed(checks.check_advantage_flow(lambda a, A, m: 1 / 0), "ZeroDivisionError")
    failed(checks.check_advantage_flow(lambda: 0), "TypeError")
    failed(checks.check_advantage_flow(lambda a, A, m: np.zeros(3)), "expected a tensor of shape")

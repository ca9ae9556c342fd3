"""bayesattn_lite._types: the declared shapes, checked, and the package's message for a mismatch."""

import inspect

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError

from bayesattn_lite._types import Flag, Float, Int, Shaped, Tensor, checked, words


@checked
def scores(q: Float[Tensor, "*B Tq d_k"], k: Float[Tensor, "*B Tk d_k"], y: Int[Tensor, "*B Tq"] | None = None,
           causal: Flag = True) -> Float[Tensor, "*B Tq Tk"]:
    return q @ k.transpose(-1, -2)


@checked
def outer(x: Float[Tensor, "n d"]) -> Float[Tensor, "3 n"]:
    """A checked function that calls another with a shape of its own (a nested record of sizes)."""
    return scores(x[:3], x)


def test_valid_calls_pass_through():
    assert scores(torch.zeros(4, 8), torch.zeros(6, 8)).shape == (4, 6)
    assert scores(torch.zeros(2, 4, 8), torch.zeros(2, 6, 8), torch.zeros(2, 4, dtype=torch.long)).shape == (2, 4, 6)
    assert scores(torch.zeros(4, 8), torch.zeros(6, 8), causal=np.bool_(False)).shape == (4, 6)   # numpy's bool too
    assert outer(torch.zeros(5, 2)).shape == (3, 5)


@pytest.mark.parametrize("args, message", [
    ((torch.zeros(4, 8, dtype=torch.long), torch.zeros(6, 8)),
     r"^q: expected a float tensor of shape \(\*B, Tq, d_k\), got Tensor of shape \(4, 8\) and dtype torch.int64$"),
    ((torch.zeros(8), torch.zeros(6, 8)), r"^q: expected a float tensor of shape \(\*B, Tq, d_k\), got Tensor of shape \(8,\)"),
    (([1.0], torch.zeros(6, 8)), r"^q: expected a float tensor .*, got \[1.0\]$"),
    ((torch.zeros(4, 8), torch.zeros(6, 5)), r"^k: expected .* with d_k = 8 \(as in q\), got Tensor of shape \(6, 5\)"),
    ((torch.zeros(2, 4, 8), torch.zeros(3, 6, 8)), r"^k: expected .* with \*B = \(2,\) \(as in q\), got"),
    ((torch.zeros(4, 8), torch.zeros(6, 8), torch.zeros(3, dtype=torch.long)),
     r"^y: expected an integer tensor of shape \(\*B, Tq\) or None with Tq = 4 \(as in q\), got"),
    ((torch.zeros(4, 8), torch.zeros(6, 8), None, "yes"), r"^causal: expected True or False, got 'yes'$"),
])
def test_a_mismatch_is_the_packages_one_message(args, message):
    with pytest.raises(ValueError, match=message):
        scores(*args)


def test_a_nested_call_is_judged_by_its_own_arguments():
    """The inner call's sizes are its own: a message for the inner function names the inner arguments."""
    with pytest.raises(ValueError, match=r"^x: expected a float tensor of shape \(n, d\), got .*\(5,\)"):
        outer(torch.zeros(5))


def test_check_false_skips_every_check():
    @checked
    def step(x: Float[Tensor, "n d"], check: Flag = True):
        return "ran"

    assert step(torch.zeros(3), check=False) == "ran"
    with pytest.raises(ValueError, match="^x: expected"):
        step(torch.zeros(3))


@pytest.mark.parametrize("call, message", [
    (lambda: scores(torch.zeros(4, 8), torch.zeros(6, 8), casual=False),
     r"scores\(\): got an unexpected keyword argument 'casual'; did you mean 'causal'\? \(it takes q, k, y, causal\)$"),
    (lambda: scores(torch.zeros(4, 8)), r"scores\(\): missing a required argument: 'k' \(it takes q, k, y, causal\)$"),
])
def test_a_call_that_does_not_fit_the_signature_names_the_function_and_its_parameters(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_a_type_error_inside_the_function_is_its_own():
    @checked
    def inner(x: Float[Tensor, "n d"]):
        raise TypeError("from inside")

    with pytest.raises(TypeError, match="^from inside$"):
        inner(torch.zeros(3, 2))


def test_a_wrong_return_is_the_packages_fault_not_the_callers():
    @checked
    def broken(x: Float[Tensor, "n d"]) -> Float[Tensor, "n n"]:
        return x

    with pytest.raises(TypeCheckError):
        broken(torch.zeros(3, 2))


def test_the_signature_shows_the_shapes():
    """What help() prints: the shapes are documentation too."""
    text = str(inspect.signature(scores))
    assert "Float[Tensor, '*B Tq d_k']" in text and "Float[Tensor, '*B Tq Tk']" in text
    assert scores.__wrapped__.__name__ == "scores"


def test_words():
    assert words(Float[Tensor, "n d"]) == "a float tensor of shape (n, d)"
    assert words(Float[Tensor, " n"]) == "a float tensor of shape (n,)"
    assert words(Float[Tensor | np.ndarray, "n d"]) == "a float tensor or array of shape (n, d)"
    assert words(Shaped[np.ndarray, "*S"]) == "an array of shape (*S)"
    assert words(Flag | None) == "True or False or None"


def test_unchecked_skips_the_annotations_inside_it_only():
    from bayesattn_lite._types import unchecked

    @checked
    def width(x: Float[Tensor, "n d"]) -> int:
        return x.shape[-1]

    with unchecked():
        assert width(torch.zeros(3)) == 3   # a package loop's own measurement: not checked again

    @unchecked()
    def measure():
        return width(torch.zeros(4))

    assert measure() == 4
    with pytest.raises(ValueError, match="^x: expected"):   # outside, checked as before
        width(torch.zeros(3))


def test_words_say_where_a_class_comes_from():
    from collections.abc import Sequence
    from typing import Annotated

    import matplotlib.axes

    from bayesattn_lite.experiments import ScheduleRun
    from bayesattn_lite.specialisation import Run

    assert words(ScheduleRun) == "an experiments.ScheduleRun (what run_schedules returns)"
    assert words(Sequence[Run]) == "a list, each a specialisation.Run (what run or run_seeds returns)"
    assert words(Annotated[matplotlib.axes.Axes, "fig, ax = plt.subplots()"]) == \
        "a matplotlib Axes (fig, ax = plt.subplots())"
    assert words(torch.Generator | None) == "a torch.Generator or None"


@pytest.mark.parametrize("call, message", [
    ("specialisation.make_task('x')",
     r"^cfg: expected a specialisation\.Config \(Config\.paper\(\), Config\.small\(\.\.\.\)\), got 'x'$"),
    ("specialisation.continue_training([], 3)", r"^runs: expected at least one Run, got none$"),
    ("experiments.bought_after({}, 3)", r"^fp: expected an experiments\.FramePrecision \(frame_precision, "),
    ("experiments.long_run('cfg')", r"^cfg: expected an experiments\.LongRunConfig, got 'cfg'$"),
    ("models.count_parameters('m')", r"^model: expected a torch\.nn\.Module, got 'm'$"),
    ("plots.heatmap(3, [[1.0]])", r"^ax: expected a matplotlib Axes \(fig, ax = plt\.subplots\(\)\), got 3$"),
    ("converged.measure_run(None, 'hmm')", r"^model: expected a torch\.nn\.Module \(e\.g\. from load_pretrained\), got None"),
    ("attention.AttentionHead(4, 3, 3, 5, causal='no')", r"^causal: expected True or False, got 'no'$"),
])
def test_a_declared_class_is_named_with_where_it_comes_from(call, message):
    """Checks by hand that the signatures replaced: the message still names the argument, the type and
    where one comes from."""
    from bayesattn_lite import attention, converged, experiments, models, plots, specialisation  # noqa: F401

    with pytest.raises(ValueError, match=message):
        eval(call)

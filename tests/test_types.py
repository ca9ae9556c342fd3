"""bayesattn_lite._types: the declared shapes, checked, and the package's message for a mismatch."""

import dataclasses
import inspect
import math

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError

from bayesattn_lite import attention, experiments, models, monitor, specialisation, tasks, train
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


def test_a_checked_class_names_a_misspelt_constructor_argument_and_leaves_its_fields_alone():
    @checked
    @dataclasses.dataclass(frozen=True)
    class Settings:
        steps: int = 10
        lr: float = 0.1

    with pytest.raises(TypeError, match=r"Settings\(\): got an unexpected keyword argument 'stpes'; did you mean "
                                        r"'steps'\? \(it takes steps, lr\)$"):
        Settings(stpes=3)
    assert Settings(steps=3.5).steps == 3.5   # field types are the class's business, not the check's


def test_a_misspelt_required_argument_is_named_before_the_missing_one():
    with pytest.raises(TypeError, match=r"train\.Recipe\(\): got an unexpected keyword argument 'stpes'; "
                                        r"did you mean 'steps'\? \(it takes steps, "):
        train.Recipe(stpes=10)


def test_a_check_false_call_still_names_a_misspelt_argument():
    @checked
    def step(x: Float[Tensor, "n d"], lr=0.1, check: Flag = True):
        return x * lr

    with pytest.raises(TypeError, match=r"step\(\): got an unexpected keyword argument 'lrr'; did you mean 'lr'"):
        step(torch.zeros(3, 2), lrr=0.5, check=False)


@pytest.mark.parametrize("call, message", [
    (lambda: attention.init_params(4, 3, 3, 2, devise="cpu"), r"attention\.init_params\(\): .*'devise'; did you mean 'device'"),
    (lambda: tasks.StickyMarkovChain(nosie=1.0), r"tasks\.StickyMarkovChain\(\): .*'nosie'; did you mean 'noise'"),
    (lambda: train.Recipe(10, optimiser="adam"), r"train\.Recipe\(\): .*'optimiser'; did you mean 'optimizer'"),
    (lambda: models.LSTMModel(10, 4, n_layer=2), r"models\.LSTMModel\(\): .*'n_layer'; did you mean 'n_layers'"),
    (lambda: specialisation.Config(stpes=10), r"specialisation\.Config\(\): .*'stpes'; did you mean 'steps'"),
    (lambda: experiments.EMvsSGDConfig(stpes=1), r"experiments\.EMvsSGDConfig\(\): .*did you mean 'steps'"),
    (lambda: monitor.measure_overhead(lambda: attention.AttentionHead(4, 3, 3, 2), lambda m, o, s: None, evry=1),
     r"monitor\.measure_overhead\(\): .*'evry'; did you mean 'every'\? \(it passes keep, probe to Monitor\)"),
])
def test_the_packages_constructors_and_entry_points_name_a_misspelt_argument(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_a_positional_argument_that_must_be_a_keyword_is_named_as_such():
    @checked
    def fit(model, data, *, seed=0, progress=False):
        return seed

    with pytest.raises(TypeError, match=r"fit\(\): too many positional arguments \(it takes model, data, and by "
                                        r"keyword only: seed, progress\)$"):
        fit(1, 2, 0)


def test_the_sizes_of_earlier_arguments_are_named_even_when_jaxtyping_does_not_list_them():
    """jaxtyping's message lists the axis sizes on some calls only (it depends on the order it tries a
    union's members in, so on the hash seed): the package reads them from the earlier arguments then."""
    from bayesattn_lite._types import _message

    q, k = torch.zeros(4, 8), torch.zeros(6, 5)
    message = _message(inspect.signature(scores.__wrapped__), "k", (q, k), {}, "no sizes listed", {})
    assert message.startswith("k: expected a float tensor of shape (*B, Tk, d_k) with d_k = 8 (as in q), got"), message


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


# ----------------------------------------------------------------------------- declared ranges (issue 38)

def _ranged():
    from bayesattn_lite._types import OneOf, Positive, Real, Seed, SeedBelow, Seeds, Whole

    @checked
    def f(steps: Whole(1) = 5, lr: Positive = 0.1, p: Real(0, 1, high_open=True) = 0.5, *, seed: Seed = 0,
          small: SeedBelow(16) = 0, schedule: OneOf("constant", "cosine") = "constant", every: Whole(0) | None = None,
          seeds: Seeds = (0,), check: Flag = True):
        return steps, lr, p, seed, small, schedule, every, seeds

    return f


@pytest.mark.parametrize("kind", [int, np.int64, np.int32, lambda v: torch.tensor(v), lambda v: np.array(v)])
def test_a_declared_range_accepts_every_kind_of_number_and_passes_python_numbers_on(kind):
    f = _ranged()
    got = f(kind(3), kind(2), torch.tensor(0.25), seed=kind(7), small=kind(15), every=kind(0), seeds=[kind(1), 2])
    assert got == (3, 2.0, 0.25, 7, 15, "constant", 0, (1, 2))
    assert [type(v) for v in got] == [int, float, float, int, int, str, int, tuple]
    assert type(got[-1][0]) is int
    assert type(f(np.int64(4), check=False)[0]) is int   # converted on the unchecked path too


@pytest.mark.parametrize("kwargs, message", [
    ({"steps": 0}, r"^steps: expected an int >= 1, got 0$"),
    ({"steps": True}, r"^steps: expected an int >= 1, got True$"),   # a bool is not a number
    ({"steps": 2.0}, r"^steps: expected an int >= 1, got 2.0$"),
    ({"steps": np.int64(0)}, r"^steps: expected an int >= 1, got np.int64\(0\)$"),   # the value as given
    ({"steps": torch.tensor([1, 2])}, r"^steps: expected an int >= 1, got Tensor of shape \(2,\)"),
    ({"lr": math.nan}, r"^lr: expected a positive finite number, got nan$"),
    ({"lr": math.inf}, r"^lr: expected a positive finite number, got inf$"),
    ({"lr": np.bool_(True)}, r"^lr: expected a positive finite number, got"),
    ({"lr": "0.1"}, r"^lr: expected a positive finite number, got '0.1'$"),
    ({"p": 1}, r"^p: expected a number in \[0, 1\), got 1$"),
    ({"p": math.nan}, r"^p: expected a number in \[0, 1\), got nan$"),
    ({"seed": -1}, r"^seed: expected an int in \[0, 2\*\*63\), got -1$"),
    ({"small": 16}, r"^small: expected an int in \[0, 16\), got 16$"),
    ({"schedule": "cosin"}, r"^schedule: expected one of \['constant', 'cosine'\], got 'cosin'$"),
    ({"every": -1}, r"^every: expected an int >= 0 or None, got -1$"),
    ({"seeds": (1, 1)}, r"^seeds: expected one or more distinct ints \(a seed given twice"),
    ({"seeds": (1, -1)}, r"^seeds\[1\]: expected an int in \[0, 2\*\*63\), got -1$"),
])
def test_a_declared_range_refuses_what_the_hand_checks_refused_in_their_words(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _ranged()(**kwargs)


def test_a_declared_range_is_said_by_help_and_words():
    from bayesattn_lite._types import OneOf, Real, Whole

    assert words(Whole(1)) == "an int >= 1" and words(Whole(0, 9)) == "an int >= 0 and <= 9"
    assert words(Real(0, 1, low_open=True)) == "a number in (0, 1]" and words(Real()) == "a finite number"
    assert words(OneOf({"b": 1, "a": 2})) == "one of ['a', 'b']"   # a dict's keys sorted, as _validate.choice
    assert "steps: typing.Annotated[object, an int >= 1] = 5" in str(inspect.signature(_ranged()))


def test_a_dataclass_declares_its_fields():
    from bayesattn_lite._types import Positive, Whole, declared_fields

    @dataclasses.dataclass(frozen=True)
    class Settings:
        steps: Whole(1) = 10
        lr: Positive | None = None

        def __post_init__(self):
            declared_fields(self)

    assert type(Settings(np.int64(3), np.float32(0.5)).steps) is int and Settings(lr=None).lr is None
    with pytest.raises(ValueError, match=r"^steps: expected an int >= 1, got 0$"):
        Settings(0)
    with pytest.raises(ValueError, match=r"^lr: expected a positive finite number or None, got -1$"):
        Settings(lr=-1)


def test_a_flag_takes_a_python_numpy_or_0d_torch_bool_and_passes_a_python_one():
    @checked
    def flag(on: Flag = True):
        return on

    for value in (True, np.bool_(False), torch.tensor(True)):
        assert type(flag(value)) is bool and flag(value) == bool(value)
    for bad in ("no", 1, torch.tensor([True])):
        with pytest.raises(ValueError, match="on: expected True or False"):
            flag(bad)


def test_a_size_clash_says_when_later_arguments_side_with_the_one_refused():
    """x's d_x is the odd one out, but x comes first: W_Q is refused, and the message says that W_K
    and W_V agree with W_Q, so x may be the one to change."""
    params = attention.init_params(4, 3, 3, 5)
    with pytest.raises(ValueError, match=r"W_Q: expected .* d_x = 5 \(as in x\).*\(W_K, W_V have d_x = 4 too: "
                                         r"x may be the one to change\)"):
        attention.forward(torch.zeros(2, 6, 5), params)
    wrong_w_q = {**params, "W_Q": torch.zeros(3, 5)}   # here W_Q is the odd one: no such hint
    with pytest.raises(ValueError, match=r"W_Q: expected .* d_x = 4 \(as in x\), got Tensor of shape \(3, 5\)[^(]*$"):
        attention.forward(torch.zeros(2, 6, 4), wrong_w_q)

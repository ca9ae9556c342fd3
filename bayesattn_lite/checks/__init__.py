"""Exercise checks that explain a wrong answer in words.

Each ``check_*`` function takes the learner's answer to one exercise (a function, mostly) and runs it
on a few random problems, compares it with the reference and returns a ``CheckResult``, which a
notebook displays as "✅ name: message" or "❌ name: message". A check never raises, whatever the
learner's function does. When the answer is wrong the check says why: it names the usual mistake (a
flipped sign, a forgotten 1/T, a transpose too few, ...) that reproduces the learner's numbers, or
else where the answer is off and the formula to compare against.

    from bayesattn_lite import checks
    checks.check_score_gradient(my_score_gradient)     # -> ✅ score_gradient: matches ...

- ``_engine``        the one engine: a check's ``Spec``, its mistakes (``Flaw``), ``run`` and ``CheckResult``
- ``chapters_1_3``   the error signal, the score gradient, the attended gap, q/k/v and projection
                     gradients, the score-space kernel
- ``chapters_4_5``   the advantage flow, the E-step as attention
- ``chapters_6_9``   steps to a loss, the recall posterior, an LSTM's mixing weights (numpy answers)
- ``chapter_04`` ... ``chapter_09``  the coding exercises added to chapters 4-9 (one module a chapter)
- ``problem_sets``   the questions of book/assignments (the grader, ``instructor.grading``, runs them)
- ``fallback``       ``until_written``: in a learner copy, an unwritten exercise answers with the reference
                     (saying so), so the cells below it still run
"""

import difflib

from ._engine import CheckResult
from .chapters_1_3 import (check_attended_gap, check_error_signal, check_projection_gradients, check_qkv_gradients,
                           check_score_gradient, check_score_kernel)
from .chapters_4_5 import check_advantage_flow, check_responsibilities_as_attention
from .chapters_6_9 import check_lstm_mixing, check_recall_posterior, check_steps_to
from .fallback import until_written
from .chapter_04 import *   # noqa: F401,F403  (each chapter module lists its checks in __all__)
from .chapter_04b import *  # noqa: F401,F403
from .chapter_05 import *   # noqa: F401,F403
from .chapter_06 import *   # noqa: F401,F403
from .chapter_07 import *   # noqa: F401,F403
from .chapter_08 import *   # noqa: F401,F403
from .chapter_09 import *   # noqa: F401,F403
from . import chapter_04, chapter_04b, chapter_05, chapter_06, chapter_07, chapter_08, chapter_09
from .problem_sets import (check_biased_qk_gradients, check_markov_floors, check_reproducible, check_seeds,
                           check_second_order_attention_change, check_tempered_score_change, check_value_update_basis)

__all__ = [
    "CheckResult",
    "check_error_signal", "check_attended_gap", "check_score_gradient", "check_qkv_gradients",
    "check_projection_gradients", "check_score_kernel",
    "check_advantage_flow", "check_responsibilities_as_attention",
    "check_steps_to", "check_recall_posterior", "check_lstm_mixing",
    "check_biased_qk_gradients", "check_value_update_basis", "check_second_order_attention_change",
    "check_tempered_score_change", "check_reproducible", "check_seeds", "check_markov_floors",
    "until_written",
] + [name for module in (chapter_04, chapter_04b, chapter_05, chapter_06, chapter_07, chapter_08, chapter_09)
     for name in module.__all__]


def __getattr__(name):
    """``checks.check_<name>`` that this release does not have: a question the instructor added to a problem
    set (book/assignments/course.toml) after the wheel was built. The student's check cell then shows a
    failing verdict that says so, instead of an AttributeError that stops the notebook."""
    if not name.startswith("check_") or name == "check_":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    label = name.removeprefix("check_")
    near = difflib.get_close_matches(name, __all__, n=1, cutoff=0.85)   # a typo, more likely than a new question
    typo = f" Did you mean {near[0]}?" if near else ""

    def not_installed(*args, **kwargs):
        return CheckResult(label, False, f"this check ({name}) is not in the installed bayesattn_lite "
                           f"{_version()}.{typo} If your instructor added the question, the instructor's grader "
                           "decides it when you hand in; test your answer yourself meanwhile.")

    not_installed.__name__ = not_installed.__qualname__ = name
    return not_installed


def _version():
    from .. import __version__
    return __version__

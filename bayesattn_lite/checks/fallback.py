"""A learner copy's stand-in for an exercise not yet written, so the cells below it still run.

In a learner copy (``learner/NN_name.ipynb``) an exercise's function starts as a stub that raises
``NotImplementedError``. When a later cell of the chapter calls that function, the stub would stop
every cell after it. The generator (``instructor.learner_copies``) then decorates the stub:

    @checks.until_written(checks.check_qkv_gradients)
    def qkv_gradients(q, k, v, alpha, ds, u):
        raise NotImplementedError("write qkv_gradients: see the exercise above")

While the learner's function raises ``NotImplementedError``, a call answers with the check's reference
and prints once per cell that it did. Once the function is written, the check runs on it once: if it
passes, its own answer is used; if not, the reference answers and the cell says why, so that a subtly
wrong function cannot make the figures below disagree with the text without a word. The
check itself always sees the learner's function (``run`` unwraps ``learner_function``), so it never
passes on the reference's behalf.
"""

import functools

from .. import _validate
from . import (chapter_04, chapter_04b, chapter_05, chapter_06, chapter_07, chapter_08, chapter_09, chapters_1_3,
               chapters_4_5, chapters_6_9)
from ._engine import reference

# each chapter check -> the function that builds its Spec (the problem sets' questions are not here:
# their notebooks have no learner copy)
SPEC_OF = {
    chapters_1_3.check_error_signal: chapters_1_3._error_signal_spec,
    chapters_1_3.check_score_gradient: chapters_1_3._score_gradient_spec,
    chapters_1_3.check_attended_gap: chapters_1_3._attended_gap_spec,
    chapters_1_3.check_qkv_gradients: chapters_1_3._qkv_spec,
    chapters_1_3.check_projection_gradients: chapters_1_3._projection_spec,
    chapters_1_3.check_score_kernel: chapters_1_3._score_kernel_spec,
    chapters_4_5.check_advantage_flow: chapters_4_5._advantage_flow_spec,
    chapters_4_5.check_responsibilities_as_attention: chapters_4_5._responsibilities_spec,
    chapters_6_9.check_steps_to: chapters_6_9._steps_to_spec,
    chapters_6_9.check_recall_posterior: chapters_6_9._recall_spec,
    chapters_6_9.check_lstm_mixing: chapters_6_9._lstm_spec,
}
# the checks of chapters 4-9's newer exercises: each module's SPECS, {check: the function that builds its Spec}
for _module in (chapter_04, chapter_04b, chapter_05, chapter_06, chapter_07, chapter_08, chapter_09):
    SPEC_OF.update(getattr(_module, "SPECS", {}))


def _cell():
    """The notebook cell being run (IPython's execution count), or None outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "execution_count", None)


def until_written(check):
    """Decorator for a stub checked by ``check`` (a chapter's ``checks.check_*``): until the stub is
    written and passes ``check``, calls answer with the reference, saying so."""
    if check not in SPEC_OF:
        names = ", ".join(c.__name__ for c in SPEC_OF)
        _validate.fail("until_written(check)", f"one of the chapters' checks ({names})", check)

    def decorate(fn):
        _validate.function("until_written's function", fn, "a function to decorate")
        answer, verdict, told = None, None, set()

        def tell(what):   # once per cell
            if (_cell(), what) not in told:
                told.add((_cell(), what))
                print(what)

        @functools.wraps(fn)
        def learner_or_reference(*args, **kwargs):
            nonlocal answer, verdict
            try:
                mine = fn(*args, **kwargs)
                if verdict is None:   # the learner's function, checked once
                    verdict = check(learner_or_reference)
                if verdict:
                    return mine
                tell(f"({fn.__name__} does not pass its check yet, so this cell used the course's reference "
                     f"answer, and the figures and numbers below are the chapter's; the check says: "
                     f"{verdict.message})")
            except NotImplementedError:
                tell(f"({fn.__name__} is not written yet, so this cell used the course's reference "
                     f"answer; write it above and run this cell again to use yours.)")
            answer = answer or reference(SPEC_OF[check]())
            return answer(*args, **kwargs)

        learner_or_reference.learner_function = fn
        return learner_or_reference

    return decorate

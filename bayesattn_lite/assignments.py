"""The problem sets: which questions each has, how each is checked, and the student-version generator.

    python -m bayesattn_lite.assignments            # rewrite every student version from its instructor version
    python -m bayesattn_lite.assignments --check    # exit 1 if a committed student version is out of date

An instructor version ``book/assignments/<id>.ipynb`` is an executed notebook with the solutions in.
The generator writes ``book/assignments/<id>_student.ipynb`` from it:

- a code cell tagged ``solution`` keeps everything outside its ``# BEGIN SOLUTION: <hint>`` ...
  ``# END SOLUTION`` block; the block becomes ``raise NotImplementedError("<hint>")`` at the same
  indentation. A Markdown cell tagged ``solution`` has the block (HTML comments
  ``<!-- BEGIN SOLUTION: <hint> -->`` ... ``<!-- END SOLUTION -->``) replaced by "*Your answer here.*"
  and the hint;
- a cell tagged ``instructor`` is dropped;
- outputs and execution counts are cleared, and the metadata ``bayesattn_lite`` says which
  assignment this is (the grader reads it) and that it is the student version.

Every question names a ``checks`` function and the names of the learner's objects it is called on;
the grader (``bayesattn_lite.grading``) runs exactly that.
"""

import argparse
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "book" / "assignments"
STUDENT_SUFFIX = "_student"
SOLUTION_TAG, INSTRUCTOR_TAG = "solution", "instructor"


@dataclass(frozen=True)
class Question:
    id: str          # "q1", shown in the report
    title: str
    points: int
    check: str       # the name of a function of bayesattn_lite.checks
    names: tuple     # the learner's objects it is called with, in order


@dataclass(frozen=True)
class Assignment:
    id: str
    title: str
    chapters: str
    questions: tuple

    @property
    def instructor_path(self):
        return FOLDER / f"{self.id}.ipynb"

    @property
    def student_path(self):
        return FOLDER / f"{self.id}{STUDENT_SUFFIX}.ipynb"


ASSIGNMENTS = {a.id: a for a in (
    Assignment("ps1_derivations", "Problem set 1: the gradients of one head", "1-3", (
        Question("q1", "the error signal u", 2, "check_error_signal", ("error_signal",)),
        Question("q2", "the score gradient (advantage law)", 3, "check_score_gradient", ("score_gradient",)),
        Question("q3", "query, key and value gradients", 3, "check_qkv_gradients", ("qkv_gradients",)),
        Question("q4", "projection gradients", 2, "check_projection_gradients", ("projection_gradients",)),
    )),
    Assignment("ps2_dynamics", "Problem set 2: dynamics and the EM reading", "4-6", (
        Question("q1", "the advantage law's next attention", 3, "check_predicted_attention_change",
                 ("predicted_attention_change",)),
        Question("q2", "the E-step is an attention layer", 3, "check_e_step", ("e_step",)),
        Question("q3", "the M-step: responsibility-weighted means", 2, "check_m_step_means", ("m_step_means",)),
        Question("q4", "when does the frame settle?", 2, "check_settling_step", ("settling_step",)),
    )),
    Assignment("ps3_experiment", "Problem set 3: an experiment of your own design", "7-8", (
        Question("q1", "a falsifiable hypothesis", 2, "check_hypothesis", ("hypothesis",)),
        Question("q2", "a reproducible experiment", 4, "check_reproducible", ("run_condition", "results")),
        Question("q3", "several seeds per condition", 2, "check_seeds", ("results",)),
        Question("q4", "a conclusion that quotes the measurements", 2, "check_conclusion", ("conclusion", "results")),
    )),
)}


# ----------------------------------------------------------------------------- stubs

_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?::[ \t]*(?P<hint>.*?))?[ \t]*\n.*?^[ \t]*# END SOLUTION[ \t]*$\n?",
                         re.S | re.M)
_MD_BLOCK = re.compile(r"<!--\s*BEGIN SOLUTION(?::\s*(?P<hint>.*?))?\s*-->.*?<!--\s*END SOLUTION\s*-->", re.S)


def _code_stub(match):
    hint = (match.group("hint") or "write your solution here").strip()
    return f"{match.group('indent')}raise NotImplementedError({hint!r})\n"


def _md_stub(match):
    hint = (match.group("hint") or "").strip()
    return "*Your answer here.*" + (f" ({hint})" if hint else "")


def stub_source(source, cell_type="code"):
    """The source of a solution cell with every solution block replaced by its stub.

    Raises ValueError when there is no complete BEGIN/END block (a tagged cell would leak its solution).
    """
    pattern, stub = (_CODE_BLOCK, _code_stub) if cell_type == "code" else (_MD_BLOCK, _md_stub)
    new, n = pattern.subn(stub, source)
    if not source.endswith("\n"):
        new = new.rstrip("\n")
    if n == 0 or "BEGIN SOLUTION" in new or "END SOLUTION" in new:
        marker = "# BEGIN SOLUTION: hint ... # END SOLUTION" if cell_type == "code" else \
            "<!-- BEGIN SOLUTION: hint --> ... <!-- END SOLUTION -->"
        raise ValueError(f"a {cell_type} cell tagged {SOLUTION_TAG!r}: expected complete blocks {marker}, "
                         f"got:\n{source[:300]}")
    return new


def student_version(nb, assignment_id):
    """A new notebook: ``nb`` (an instructor version) with solutions stubbed, instructor cells dropped,
    outputs cleared."""
    student = copy.deepcopy(nb)
    cells = []
    for cell in student.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if INSTRUCTOR_TAG in tags:
            continue
        if SOLUTION_TAG in tags:
            cell.source = stub_source(cell.source, cell.cell_type)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.get("metadata", {}).pop("execution", None)
        cell.pop("id", None)
        cells.append(cell)
    student.cells = cells
    # only what does not depend on the kernel that executed the instructor version (its Python version
    # is in language_info): the student version changes when a source changes, not when it is re-run
    student.metadata = {
        "kernelspec": nb.metadata.get("kernelspec", {"display_name": "Python 3", "language": "python", "name": "python3"}),
        "language_info": {"name": "python"},
        "bayesattn_lite": {"assignment": assignment_id, "version": "student"},
    }
    return student


def render(assignment):
    """The student notebook of ``assignment`` as the text the generator writes."""
    import nbformat
    nb = nbformat.read(assignment.instructor_path, as_version=4)
    if nb.metadata.get("bayesattn_lite", {}).get("assignment") != assignment.id:
        raise ValueError(f"{assignment.instructor_path.name}: expected metadata bayesattn_lite.assignment = "
                         f"{assignment.id!r}, got {nb.metadata.get('bayesattn_lite')!r}")
    student = student_version(nb, assignment.id)
    for n, cell in enumerate(student.cells):  # stable ids: regenerating gives the same bytes
        cell["id"] = f"{assignment.id}-{n}".replace("_", "-")
    return nbformat.writes(student) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.assignments",
                                     description="Write the student versions of the problem sets.")
    parser.add_argument("ids", nargs="*", help=f"default: all of {sorted(ASSIGNMENTS)}")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if one is out of date")
    args = parser.parse_args(argv)
    unknown = [i for i in args.ids if i not in ASSIGNMENTS]
    if unknown:
        parser.error(f"unknown assignment(s) {unknown}: expected some of {sorted(ASSIGNMENTS)}")
    stale = []
    for aid in args.ids or ASSIGNMENTS:
        a = ASSIGNMENTS[aid]
        text = render(a)
        current = a.student_path.read_text(encoding="utf-8") if a.student_path.exists() else None
        if current == text:
            print(f"{a.student_path.relative_to(ROOT)}: up to date")
        elif args.check:
            stale.append(a.student_path.name)
            print(f"{a.student_path.relative_to(ROOT)}: OUT OF DATE (run python -m bayesattn_lite.assignments)")
        else:
            a.student_path.write_text(text, encoding="utf-8")
            print(f"{a.student_path.relative_to(ROOT)}: written")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

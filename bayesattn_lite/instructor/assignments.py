"""The problem sets: which questions each has, how each is checked, and the student-version generator.

    python -m bayesattn_lite.instructor.assignments            # rewrite every student version from its instructor version
    python -m bayesattn_lite.instructor.assignments --check    # exit 1 if a committed student version is out of date

Both rewrite the points table of the instructor version's first cell from the course's configuration
(``book/assignments/course.toml``, ``instructor/course.py``) first, so students read the points the grader awards.

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

Every checked question holds its ``bayesattn_lite.checks`` function and the names of the learner's objects
it is called on; the grader (``bayesattn_lite.instructor.grading``) runs exactly that. A written question
(``check=None``) is the Markdown cells tagged ``answer-<id>``, graded by the instructor with ``Question.rubric``.
``notebook_reference_calls`` lists where a submission calls what would answer a question for it (the
package's reference functions, autograd in a derivation), for the grader's report.
"""

import argparse
import ast
import copy
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import checks

ROOT = Path(__file__).resolve().parents[2]  # the checkout: bayesattn_lite/instructor/ is two below it
FOLDER = ROOT / "book" / "assignments"
STUDENT_SUFFIX = "_student"
SOLUTION_TAG, INSTRUCTOR_TAG = "solution", "instructor"
ANSWER_TAG_PREFIX = "answer-"  # a written answer: Markdown cells tagged answer-<question id>


@dataclass(frozen=True)
class Question:
    id: str          # "q1", shown in the report
    title: str
    points: int
    check: "Callable | None"  # its function of bayesattn_lite.checks; None: a written answer graded by hand
    names: tuple = ()    # the learner's objects the check is called with, in order
    rubric: str = ""     # for a written answer: the criteria and their points, for the instructor
    # partial credit, set in the course's configuration (instructor/course.py, book/assignments/course.toml):
    per_output: bool = False  # the points split evenly over the check's outputs, each right one earns its share
    mistakes: tuple = ()      # (knob, points): a submission whose only mistake is this named Flaw earns these points

    @property
    def written(self):
        """True for a written answer: the Markdown cells tagged ``answer-<id>``, graded by the instructor."""
        return self.check is None

    @property
    def answer_tag(self):
        return f"{ANSWER_TAG_PREFIX}{self.id}"


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


# Rubrics of the written answers: each criterion with its points (they add up to the question's points).
# They are model answers, so they live in the repository only (book/assignments/RUBRICS.md, outside the
# book and the wheel) and are read from there; tests/test_assignments.py checks that the points add up.
RUBRICS = FOLDER / "RUBRICS.md"
NO_RUBRIC = "(the rubric is in book/assignments/RUBRICS.md of the course's repository, not installed here)"


def read_rubrics(path=RUBRICS):
    """{(assignment id, question id): rubric}, a rubric being its criteria, one per line ("1 pt: ...").
    RUBRICS.md has a ``### <title> (`<assignment id>`)`` section per problem set, a ``**<id>, <title>**``
    line per question, then its criteria as a list."""
    rubrics, aid, qid = {}, None, None
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            found = re.search(r"\(`(\w+)`\)", line)
            aid, qid = found and found.group(1), None
        elif line.startswith("**q") and "," in line:
            qid = line[2:].split(",", 1)[0]
        elif line.startswith("- ") and aid and qid:
            key = (aid, qid)
            rubrics[key] = (rubrics[key] + "\n" if key in rubrics else "") + line[2:].strip()
    return rubrics


_RUBRICS = read_rubrics() if RUBRICS.exists() else {}


def _written(assignment_id, qid, title, points):
    return Question(qid, title, points, None, (), _RUBRICS.get((assignment_id, qid), NO_RUBRIC))


ASSIGNMENTS = {a.id: a for a in (
    Assignment("ps1_derivations", "Problem set 1: one head with a temperature and a positional bias", "1-3", (
        Question("q1", "gradients with a temperature and an ALiBi bias", 3, checks.check_biased_qk_gradients,
                 ("biased_qk_gradients",)),
        _written("ps1_derivations", "q2", "why the bias has no gradient of its own", 2),
        Question("q3", "the directions one step moves W_V in", 3, checks.check_value_update_basis,
                 ("value_update_basis",)),
        _written("ps1_derivations", "q4", "rank(ΔW_V) ≤ C − 1: proof, prediction, measurement", 2),
    )),
    Assignment("ps2_dynamics", "Problem set 2: score dynamics beyond the first order", "2-4", (
        Question("q1", "the second-order term of Δα", 3, checks.check_second_order_attention_change,
                 ("second_order_attention_change",)),
        _written("ps2_dynamics", "q2", "predict, then measure: how the errors scale with η", 2),
        Question("q3", "the score-space kernel under a temperature", 3, checks.check_tempered_score_change,
                 ("tempered_score_change",)),
        _written("ps2_dynamics", "q4", "why a small step never raises the loss, and what τ does", 2),
    )),
    Assignment("ps3_experiment", "Problem set 3: floors, a control and an experiment of your own", "6-8", (
        _written("ps3_experiment", "q1", "a falsifiable hypothesis", 1),
        Question("q2", "a reproducible experiment", 2, checks.check_reproducible, ("run_condition", "results")),
        Question("q3", "several seeds per condition", 1, checks.check_seeds, ("results", "run_condition")),
        _written("ps3_experiment", "q4", "a conclusion that quotes the measurements", 2),
        Question("q5", "the sticky chain's two floors", 2, checks.check_markov_floors, ("markov_floors",)),
        _written("ps3_experiment", "q6", "predict, then measure, the shuffled control", 2),
    )),
)}


# ----------------------------------------------------------------------------- reference calls

# What answers a problem set's questions if called from the learner's code: the package's own
# reference functions (and autograd, where the question asks for a derivation). A question's answer
# computed by one of them passes the check; the grader reports these calls so the instructor can judge.
REFERENCES = {
    "ps1_derivations": {
        "bayesattn_lite.attention.gradients": "q1/q3: every gradient of the head",
        "bayesattn_lite.attention.score_gradient": "q1: the advantage law",
        "bayesattn_lite.attention.error_signal": "q1/q3: the error signal",
        "bayesattn_lite.gradcheck.autograd_gradients": "q1: autograd gradients",
    },
    "ps2_dynamics": {
        "bayesattn_lite.attention.score_kernel": "q3: the score-space kernel",
        "bayesattn_lite.attention.predicted_score_change": "q3: the first-order score change",
        "bayesattn_lite.diagnostics.predicted_attention_change": "q1: the first-order attention change",
        "bayesattn_lite.attention.gradients": "q3: the head's gradients",
    },
    "ps3_experiment": {
        "bayesattn_lite.tasks.StickyMarkovChain.h_min": "q5: mean row entropy",
        "bayesattn_lite.tasks.StickyMarkovChain.row_entropies": "q5: row entropies",
        "bayesattn_lite.tasks.StickyMarkovChain.bayes_metrics": "q5: the chain's Bayes loss",
    },
}
_AUTOGRAD = ("torch.autograd", "torch.func", "functorch")  # a derivation answered by differentiating numerically
_AUTOGRAD_ASSIGNMENTS = {"ps1_derivations", "ps2_dynamics"}
# attributes that name a reference whatever object they are read from (methods of the package's classes)
_REFERENCE_ATTRIBUTES = {"ps3_experiment": {"h_min", "row_entropies", "bayes_metrics"}}


def _dotted(node, aliases):
    """'bayesattn_lite.attention.score_kernel' for an expression attention.score_kernel, resolving imports."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    head = aliases.get(node.id)
    return ".".join([head] + parts[::-1]) if head else None


def _aliases(tree, known=None):
    """Every name an import (or a plain renaming ``A = attention``) binds, mapped to the full dotted
    name it stands for. ``from m import *`` binds the names of ``REFERENCES`` that live in ``m``."""
    aliases = dict(known or {})
    everything = {name for refs in REFERENCES.values() for name in refs}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name == "*":
                    aliases.update({n.rsplit(".", 1)[1]: n for n in everything if n.rsplit(".", 1)[0] == node.module})
                else:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):  # after the imports: A = attention, f = A.score_kernel
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = _dotted(node.value, aliases)
            if target:
                aliases[node.targets[0].id] = target
    return aliases


def _parse(source):
    """The AST of a cell's source (IPython magics turned into calls), or the SyntaxError."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        source = TransformerManager().transform_cell(source)
    except ImportError:  # pragma: no cover - IPython is a dependency of the notebooks
        pass
    return ast.parse(source)


def reference_calls(source, assignment_id, context="", context_aliases=None):
    """The uses, in ``source`` (Python code, IPython magics allowed), of what answers a question of
    ``assignment_id`` by itself: the package's reference functions (``REFERENCES``), autograd in the
    derivation sets, a dynamic import of the package. One string per use, ``"line N: what (why)"``.
    ``context``: code of other cells (a notebook's install cell) whose imports the names may come from;
    ``context_aliases``: the same, already read (``_aliases``), so a notebook's imports are read once.

    Static (AST) detection: it sees imports, aliases and attribute access, not code built at run time
    (``exec`` of a string, an object reached through ``globals()``), which it reports as such."""
    try:
        tree = _parse(source)
    except SyntaxError as exc:
        return [f"line {exc.lineno}: not valid Python, not scanned ({exc.msg})"]
    aliases = dict(context_aliases or {})
    try:
        aliases = _aliases(_parse(context), aliases) if context else aliases
    except SyntaxError:  # the context only lends its imports: an invalid one lends none
        pass
    aliases = _aliases(tree, aliases)
    references = REFERENCES.get(assignment_id, {})
    attributes = _REFERENCE_ATTRIBUTES.get(assignment_id, set())
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, (ast.Attribute, ast.Name)):
            name = _dotted(node, aliases)
            if name in references:
                what = f"{name.replace('bayesattn_lite.', '')} (answers {references[name]})"
            elif name and assignment_id in _AUTOGRAD_ASSIGNMENTS and name.startswith(_AUTOGRAD):
                what = f"{name} (autograd: the question asks for a derivation)"
            elif isinstance(node, ast.Attribute) and node.attr in attributes:
                what = f".{node.attr} (a method of the package that answers {assignment_id})"
            elif isinstance(node, ast.Attribute) and node.attr == "backward" and \
                    assignment_id in _AUTOGRAD_ASSIGNMENTS:
                what = ".backward() (autograd: the question asks for a derivation)"
            elif isinstance(node, ast.Attribute) and node.attr in ("__dict__", "__getattribute__") and \
                    _looked_up(node.value, aliases, assignment_id):
                what = f".{node.attr} of {_looked_up(node.value, aliases, assignment_id)} (a name looked up at " \
                       "run time: not scanned)"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("exec", "eval", "__import__", "globals"):
            what = f"{node.func.id}() (code built at run time: not scanned)"
        elif isinstance(node, ast.Call) and _dotted(node.func, aliases) == "importlib.import_module":
            what = "importlib.import_module() (a dynamic import: not scanned)"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "vars") \
                and node.args and _looked_up(node.args[0], aliases, assignment_id):
            what = f"{node.func.id}() on {_looked_up(node.args[0], aliases, assignment_id)} (a name looked up at run " \
                   "time: not scanned)"
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                str(node.slice.value).startswith("bayesattn_lite") and ast.unparse(node.value) == "sys.modules":
            what = "sys.modules[...] of the package (a module looked up at run time: not scanned)"
        if what and not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
            found.append((node.lineno, what))
    # an attribute chain a.b.c is visited at every level: keep the longest match per line and name
    unique = sorted(set(found))
    return [f"line {line}: {what}" for line, what in unique
            if not any(l2 == line and w2 != what and w2.startswith(what.split(" (")[0] + ".") for l2, w2 in unique)]


def _looked_up(node, aliases, assignment_id):
    """"the package", or "autograd" where the assignment asks for a derivation, when ``node`` names a
    module whose attributes could answer a question; None otherwise."""
    name = _dotted(node, aliases) or ""
    if name.startswith("bayesattn_lite"):
        return "the package"
    if assignment_id in _AUTOGRAD_ASSIGNMENTS and (name == "torch" or name.startswith(_AUTOGRAD)):
        return "autograd"
    return None


def notebook_reference_calls(nb, assignment_id, folder=None):
    """``reference_calls`` over the code cells of a submitted notebook, except the cells the course
    gives unchanged (a code cell of the instructor version in ``folder``, default ``FOLDER``, without
    the ``solution`` tag, same source). One string per use, ``"cell N, line L: what (why)"``."""
    import nbformat
    given = set()
    assignment = ASSIGNMENTS.get(assignment_id)
    instructor_path = None if assignment is None else Path(folder or FOLDER) / assignment.instructor_path.name
    if instructor_path is not None and instructor_path.exists():
        instructor = nbformat.read(instructor_path, as_version=4)
        given = {c.source.strip() for c in instructor.cells
                 if c.cell_type == "code" and SOLUTION_TAG not in c.get("metadata", {}).get("tags", [])}
    # the names may come from an import in any cell (the install cell imports the package): the
    # notebook's imports are read once, not once per cell (that was quadratic in the number of cells)
    imports = "\n".join(_import_lines(cell.source) for cell in nb.cells if cell.cell_type == "code")
    try:
        context_aliases = _aliases(_parse(imports))
    except SyntaxError:  # pragma: no cover - unparsed import statements always parse
        context_aliases = {}
    found = []
    for n, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code" or cell.source.strip() in given:
            continue
        found += [f"cell {n}, {use}" for use in reference_calls(cell.source, assignment_id,
                                                                 context_aliases=context_aliases)]
    return found


def _import_lines(source):
    """The import statements of a cell, as source (nothing for a cell that does not parse)."""
    try:
        tree = _parse(source)
    except SyntaxError:
        return ""
    return "\n".join(ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


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


def solved_submission(assignment, folder=None):
    """A correct submission of ``assignment``: its instructor version (in ``folder``, default ``FOLDER``)
    as a student hands it in (no instructor cells, no solution markers, no outputs, student metadata).
    For testing and timing the grader (tests/test_grading.py, benchmarks/grading_class.py)."""
    import nbformat
    nb = nbformat.read(Path(folder or FOLDER) / assignment.instructor_path.name, as_version=4)
    nb.cells = [c for c in nb.cells if INSTRUCTOR_TAG not in c.metadata.get("tags", [])]
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.split("\n")
                                if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata["bayesattn_lite"] = {"assignment": assignment.id, "version": "student"}
    return nb


# ----------------------------------------------------------------------------- the points table

TABLE_HEADER = "| question | what | graded | points |"
# the table in the first cell of a problem set: the header and every line after it that starts with "|"
_TABLE = re.compile(r"^\| question \| what \| graded \| points \|[^\n]*(?:\n\|[^\n]*)*", re.M)


def points_table(assignment):
    """The Markdown table of ``assignment``'s questions and points that its first cell shows students:
    generated from the configuration (``course.toml``), so that what students read is what the grader awards."""
    rows = [TABLE_HEADER, "|---|---|---|---|"]
    for q in assignment.questions:
        how = "written, graded by your instructor" if q.written else "code, checked automatically"
        if q.per_output or q.mistakes:
            how += ", partial credit"
        rows.append(f"| {q.id} | {q.title} | {how} | {q.points:g} |")
    rows.append(f"| | total | | {sum(q.points for q in assignment.questions):g} |")
    return "\n".join(rows)


def with_points_table(nb, assignment):
    """Replace, in place, the points table of ``nb``'s first Markdown cell by ``points_table(assignment)``;
    True when it changed. ValueError when the cell has no such table (a new problem set needs one)."""
    cell = next((c for c in nb.cells if c.cell_type == "markdown"), None)
    if cell is None or not _TABLE.search(cell.source):
        raise ValueError(f"{assignment.id}: expected a points table starting {TABLE_HEADER!r} in the first "
                         "Markdown cell of the instructor version")
    new = _TABLE.sub(lambda _: points_table(assignment), cell.source, count=1)
    changed, cell.source = new != cell.source, new
    return changed


def configured(assignment_id, folder=None):
    """The problem set as the course configures it: ``course.toml`` in ``folder`` (default ``FOLDER``),
    else the registry's defaults."""
    from . import course  # course.py builds on this module
    path = Path(folder or FOLDER) / "course.toml"
    return (course.load(path) if path.exists() else course.defaults()).assignment(assignment_id)


def render(assignment, folder=None):
    """The student notebook of ``assignment`` (its instructor version in ``folder``, default
    ``FOLDER``) as the text the generator writes, its points table from the folder's ``course.toml``."""
    import nbformat
    nb = nbformat.read(Path(folder or FOLDER) / assignment.instructor_path.name, as_version=4)
    if nb.metadata.get("bayesattn_lite", {}).get("assignment") != assignment.id:
        raise ValueError(f"{assignment.instructor_path.name}: expected metadata bayesattn_lite.assignment = "
                         f"{assignment.id!r}, got {nb.metadata.get('bayesattn_lite')!r}")
    with_points_table(nb, configured(assignment.id, folder))
    student = student_version(nb, assignment.id)
    for n, cell in enumerate(student.cells):  # stable ids: regenerating gives the same bytes
        cell["id"] = f"{assignment.id}-{n}".replace("_", "-")
    return nbformat.writes(student) + "\n"


def render_instructor(assignment, folder=None):
    """The instructor version's text with its points table rewritten from the configuration (the rest as is)."""
    import nbformat
    nb = nbformat.read(Path(folder or FOLDER) / assignment.instructor_path.name, as_version=4)
    with_points_table(nb, configured(assignment.id, folder))
    return nbformat.writes(nb) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.instructor.assignments",
                                     description="Write the student versions of the problem sets.")
    parser.add_argument("ids", nargs="*", help=f"default: all of {sorted(ASSIGNMENTS)}")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if one is out of date")
    parser.add_argument("--folder", type=Path, help="the problem sets' folder (default: book/assignments of "
                        "the checkout the package sits in, else of the current directory)")
    args = parser.parse_args(argv)
    # an installed package has no book/ beside it: then the course's checkout is where we are
    folder = args.folder or (FOLDER if FOLDER.is_dir() else Path.cwd() / "book" / "assignments")
    if not folder.is_dir():
        parser.error(f"--folder: expected the folder of the problem sets (book/assignments), got {folder}")
    unknown = [i for i in args.ids if i not in ASSIGNMENTS]
    if unknown:
        parser.error(f"unknown assignment(s) {unknown}: expected some of {sorted(ASSIGNMENTS)}")
    stale = []
    for aid in args.ids or ASSIGNMENTS:
        a = ASSIGNMENTS[aid]
        try:  # the instructor version first: its points table, then the student version made from it
            texts = [(folder / a.instructor_path.name, render_instructor(a, folder)),
                     (folder / a.student_path.name, render(a, folder))]
        except ValueError as exc:  # a bad course.toml or a notebook without a points table
            parser.error(str(exc))
        for path, text in texts:
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == text:
                print(f"{path}: up to date")
            elif args.check:
                stale.append(path.name)
                print(f"{path}: OUT OF DATE (run python -m bayesattn_lite.instructor.assignments)")
            else:
                path.write_text(text, encoding="utf-8")
                print(f"{path}: written")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

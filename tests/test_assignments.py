"""The problem sets: the committed student versions are what the generator makes of the instructor
versions, they leak no solution, and every question the grader runs holds a check of the package and
names objects the instructor version defines."""

import ast

import nbformat
import pytest

from bayesattn_lite import checks
from bayesattn_lite.instructor import assignments
from bayesattn_lite.instructor.assignments import ASSIGNMENTS

ALL = sorted(ASSIGNMENTS.values(), key=lambda a: a.id)


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_committed_student_version_is_up_to_date(assignment):
    assert assignment.student_path.exists(), f"run python -m bayesattn_lite.instructor.assignments to write {assignment.student_path.name}"
    assert assignment.student_path.read_text(encoding="utf-8") == assignments.render(assignment), (
        f"{assignment.student_path.name} is out of date: run python -m bayesattn_lite.instructor.assignments")


def test_the_command_checks_without_writing(capsys):
    assert assignments.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        assignments.main(["no_such_assignment"])


def as_python(source):
    """A cell's source as plain Python: IPython's magics (the install cell's %pip) become calls."""
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source)


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_student_version_has_stubs_and_no_solutions(assignment):
    instructor = nbformat.read(assignment.instructor_path, as_version=4)
    student = nbformat.read(assignment.student_path, as_version=4)
    assert student.metadata["bayesattn_lite"] == {"assignment": assignment.id, "version": "student"}
    text = "\n".join(cell.source for cell in student.cells)
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "Instructor version" not in text
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            ast.parse(as_python(cell.source))  # every stubbed cell is still valid (IPython) Python
    solution_cells = [c for c in instructor.cells if assignments.SOLUTION_TAG in c.metadata.get("tags", [])]
    assert solution_cells, "an instructor version without solution cells"
    assert text.count("raise NotImplementedError(") >= sum(c.cell_type == "code" for c in solution_cells)


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_every_question_names_a_check_and_objects_the_notebook_defines(assignment):
    nb = nbformat.read(assignment.instructor_path, as_version=4)
    assert nb.metadata["bayesattn_lite"]["assignment"] == assignment.id
    defined = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(as_python(cell.source))):
                if isinstance(node, ast.FunctionDef):
                    defined.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    defined.add(node.id)
    assert len({q.id for q in assignment.questions}) == len(assignment.questions)
    for q in assignment.questions:
        assert q.points > 0
        if q.written:
            assert q.names == () and q.rubric, f"{q.id}: a written question needs a rubric and no names"
            continue
        assert q.check is getattr(checks, getattr(q.check, "__name__", ""), None), q.check  # a public check
        assert set(q.names) <= defined, f"{q.id}: {set(q.names) - defined} not defined in {assignment.instructor_path.name}"


def test_stub_source_replaces_blocks_and_keeps_the_rest():
    source = ("def f(x):\n    \"\"\"doc\"\"\"\n    # BEGIN SOLUTION: return twice x\n    y = 2 * x\n    return y\n"
              "    # END SOLUTION\nprint(f)")
    stub = assignments.stub_source(source)
    assert stub == "def f(x):\n    \"\"\"doc\"\"\"\n    raise NotImplementedError('return twice x')\nprint(f)"
    assert assignments.stub_source("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n") == \
        "raise NotImplementedError('write your solution here')\n"
    md = "Why?\n\n<!-- BEGIN SOLUTION: one sentence -->\nBecause.\n<!-- END SOLUTION -->"
    assert assignments.stub_source(md, "markdown") == "Why?\n\n*Your answer here.* (one sentence)"


@pytest.mark.parametrize("source", ["x = 1", "# BEGIN SOLUTION\nx = 1\n", "x = 1\n# END SOLUTION\n"])
def test_a_tagged_cell_without_complete_markers_is_an_error(source):
    with pytest.raises(ValueError, match="BEGIN SOLUTION"):
        assignments.stub_source(source)


def test_student_version_drops_instructor_cells():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("secret", metadata={"tags": ["instructor"]}),
                nbformat.v4.new_code_cell("# BEGIN SOLUTION: hint\nx = 1\n# END SOLUTION", metadata={"tags": ["solution"]}),
                nbformat.v4.new_code_cell("print(x)", execution_count=3,
                                          outputs=[nbformat.v4.new_output("stream", text="1\n")])]
    student = assignments.student_version(nb, "ps1_derivations")
    assert [c.source for c in student.cells] == ["raise NotImplementedError('hint')", "print(x)"]
    assert student.cells[1].outputs == [] and student.cells[1].execution_count is None
    assert nb.cells[2].outputs  # the instructor notebook is not touched


# ----------------------------------------------------------------------------- what each set asks

def test_every_set_has_checked_derivations_and_written_reasoning():
    """Each set: at least one answer graded by a check and one written answer with a rubric (issue 15)."""
    for assignment in ALL:
        kinds = {q.written for q in assignment.questions}
        assert kinds == {True, False}, f"{assignment.id}: needs both checked and written questions"


def rubric_points(rubric):
    """The points of a rubric's criteria, one line each, 'N pt: ...'."""
    import re
    points = [float(m) for m in re.findall(r"^(\d+(?:\.\d+)?) pts?:", rubric, re.M)]
    assert len(points) == len(rubric.splitlines()), f"every rubric line starts with 'N pt:':\n{rubric}"
    return sum(points)


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_written_answers_have_a_cell_a_stub_and_a_rubric_that_adds_up(assignment):
    instructor = nbformat.read(assignment.instructor_path, as_version=4)
    student = nbformat.read(assignment.student_path, as_version=4)
    # the rubrics are model answers: in RUBRICS.md (repository only), never on the book's instructors.md
    rubrics = (assignments.FOLDER / "RUBRICS.md").read_text(encoding="utf-8")
    page = (assignments.FOLDER / "instructors.md").read_text(encoding="utf-8")
    for q in assignment.questions:
        if not q.written:
            continue
        assert rubric_points(q.rubric) == q.points, f"{assignment.id} {q.id}: the rubric's points add up to {q.points}"
        assert q.rubric != assignments.NO_RUBRIC, f"RUBRICS.md has no rubric for {assignment.id} {q.id}"
        for line in q.rubric.splitlines():
            assert f"- {line}" in rubrics, f"RUBRICS.md lacks the rubric line of {assignment.id} {q.id}: {line}"
            assert line.split(": ", 1)[1][:60] not in page, f"instructors.md (a book page) shows a model answer: {line}"
        tagged = [c for c in instructor.cells if q.answer_tag in c.metadata.get("tags", [])]
        assert tagged, f"{assignment.id}: no Markdown cell tagged {q.answer_tag}"
        for cell in tagged:  # the grader hands these to the instructor; the student version stubs them
            assert cell.cell_type == "markdown" and assignments.SOLUTION_TAG in cell.metadata["tags"]
        stubs = [c for c in student.cells if q.answer_tag in c.metadata.get("tags", [])]
        assert len(stubs) == len(tagged) and all(c.source.startswith("*Your answer here.*") for c in stubs)


def load_solutions(assignment):
    """The instructor version's solution functions, defined in one namespace (imports from the install cell)."""
    nb = nbformat.read(assignment.instructor_path, as_version=4)
    first = next(c.source for c in nb.cells if c.cell_type == "code")
    namespace = {}
    exec(first[len(first.split("\n\n")[0]):], namespace)  # the imports, without the install guard
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "code" and assignments.SOLUTION_TAG in tags and "results =" not in cell.source:
            exec(cell.source, namespace)  # function definitions (and set 3's task setup); no training run
    return namespace


def function_questions(assignment):
    """The checked questions whose objects are all functions (the others need a training run)."""
    return [q for q in assignment.questions if not q.written and q.names and q.names[0] != "run_condition"
            and "results" not in q.names]


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_instructor_solutions_pass_and_student_stubs_fail(assignment):
    namespace = load_solutions(assignment)
    student = nbformat.read(assignment.student_path, as_version=4)
    stub_namespace = dict(namespace)
    for cell in student.cells:  # the stubbed definitions replace the solutions
        if cell.cell_type == "code" and cell.source.startswith("def ") and "raise NotImplementedError" in cell.source:
            exec(cell.source, stub_namespace)
    questions = function_questions(assignment)
    assert questions, f"{assignment.id}: no question checked on functions alone"
    for q in questions:
        check = q.check
        result = check(*(namespace[name] for name in q.names))
        assert result, f"{assignment.id} {q.id}: the instructor's solution fails: {result.message}"
        stub = check(*(stub_namespace[name] for name in q.names))
        assert not stub and "NotImplementedError" in stub.message, (q.id, stub.message)


def test_the_instructor_experiment_passes_its_checks_and_its_numbers_read_back_from_a_table_do_not():
    """Problem set 3's run_condition as the instructor version writes it (a budget of 5 steps instead of 150:
    the checks judge the runs, not the budget): reproducible, and the same numbers as a table are not."""
    namespace = load_solutions(ASSIGNMENTS["ps3_experiment"])
    namespace["STEPS"] = 5
    run_condition = namespace["run_condition"]
    results = {c: {s: run_condition(c, s) for s in (0, 1, 2)} for c in ("transformer", "lstm")}
    assert checks.check_reproducible(run_condition, results) and checks.check_seeds(results, run_condition)
    for fake in (lambda c, s: results[c][s], lambda c, s: results[c].get(s, 0.5)):
        assert not checks.check_reproducible(fake, results) and not checks.check_seeds(results, fake)


# ----------------------------------------------------------------------------- reference calls

@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_the_notebooks_themselves_call_no_reference(assignment):
    """The given cells may use the package (they are skipped); the instructor's solutions do not."""
    for path in (assignment.instructor_path, assignment.student_path):
        assert assignments.notebook_reference_calls(nbformat.read(path, as_version=4), assignment.id) == []


@pytest.mark.parametrize("assignment_id, source, expected", [
    ("ps2_dynamics", "from bayesattn_lite import attention as A\ndef f(x, q, k):\n    return A.score_kernel(x, q, k) / 4",
     ["line 3: attention.score_kernel (answers q3"]),
    ("ps2_dynamics", "from bayesattn_lite.diagnostics import predicted_attention_change as p\ny = p(1, 2, 3)",
     ["line 2: diagnostics.predicted_attention_change"]),
    ("ps2_dynamics", "import bayesattn_lite.attention\nbayesattn_lite.attention.predicted_score_change(1, 2, 3, 4, 5)",
     ["line 2: attention.predicted_score_change"]),
    ("ps1_derivations", "import torch\ndef f(q):\n    q.sum().backward()\n    return torch.autograd.grad(q, q)",
     ["line 3: .backward()", "line 4: torch.autograd.grad"]),
    ("ps1_derivations", "from torch.func import grad\ng = grad(f)", ["line 2: torch.func.grad"]),
    ("ps1_derivations", "from bayesattn_lite import attention\nf = getattr(attention, 'score_' + 'gradient')",
     ["line 2: attention.score_gradient"]),   # a name spelt in pieces of constants is the name
    ("ps1_derivations", "exec('from bayesattn_lite import attention')", ["line 1: exec()"]),
    ("ps1_derivations", "from bayesattn_lite import attention\nf = vars(attention)['score_gradient']",
     ["line 2: vars() on the package"]),
    ("ps1_derivations", "import bayesattn_lite.attention as a\nf = a.__dict__['score_gradient']",
     ["line 2: .__dict__ of the package"]),
    ("ps1_derivations", "import torch\ng = getattr(torch, 'auto' + 'grad').grad",
     ["line 2: torch.autograd.grad (autograd"]),   # spelt in pieces of constants: the name itself
    # the fourth hostile round: code run through another name, and autograd reached around the names
    ("ps1_derivations", "import builtins\nbuiltins.exec('x = 1')", ["line 2: exec() (code built at run time"]),
    ("ps1_derivations", "c = compile('1', 'f', 'eval')", ["line 1: compile() (code built at run time"]),
    ("ps1_derivations", "get_ipython().run_cell('x = 1')", ["line 1: run_cell() (code built at run time"]),
    ("ps1_derivations", "await get_ipython().run_cell_async(s, transformed_cell=s)",
     ["line 1: run_cell_async() (code built at run time"]),
    ("ps1_derivations", "import code\ncode.InteractiveInterpreter().runsource(s)",
     ["line 2: InteractiveInterpreter() (code built at run time", "line 2: runsource() (code built at run time"]),
    ("ps1_derivations", "import sys\ng = sys.modules['torch.autograd'].grad",
     ["line 2: .grad (autograd", "line 2: sys.modules[...]"]),
    ("ps1_derivations", "import torch\nb = vars(torch.Tensor)['back' 'ward']", ["line 2: 'backward'", "line 2: vars() on autograd"]),
    ("ps1_derivations", "get_ipython().input_transformers_post.append(f)", ["line 1: .input_transformers_post"]),
    ("ps1_derivations", "def f(m):\n    return m.q.grad", ["line 2: .grad (autograd"]),
    ("ps1_derivations", "import sys\nm = sys.modules['bayesattn_lite.attention']", ["line 2: sys.modules[...]"]),
    ("ps3_experiment", "chain = tasks.StickyMarkovChain()\nrate = chain.h_min / 0.693", ["line 2: .h_min"]),
    ("ps3_experiment", "%time x = 1\ny = torch.autograd.grad(x, x)", []),  # autograd is no shortcut in set 3
    ("ps1_derivations", "def f(:\n    pass", ["line 1: not valid Python"]),
    ("ps2_dynamics", "from bayesattn_lite import attention\nA = attention\nK = A.score_kernel(1, 2, 3)",
     ["line 3: attention.score_kernel"]),
    ("ps2_dynamics", "from bayesattn_lite.attention import *\nK = score_kernel(1, 2, 3)", ["line 2: attention.score_kernel"]),
    ("ps2_dynamics", "from bayesattn_lite import attention\nq = attention.forward(x, p)['q']", []),  # not an answer
])
def test_reference_calls_are_found(assignment_id, source, expected):
    found = assignments.reference_calls(source, assignment_id)
    assert len(found) == len(expected), found
    for got, want in zip(found, expected):
        assert got.startswith(want), (got, want)


# the holes of issue 35 (item 5): each of these answered a question without being reported
ANSWER_DEF = "def biased_qk_gradients(q, k, v, u, tau, slope):\n"   # a checked question's function (a derivation set)


@pytest.mark.parametrize("assignment_id, source, expected", [
    # a cell magic: IPython runs the body after the %% line as Python
    ("ps1_derivations", "%%time\nfrom bayesattn_lite import attention\ng = attention.gradients(x, y, p)",
     ["line 3: attention.gradients"]),
    ("ps1_derivations", "\n%%capture out\n%%timeit -n 1 -r 1\nimport torch\nloss.backward()",
     ["line 5: .backward()"]),
    ("ps3_experiment", "%%prun\nrate = chain.h_min", ["line 2: .h_min"]),
    ("ps1_derivations", "%%writefile helper.py\nimport bayesattn_lite.attention as a\nf = a.gradients",
     ["line 3: attention.gradients"]),  # a module written to disk, imported later
    ("ps1_derivations", "%%bash\npython -c 'from bayesattn_lite import attention'", ["line 1: a %%bash cell"]),
    ("ps1_derivations", "%%html\n<b>bold</b> <i>", []),  # shown, not run
    # a line magic's code, shell lines and magics around the code
    ("ps1_derivations", "from bayesattn_lite import attention\n%time g = attention.gradients(x, y, p)",
     ["line 2: attention.gradients"]),
    ("ps1_derivations", "from bayesattn_lite import attention\n%timeit -n 1 -r 1 g = attention.gradients(x, y, p)",
     ["line 2: attention.gradients"]),
    ("ps1_derivations", "from bayesattn_lite import attention\nfor i in range(2):\n    !ls\n    files = !ls\n"
                        "    %pip list\n    g = attention.gradients(x, y, p)",
     ["line 4: getoutput() (a shell command's output", "line 6: attention.gradients"]),   # files = !ls: kept output
    ("ps1_derivations", "from bayesattn_lite import attention\nx = (1 +\ng = attention.gradients(x, y, p)",
     ["line 2: not valid Python", "line 3: attention.gradients"]),  # the rest of a broken cell is read
    # a re-export: the reference reached through another module of the package
    ("ps1_derivations", "from bayesattn_lite import checks as c\ng = c.problem_sets.attention.gradients(x, y, p)",
     ["line 2: attention.gradients (answers q1/q3: every gradient of the head, reached as checks.problem_sets."]),
    ("ps1_derivations", "from bayesattn_lite.checks.problem_sets import attention as a\ng = a.score_gradient(al, b)",
     ["line 2: attention.score_gradient"]),
    ("ps1_derivations", "from bayesattn_lite.checks.problem_sets import *\ng = attention.error_signal(z, y, W)",
     ["line 2: attention.error_signal"]),
    ("ps1_derivations", "import bayesattn_lite.gradcheck as g\ngrad = g.torch.autograd.grad(l, q)",
     ["line 2: torch.autograd.grad"]),
    # dynamic imports of the package, with the names they bind
    ("ps1_derivations", "import importlib\nm = importlib.import_module('bayesattn_lite.attention')\ng = m.gradients(1)",
     ["line 2: importlib.import_module('bayesattn_lite.attention')", "line 3: attention.gradients"]),
    ("ps1_derivations", "m = __import__('bayesattn_lite')\ng = m.attention.gradients(1)",
     ["line 1: __import__('bayesattn_lite')", "line 2: attention.gradients"]),
    ("ps1_derivations", "from importlib import import_module as load\nm = load('torch.autograd')",
     ["line 2: importlib.import_module('torch.autograd') (autograd"]),
    ("ps3_experiment", "import importlib\nnp = importlib.import_module('numpy')", []),  # not the package
    # getattr with a constant name is an attribute
    ("ps1_derivations", "step = getattr(loss, 'backward')\nstep()", ["line 1: .backward()"]),
    ("ps1_derivations", "from bayesattn_lite import attention\nf = getattr(attention, 'gradients')\ng = f(x, y, p)",
     ["line 2: attention.gradients", "line 3: attention.gradients"]),
    ("ps2_dynamics", "import bayesattn_lite as b\nK = getattr(getattr(b, 'attention'), 'score_kernel')(x, q, k)",
     ["line 2: attention.score_kernel"]),
    ("ps2_dynamics", "from bayesattn_lite import attention\nq = getattr(attention, 'forward')(x, p)['q']", []),
    # a second hostile round: bindings the aliases did not follow, and autograd by other paths
    ("ps2_dynamics", "import bayesattn_lite\nA: object = bayesattn_lite.attention\nd = A.predicted_score_change(x)",
     ["line 3: attention.predicted_score_change"]),
    ("ps2_dynamics", "import bayesattn_lite\nd = (A := bayesattn_lite.attention).predicted_score_change(x)",
     ["line 2: .predicted_score_change"]),
    ("ps2_dynamics", "import bayesattn_lite\ndef f(x, A=bayesattn_lite.attention):\n    return A.score_kernel(x)",
     ["line 3: .score_kernel"]),
    ("ps2_dynamics", "import bayesattn_lite\nclass T:\n    lib = bayesattn_lite\nK = T.lib.attention.score_kernel(x)",
     ["line 4: .score_kernel"]),
    ("ps1_derivations", "import torch.nn.functional as F\ng = F.torch.autograd.grad(l, q)",
     ["line 2: torch.nn.functional.torch.autograd.grad"]),
    ("ps2_dynamics", "import torch.nn.functional as F\nout = F.torch.func.vjp(f, x)", ["line 2: torch.nn.functional.torch.func.vjp"]),
    ("ps2_dynamics", "import torch\ntorch._C._ImperativeEngine().run_backward(t, g)", ["line 2: .run_backward", "line 2: torch._C._ImperativeEngine"]),
    # a third hostile round: class patterns of a match statement read attributes by keyword
    ("ps1_derivations", "import torch\nmatch torch:\n    case object(autograd=object(grad=g)):\n        pass",
     ["line 3: torch.autograd.grad (autograd"]),
    ("ps1_derivations", "from bayesattn_lite import attention\nmatch attention:\n    case object(gradients=G) | None:\n"
     "        pass", ["line 3: attention.gradients"]),
    # a sixth hostile round: the builtins under an alias, hooks and names as strings, more ways to run a string
    ("ps1_derivations", "import builtins as B\nB.exec('x = 1')", ["line 2: builtins.exec (the builtins as a module"]),
    ("ps1_derivations", "from builtins import exec as run_it\nrun_it('x = 1')", ["line 2: builtins.exec"]),
    ("ps3_experiment", "vars()['__builtins__'].exec('x = 1')", ["line 1: '__builtins__'"]),
    ("ps1_derivations", "import torch\nfrom builtins import getattr as ga\nA = ga(torch, 'autograd')",
     ["line 3: 'autograd' (an autograd name as a string", "line 3: builtins.getattr"]),
    ("ps1_derivations", "import operator\nq.register_hook(f)\noperator.methodcaller('backward')(L)",
     ["line 2: .register_hook (autograd", "line 3: 'backward'", "line 3: operator.methodcaller()"]),
    ("ps2_dynamics", "import pydoc\nK = pydoc.locate('bayesattn_lite.attention.score_kernel')",
     ["line 2: 'bayesattn_lite.attention.score_kernel' (names attention.score_kernel", "line 2: pydoc.locate()"]),
    ("ps1_derivations", "import ctypes\nctypes.pythonapi.PyRun_SimpleString(b'x = 1')",
     ["line 2: PyRun_SimpleString()", "line 2: pythonapi()"]),
    ("ps3_experiment", "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'x = 1'])", ["line 2: subprocess.run()"]),
    ("ps1_derivations", "import sympy, torch\nd = sympy.diff(e)\nds = torch.ops.aten._softmax_backward_data(g, a, -1, t)",
     ["line 2: sympy.diff (symbolic", "line 3: ._softmax_backward_data (a backward kernel"]),
    ("ps1_derivations", "def biased_qk_gradients(q, k, v, u, tau, slope):\n    inv = 5e4\n    return (a - b) * inv",
     ["line 3: (a - b) * inv (a finite difference"]),
    ("ps1_derivations", "if True:\n    def helper(loss, h=1e-5):\n        return (loss(1 + h) - loss(1 - h)) / (2 * h)\n"
     "def biased_qk_gradients(q, k, v, u, tau, slope):\n    return helper(q)",
     ["line 3: (loss(1 + h) - loss(1 - h)) / (2 * h) (a finite difference"]),
    ("ps1_derivations", "T = 1000\nx = (a - b) * T\nimport re\nr = re.compile('x')\nprint('grad')", []),  # counts, text
    # its re-check: other forms of a finite difference, strings as keys, the builtins by other roads
    ("ps1_derivations", "def biased_qk_gradients(q, k, v, u, tau, slope):\n    h = 1e-5\n    return (f(p) - f(m)) / 2 / h",
     ["line 3: (f(p) - f(m)) / 2 / h (a finite difference"]),
    ("ps1_derivations", "def biased_qk_gradients(q, k, v, u, tau, slope):\n    h = 1e-5\n    return -(f(m) - f(p)) / (2 * h)",
     ["line 3: -(f(m) - f(p)) / (2 * h) (a finite difference"]),
    ("ps1_derivations", "import torch\ndef biased_qk_gradients(q, k, v, u, tau, slope):\n    h = 1e-5\n"
     "    return torch.div(f(p) - f(m), 2 * h)", ["line 4: torch.div(f(p) - f(m), 2 * h) (a finite difference"]),
    ("ps1_derivations", "def biased_qk_gradients(q, k, v, u, tau, slope):\n    inv: float = 5e4\n    return (a - b) * inv",
     ["line 3: (a - b) * inv (a finite difference"]),
    ("ps1_derivations", "import inspect, torch\nm = dict(inspect.getmembers(torch.Tensor))\nm['backward'](L)",
     ["line 2: inspect.getmembers() (code", "line 3: 'backward' (an autograd name as a string"]),
    ("ps1_derivations", "len.__self__.exec('x = 1')", ["line 1: __self__()"]),
    ("ps1_derivations", "import sys\nsys._getframe().f_builtins['exec']('x = 1')", ["line 2: _getframe()", "line 2: f_builtins()"]),
    ("ps3_experiment", "import subprocess\nsubprocess.getoutput('python -c 1')", ["line 2: subprocess.getoutput()"]),
    ("ps1_derivations", "import time\nms = (time.time() - t0) * 1000.0\npct = (new - old) * 100.0\ndirection = 'backward'", []),
    # round 8: forward-mode autograd by torch's private names, names spelt as f-strings or sums of constants,
    # the builtins through gc, a Richardson difference scaled by 1/(12 h), numbers written as expressions
    ("ps1_derivations", "import torch\nx = torch._make_dual(p, t, level=0)", ["line 2: ._make_dual (autograd"]),
    ("ps1_derivations", "q.requires_grad = True\ngetattr(L, f\"backward\")()\ng = getattr(q, 'gr' + 'ad')",
     ["line 1: .requires_grad (autograd", "line 2: .backward() (autograd", "line 3: .grad (autograd"]),
    ("ps1_derivations", "import gc\nE = next(o for o in gc.get_objects() if 'exec' in o)", ["line 2: gc.get_objects() (code"]),
    ("ps1_derivations", ANSWER_DEF + "    e = 2e-4\n    return (8 * (f(x + e) - f(x - e)) - (f(x + 2 * e) - f(x - 2 * e))) * 416.67",
     ["line 3: f(x + 2 * e) - f(x - 2 * e) (a finite difference", "line 3: f(x + e) - f(x - e) (a finite difference"]),
    ("ps1_derivations", ANSWER_DEF + "    import numpy as np\n    return (a - b) * 500000 + (c - d) * 2 ** 19 + (g - h) * np.float64(5e5)",
     ["line 3: (a - b) * 500000 (a finite", "line 3: (c - d) * 2 ** 19 (a finite", "line 3: (g - h) * np.float64(500000.0) (a finite"]),
    # its re-check: a name held in a variable, any module's __builtins__, object.__subclasses__, requires_grad=
    ("ps1_derivations", ANSWER_DEF + "    Q = torch.tensor(q.tolist(), requires_grad=True)\n    b = 'backward'\n    getattr(L, b)()",
     ["line 2: requires_grad= (autograd", "line 4: getattr() by a name held in a variable"]),
    ("ps1_derivations", "import warnings\nwarnings.__builtins__['exec']('x = 1')\ns = object.__subclasses__()",
     ["line 2: __builtins__() (code", "line 3: __subclasses__() (code"]),
    ("ps1_derivations", ANSWER_DEF + "    z = torch.zeros(3, requires_grad=False)\n    return z", []),
    # honest code: a BERT-style mask, a discrete difference of an index, a sum of strings that names nothing
    ("ps1_derivations", ANSWER_DEF + "    mask = (1.0 - keep) * -10000.0\n    d = f(i + 1) - f(i)\n    s = 'ab' + 'cd'\n    return mask",
     []),
    # the last stop's residue: names by join, % and format; a step bound by a loop; diff times one over a step;
    # a module's backward hook; and two false alarms (a duration in microseconds, a centring over a small scale)
    ("ps1_derivations", "getattr(L, ''.join(['back', 'ward']))()\nimport operator\nm = operator.attrgetter('%sward' % 'back')",
     ["line 1: .backward() (autograd", "line 3: 'backward' (an autograd name", "line 3: operator.attrgetter() (code"]),
    ("ps1_derivations", ANSWER_DEF + "    for h in (1e-4,):\n        g = (L(x + h) - L0) / h\n    return g",
     ["line 3: (L(x + h) - L0) / h (a finite difference"]),
    ("ps1_derivations", ANSWER_DEF + "    return torch.diff(ys, dim=0)[0] * 500 + np.diff(ys) / np.diff(xs)",
     ["line 2: np.diff(ys) / np.diff(xs) (a finite", "line 2: torch.diff(ys, dim=0)[0] * 500 (a finite"]),
    ("ps1_derivations", "m.register_full_backward_hook(keep)", ["line 1: .register_full_backward_hook (a backward hook"]),
    ("ps1_derivations", ANSWER_DEF + "    t0 = time.perf_counter()\n    t1 = time.perf_counter()\n"
     "    us = (time.perf_counter() - t0) * 1e6 + (t1 - t0) * 1e6\n    return (s - s.mean()) / 1e-3 + (s - np.max(s)) / 1e-3",
     []),
    # hostile round 9 (helper-149): names looked up by inspect, vars() of anything, a compared string, a mapping
    # pattern, __getattr__, doctest, IPython macros, code as bytes
    ("ps1_derivations", "import inspect, torch\ng = vars(inspect.getmodule(torch.vmap))['grad']\n"
     "b = [m for n, m in inspect.getmembers(torch.Tensor) if n == 'backward']",
     ["line 2: inspect.getmodule() (code", "line 2: vars() (a name looked up", "line 3: 'backward' (an autograd name",
      "line 3: inspect.getmembers() (code"]),
    ("ps1_derivations", "match members:\n    case {'backward': b}:\n        pass\nf = torch.ops.aten.__getattr__('x')",
     ["line 2: 'backward' (an autograd name", "line 4: .__getattr__ (a name looked up"]),
    ("ps1_derivations", "import doctest, pickle\ndoctest.run_docstring_examples(f, {})\ng = pickle.loads(b)\n"
     "get_ipython().define_macro('r', 'x')",
     ["line 2: doctest.run_docstring_examples() (code", "line 3: pickle.loads() (code", "line 4: define_macro() (code"]),
    ("ps1_derivations", "import mpmath, operator, torch\nimport numpy as np\n" + ANSWER_DEF +
     "    h = torch.finfo(q.dtype).eps ** (1 / 3)\n    a = (L(q + h) - Lq) / (2 * h)\n"
     "    b = (fp - fm).div(2e-4) + torch.sub(fp, fm) / 2e-4 + operator.truediv(fp - fm, 2e-4)\n"
     "    c = torch.conv1d(x, torch.tensor([[[-5e4, 0, 5e4]]])) + torch.stack([fp, fm]) @ torch.tensor([5e3, -5e3])\n"
     "    return mpmath.diff(f, 1.0), torch.polar(r, t), np.lib._function_base_impl.gradient(y)",
     ["line 5: (L(q + h) - Lq) / (2 * h) (a finite", "line 6: (fp - fm).div(0.0002) (a finite",
      "line 6: operator.truediv(fp - fm, 0.0002) (a finite", "line 6: torch.sub(fp, fm) / 0.0002 (a finite",
      "line 7: [-50000.0, 0, 50000.0] (a finite", "line 7: [5000.0, -5000.0] (a finite",
      "line 8: mpmath.diff (finite", "line 8: numpy.lib._function_base_impl.gradient (finite",
      "line 8: torch.polar (a complex step"]),
    # honest: a hand-written layer's own backward method is said as possibly its own; json, a mask
    ("ps1_derivations", "class Head:\n    def backward(self, u):\n        return u\ng = Head().backward(1)\n"
     "import json\nx = json.loads('1')", ["line 4: .backward() (autograd, or the backward method this cell defines"]),
    # hostile round 10 (a student answering q1 with autograd or finite differences), and its false alarms.
    # honest: reading requires_grad, a mask less a tensor of ones, a compared string with no lookup in its function
    ("ps1_derivations", ANSWER_DEF + "    if q.requires_grad:\n        q = q.detach()\n    return q, getattr(k, 'requires_grad')",
     []),
    ("ps1_derivations", ANSWER_DEF + "    causal = torch.tril(torch.ones(3, 3))\n    m = (causal - torch.ones_like(causal)) * 1e9\n"
     "    return m + (c - torch.ones_like(c)) * 1e9", []),
    ("ps1_derivations", ANSWER_DEF + "    fp, fm = f(x + 1e-6), f(x - 1e-6).clone()\n    return (fp.sum() - fm) * 5e5",   # one function still
     ["line 3: (fp.sum() - fm) * 500000.0 (a finite"]),
    ("ps1_derivations", ANSWER_DEF + "    if order == 'backward':\n        return q\n    return k", []),
    # setting requires_grad by other roads; a compared string where its function looks names up
    ("ps1_derivations", "setattr(q, 'requires_grad', True)\ntorch.Tensor.requires_grad.__set__(k, True)\nv.requires_grad |= 1\n"
     "for n in dir(L):\n    if n == 'backward':\n        getattr(L, n)()",
     ["line 1: .requires_grad (autograd", "line 2: .requires_grad (autograd", "line 3: .requires_grad (autograd",
      "line 5: 'backward' (an autograd name", "line 6: getattr() by a name held in a variable"]),
    # finite differences: augmented, as dunder or keyword calls, a sum with a negation
    ("ps1_derivations", ANSWER_DEF + "    h = 1e-6\n    d = fp - fm\n    d /= 2 * h\n    a = (fp - fm).__truediv__(h)\n"
     "    b = torch.mul(fp - fm, 5e5) + torch.sub(fp, fm, alpha=1) / h + torch.div(fp - fm, h, rounding_mode=None)\n"
     "    return (fp + -fm) / h",
     ["line 4: d /= 2 * h (a finite", "line 5: (fp - fm).__truediv__(h) (a finite",
      "line 6: torch.div(fp - fm, h, rounding_mode=None) (a finite", "line 6: torch.mul(fp - fm, 500000.0) (a finite",
      "line 6: torch.sub(fp, fm, alpha=1) / h (a finite", "line 7: (fp + -fm) / h (a finite"]),
    # steps bound by a walrus, a match, unpacking, a string, a type's resolution; mpmath's contexts; sympy by any path
    ("ps1_derivations", "import mpmath, torch\n" + ANSWER_DEF + "    a = (fp - fm) / (h := 1e-5) + (fp - fm) / h\n"
     "    match 1e-6:\n        case e:\n            b = (fp - fm) / e\n    s, = (1e-6,)\n    t = float('1e-6')\n"
     "    r = torch.finfo(q.dtype).resolution\n    c = (fp - fm) / s + (fp - fm) / t + (fp - fm) / r\n"
     "    return mpmath.mp.diff(f, 1.0), torch.utils._sympy.functions.sympy.diff(e)",
     ["line 3: (fp - fm) / (h := 1e-05) (a finite", "line 3: (fp - fm) / h (a finite", "line 6: (fp - fm) / e (a finite",
      "line 10: (fp - fm) / r (a finite", "line 10: (fp - fm) / s (a finite", "line 10: (fp - fm) / t (a finite",
      "line 11: mpmath.mp.diff (finite", "line 11: torch.utils._sympy.functions.sympy.diff (symbolic"]),
    # code run where the scan cannot read it: magics with computed code, a shell's kept output, unpicklers,
    # evaluators of source strings and annotations, getattr as a value, a class that pickles to a call
    ("ps1_derivations", "get_ipython().run_line_magic('time', code)\nx = !python -c 'print(1)'\ny = %sx ls\n%store -r f\n"
     "%timeit -t -c -q -o -n1 -r1 -p3 L.backward()",
     ["line 1: .run_line_magic (a magic whose code", "line 2: getoutput() (a shell command's output",
      "line 3: .run_line_magic (a magic whose code", "line 4: .run_line_magic (a magic whose code",
      "line 5: .run_line_magic (a magic whose code"]),
    ("ps1_derivations", "import pickle, inspect, doctest, torch, jinja2, string, typing\ng = pickle.Unpickler(f).load()\n"
     "a = inspect.classify_class_attrs(torch.Tensor)\ns = doctest.DocTestSuite(m)\ncu = torch.jit.CompilationUnit(src)\n"
     "t = jinja2.Template(src)\nv = string.Formatter().get_field('0.grad', (q,), {})\nh = typing.get_type_hints(f)",
     ["line 2: pickle.Unpickler() (runs code the scan cannot read", "line 3: inspect.classify_class_attrs() (runs code",
      "line 4: doctest.DocTestSuite() (runs code", "line 5: torch.jit.CompilationUnit() (runs code",
      "line 6: jinja2.Template() (runs code", "line 7: get_field() (runs code", "line 8: typing.get_type_hints() (runs code"]),
    ("ps1_derivations", "import functools\ng = list(map(getattr, [L], ['backward']))\nclass R:\n    def __reduce__(self):\n"
     "        return (print, ('x',))\nclass S:\n    __reduce_ex__ = f",
     ["line 2: getattr passed as a value (a name looked up", "line 4: __reduce__ (pickle and copy call what it returns",
      "line 7: __reduce_ex__ (pickle and copy"]),
])
def test_the_scans_holes_are_closed(assignment_id, source, expected):
    test_reference_calls_are_found(assignment_id, source, expected)


def test_magics_and_shell_lines_do_not_hide_code_without_ipython_either(monkeypatch):
    """A cell that is not valid Python even as IPython transforms it (the kernel runs none of it) is read
    with its magic and shell lines made neutral lines, and the rest is still read."""
    import ast as python_ast
    monkeypatch.setattr(assignments, "_parse", python_ast.parse)
    source = ("from bayesattn_lite import attention\n!pip list\nout = !ls\n%matplotlib inline\n"
              "%time g = attention.gradients(x, y, p)\nhelp = attention.score_gradient?\nx = attention.error_signal(1)")
    found = assignments.reference_calls(source, "ps1_derivations")
    assert [f.split(" (")[0] for f in found] == ["line 5: attention.gradients", "line 7: attention.error_signal"], found


# numerical differentiation in an answer of problem set 1's derivations: reported (instructors.md says it is no answer)
ANSWER = "def biased_qk_gradients(q, k, v, u, tau, slope):\n"


@pytest.mark.parametrize("source, expected", [
    (ANSWER + "    h = 1e-6\n    return (L(q + h) - L(q - h)) / (2 * h)", ["line 3: (L(q + h) - L(q - h)) / (2 * h) (a finite"]),
    (ANSWER + "    return (L(q + 1e-20j)).imag / 1e-20", ["line 2: 1e-20j (a complex step"]),
    (ANSWER + "    z = torch.complex(q, 1e-20 * torch.ones_like(q))\n    return L(z).imag",
     ["line 2: torch.complex (a complex step"]),
    (ANSWER + "    return np.gradient(L(q))", ["line 2: numpy.gradient (finite differences"]),
    (ANSWER + "    return gradcheck.finite_difference(L, q, 0)", ["line 2: gradcheck.finite_difference (answers q1"]),
    ("def value_update_basis(W_O, eps=1e-5):\n    g = torch.zeros(3)\n    for i in range(3):\n"
     "        W_O[i] += eps\n        a = L(W_O)\n        W_O[i] -= 2 * eps\n        g[i] = (a - L(W_O)) / (2 * eps)\n"
     "    return g", ["line 7: (a - L(W_O)) / (2 * eps) (a finite difference"]),
    (ANSWER + "    return (f(q, slope) - f(k, slope)) / (q - k)", ["line 2: (f(q, slope) - f(k, slope)) / (q - k)"]),
    # derived answers are not flagged: a normalisation, a mean, a scale
    (ANSWER + "    d = (q - q.mean(0)) / (q.std(0) + 1e-12)\n    return (d - k) / tau, (k - d) / math.sqrt(2)", []),
    ("def helper(x):\n    return (f(x + 1e-6) - f(x)) / 1e-6", []),  # not an answer cell (by itself)
])
def test_numerical_differentiation_in_an_answer_is_reported(source, expected):
    prefix = "import numpy as np\nimport torch\nfrom bayesattn_lite import gradcheck\n"
    found = assignments.reference_calls(prefix + source, "ps1_derivations")
    assert len(found) == len(expected), found
    for got, want in zip(found, expected):
        line, rest = want.split(": ", 1)  # the lines of ``source``, after the three of ``prefix``
        assert got.startswith(f"line {int(line.split()[1]) + 3}: {rest}"), (got, want)
        assert "numerical differentiation" in got or "answers q1: numerical differentiation" in got, got
    assert assignments.reference_calls(prefix + source, "ps2_dynamics") == []  # set 2 measures small steps


def test_a_name_bound_in_one_cell_is_resolved_in_another():
    """A dynamic import, a getattr or a renaming in one cell, the call in a later one (a cell magic's body)."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import importlib\nm = importlib.import_module('bayesattn_lite.checks')"),
        nbformat.v4.new_code_cell("ps = getattr(m, 'problem_sets')\nA = ps.attention"),
        nbformat.v4.new_code_cell("%%time\ng = A.gradients(x, y, p)")])
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert found[0].startswith("cell 1 of the notebook, line 2: importlib.import_module('bayesattn_lite.checks')"), found
    assert found[1:] == ["cell 3 of the notebook, line 2: attention.gradients (answers q1/q3: every gradient of the head, reached as "
                         "checks.problem_sets.attention.gradients)"], found


def test_numerical_differentiation_is_found_in_the_helpers_an_answer_uses():
    """A finite difference in another cell is reported when the answer's function uses it (through any number
    of cells), not in a scratch cell the answer does not use."""
    assignment = ASSIGNMENTS["ps1_derivations"]
    nb = nbformat.read(assignment.student_path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def biased_qk_gradients"))
    cell.source = "def biased_qk_gradients(q, k, v, u, tau, slope):\n    return numeric(q), numeric(k)"
    nb.cells += [nbformat.v4.new_code_cell("def numeric(x):\n    return central(lambda y: y.sum(), x)"),
                 nbformat.v4.new_code_cell("def central(f, x, h=1e-6):\n    return (f(x + h) - f(x - h)) / (2 * h)"),
                 nbformat.v4.new_code_cell("def check_mine(f, x, h=1e-6):\n    return (f(x + h) - f(x - h)) / (2 * h)")]
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert len(found) == 1 and found[0].startswith(f"cell {len(nb.cells) - 1} of the notebook, line 2: (f(x + h) - f(x - h))"), found


def test_a_local_name_of_an_answer_does_not_pull_in_a_cell_that_assigns_the_same_name():
    """An honest answer with a local ``delta`` was reported for the course's q4 cell, which assigns its own
    ``delta`` and calls attention.gradients: a function's parameters and locals are its own."""
    assignment = ASSIGNMENTS["ps1_derivations"]
    nb = nbformat.read(assignment.student_path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def biased_qk_gradients"))
    course_cell = next(c for c in nb.cells if c.cell_type == "code" and "attention.gradients" in c.source)
    assert "    delta = descend(steps, train_W_O)" in course_cell.source   # its delta comes from its descend
    cell.source = ("def biased_qk_gradients(q, k, v, u, tau, slope):\n    delta = q - k\n    return delta, delta")
    assert assignments.notebook_reference_calls(nb, "ps1_derivations") == []
    cell.source = "def biased_qk_gradients(q, k, v, u, tau, slope):\n    return delta, delta"   # the course's delta: read
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert found and all(f.startswith(f"cell {nb.cells.index(course_cell) + 1} of the notebook") for f in found), found


def test_only_the_code_an_answer_reaches_is_read_for_numerical_differentiation():
    """Hostile round 10's false alarms: a finite-difference self-check at the top of the answer's cell (d01) or
    of a helper's cell (d02) is no answer; nor is a study cell whose name the answer's nested def shares (d05).
    The same difference inside the helper the answer calls is still reported."""
    assignment = ASSIGNMENTS["ps1_derivations"]
    nb = nbformat.read(assignment.student_path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def biased_qk_gradients"))
    check = "h = 1e-6\nfd = (L(q0 + h) - L(q0 - h)) / (2 * h)\nprint(abs(fd - g).max())\n"
    cell.source = ("def biased_qk_gradients(q, k, v, u, tau, slope):\n    def attention_weights(s):\n"
                   "        return s.softmax(-1)\n    return helper(attention_weights(q)), k\n" + check)
    nb.cells += [nbformat.v4.new_code_cell("def helper(x):\n    return 2 * x\n" + check),
                 nbformat.v4.new_code_cell("def attention_weights(s, h=1e-6):\n    return (f(s + h) - f(s - h)) / (2 * h)")]
    assert assignments.notebook_reference_calls(nb, "ps1_derivations") == []
    nb.cells[-2].source = "def helper(x, h=1e-6):\n    return (f(x + h) - f(x - h)) / (2 * h)\n" + check
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert len(found) == 1 and found[0].startswith(f"cell {len(nb.cells) - 1} of the notebook, line 2: (f(x + h)"), found
    # a top-level statement that fills what the answer returns is the answer's code
    cell.source = ("def biased_qk_gradients(q, k, v, u, tau, slope):\n    return G, k\nG = {}\nh = 1e-6\n"
                   "for i in range(3):\n    G[i] = (L(q0 + h) - L(q0 - h)) / (2 * h)\n" + check)
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert [f.split(" (a finite")[0] for f in found] == [f"cell {nb.cells.index(cell) + 1} of the notebook, line 6: "
                                                         "(L(q0 + h) - L(q0 - h)) / (2 * h)"], found


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_the_instructor_solutions_use_no_numerical_differentiation(assignment):
    nb = nbformat.read(assignment.instructor_path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and assignments.SOLUTION_TAG in cell.metadata.get("tags", []):
            assert assignments.reference_calls(cell.source, assignment.id, answer=True) == [], cell.source[:80]


def test_a_huge_cell_is_not_parsed_and_the_others_are_still_scanned():
    """A 13 MB cell of 1,1,1,... would build an AST of gigabytes: the scan notes it without parsing it,
    at once, and reads the notebook's other cells."""
    import time
    import tracemalloc
    huge = "x = [" + "1," * 6_500_000 + "]"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from bayesattn_lite import attention"), nbformat.v4.new_code_cell(huge),
        nbformat.v4.new_code_cell("g = attention.gradients(x, y, p)")])
    tracemalloc.start()
    start = time.perf_counter()
    alone = assignments.reference_calls(huge, "ps1_derivations")
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(alone) == 1 and "13,000,006 characters, over the 262,144" in alone[0] and "not scanned" in alone[0]
    assert found == [f"cell 2 of the notebook, {alone[0]}", "cell 3 of the notebook, line 1: attention.gradients (answers q1/q3: every gradient of "
                     "the head)"], found
    assert seconds < 2 and peak < 64 * 2 ** 20, (seconds, peak)


def test_the_scan_is_linear_in_a_long_attribute_chain_and_has_a_budget_per_notebook(monkeypatch):
    """A cell of 2,900-part attribute chains (which IPython cannot compile, so the answer above it stands)
    was read at every level of every chain: quadratic, 73 s of the grader's time for half a MB. Each
    level now stops at MAX_NAME_PARTS, and past SCAN_SECONDS a notebook's remaining cells are noted."""
    import time
    chain = "def f():\n    return None\n" + "\n".join(["    x" + ".a" * 2900] * 10)
    start = time.perf_counter()
    found = assignments.reference_calls(chain, "ps1_derivations")   # Python's parser may give up on it first
    assert found in ([], ["line 1: nested too deeply to read: not scanned"]), found
    assert time.perf_counter() - start < 5
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("from bayesattn_lite import attention"),
                                         nbformat.v4.new_code_cell("g = attention.gradients(x, y, p)")])
    monkeypatch.setattr(assignments, "SCAN_SECONDS", -1)
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")   # out of time before any use is read:
    assert len(found) == 1 and found[0].startswith("no cell scanned: the scan's -1 s")   # it says none is listed


def test_a_cell_nested_too_deeply_costs_the_scan_of_no_other_cell():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = " + "-" * 100_000 + "1"),
        nbformat.v4.new_code_cell("from bayesattn_lite import attention\ng = attention.gradients(x, y, p)")])
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert found[0] == "cell 1 of the notebook, line 1: nested too deeply to read: not scanned" and "cell 2 of the notebook, line 2: attention" in found[1]


def test_a_submission_that_calls_the_reference_is_reported_with_its_cell():
    assignment = ASSIGNMENTS["ps2_dynamics"]
    nb = nbformat.read(assignment.student_path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("def tempered_score_change"):
            cell.source = ("def tempered_score_change(x, W_Q, W_K, ds, eta, tau):\n"
                           "    return attention.predicted_score_change(x, x @ W_Q.T, x @ W_K.T, ds, float(eta)) / tau ** 2")
            number = nb.cells.index(cell) + 1
    found = assignments.notebook_reference_calls(nb, "ps2_dynamics")
    assert found == [f"cell {number} of the notebook, line 2: attention.predicted_score_change (answers q3: the first-order score change)"]
    # and the answer obtained that way passes the check: the report is what catches it
    assert checks.check_tempered_score_change(
        lambda x, W_Q, W_K, ds, eta, tau: attention_reference(x, W_Q, W_K, ds, eta) / tau ** 2)


def attention_reference(x, W_Q, W_K, ds, eta):
    from bayesattn_lite import attention
    return attention.predicted_score_change(x, x @ W_Q.T, x @ W_K.T, ds, float(eta))


# What each problem set asks the learner to find: none of it may appear in the student version.
ANSWERS = {
    "ps1_derivations": ["alpha (b - E_alpha[b])", "b = u v^T", "sum_c r_c = 0", "W_O^T (I - 11^T", "(dL/ds)^T q"],
    "ps2_dynamics": ["c_ij = delta_ij", "c_ij^2", "K[i',j',i,j]", "(x_i.x_i')(k_j.k_j')", "-eta / tau^2"],
    "ps3_experiment": ["pi P = pi", "sum_i pi_i H", "H(pi)", "left eigenvector"],
}


def _solution_lines(nb):
    """The lines inside the BEGIN/END SOLUTION blocks of every solution cell (the answer itself)."""
    lines = []
    for cell in nb.cells:
        if assignments.SOLUTION_TAG not in cell.metadata.get("tags", []):
            continue
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN SOLUTION" in line:
                inside = True
            elif "END SOLUTION" in line:
                inside = False
            elif inside and len(line.strip()) >= 16:
                lines.append(line.strip())
    return lines


@pytest.mark.parametrize("assignment", ASSIGNMENTS.values(), ids=lambda a: a.id)
def test_the_student_version_states_the_task_not_its_answer(assignment):
    instructor = nbformat.read(assignment.instructor_path, as_version=4)
    student = "\n".join(c.source for c in nbformat.read(assignment.student_path, as_version=4).cells)
    leaked = [line for line in _solution_lines(instructor) if line in student]
    assert not leaked, f"{assignment.id}: lines of a solution in the student version: {leaked[:3]}"
    given = [answer for answer in ANSWERS[assignment.id] if answer in student]
    assert not given, f"{assignment.id}: the student version gives away {given} (in a hint, docstring or message)"


@pytest.mark.parametrize("cells", [50, 400])
def test_the_reference_call_scan_reads_each_cell_a_bounded_number_of_times(monkeypatch, cells):
    """The scan once read every other cell's imports for each cell (cells squared parses: a 2,000-cell
    notebook held the grader for minutes); now each cell is read at most twice, whatever their number."""
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"import math as m{i}\ny{i} = m{i}.pi")
                                         for i in range(cells)])
    parsed = []
    real = assignments._parse
    monkeypatch.setattr(assignments, "_parse", lambda source: parsed.append(1) or real(source))
    assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert len(parsed) <= 2 * cells + 2, f"{len(parsed)} parses for {cells} cells"


def test_the_rubrics_are_model_answers_kept_out_of_the_package():
    """RUBRICS.md is their only copy: no rubric line is in the package's source (the wheel)."""
    source = "".join(p.read_text(encoding="utf-8") for p in assignments.ROOT.joinpath("bayesattn_lite").rglob("*.py"))
    for assignment in ALL:
        for q in assignment.questions:
            for line in q.rubric.splitlines() if q.written else ():
                assert line.split(": ", 1)[1][:60] not in source, f"{assignment.id} {q.id}: a rubric in the package"


def test_a_long_chain_of_aliases_is_not_followed_and_costs_little():
    """c1 = c0.x, c2 = c1.x, ...: each alias's name was one part longer, quadratic work before the clock started."""
    import time
    source = "import bayesattn_lite as c0\n" + "\n".join(f"c{k} = c{k - 1}.__class__" for k in range(1, 4001))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    start = time.perf_counter()
    assert assignments.notebook_reference_calls(nb, "ps2_dynamics") == []
    assert time.perf_counter() - start < 10
    aliases = assignments._aliases(ast.parse(source))
    assert max(name.count(".") for name in aliases.values()) < assignments.MAX_NAME_PARTS


def test_a_cell_of_many_shell_lines_is_noted_in_bounded_time_not_read_by_another_rule():
    """IPython's transform reads a cell again for each magic or shell line: 500 of them in a large cell
    held a grading worker for minutes (the fourth hostile round). Past a bound the cell was read by a rewrite
    of the scan's own, which turned a string's line ending in "?" into ``pass`` while the kernel ran the code
    around it (hostile round 10): now such a cell is noted as not scanned, as is one IPython cannot transform."""
    import time
    hidden = '_n = """x\n"""; qq.requires_grad_(); L.backward(); _n = """?\n"""\n'
    for source in ("!true\n" * 400 + "x = 1\n" * 20_000 + "%time loss.backward()\n",
                   "%pwd\n" * 11 + "_pad = '" + "x" * 50_000 + "'\n" + hidden):
        start = time.perf_counter()
        found = assignments.reference_calls(source, "ps1_derivations")
        assert time.perf_counter() - start < 10
        assert len(found) == 1 and found[0].startswith("line 1: not scanned: ") and "read this cell yourself" in found[0], found
    assert [f.split(" (")[0] for f in assignments.reference_calls(hidden, "ps1_derivations")] == [
        "line 2: .backward()", "line 2: .requires_grad_"]   # within the bound, IPython's transform: the code is read


def test_a_cell_ipython_cannot_transform_is_noted_as_not_scanned(monkeypatch):
    from IPython.core.inputtransformer2 import TransformerManager

    def fail(self, cell):
        raise RuntimeError("Input transformation still changing after 500 iterations")
    monkeypatch.setattr(TransformerManager, "transform_cell", fail)
    found = assignments.reference_calls("%pwd\nq.requires_grad_()", "ps1_derivations")
    assert len(found) == 1 and "IPython's transform failed" in found[0] and "not scanned" in found[0], found


def test_the_uses_in_answer_cells_are_listed_before_a_scratch_cells_many():
    """Decoys before the answer cannot push its use past the report's limit: answer cells come first."""
    assignment = ASSIGNMENTS["ps1_derivations"]
    nb = nbformat.read(assignment.student_path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def biased_qk_gradients"))
    cell.source = ("def biased_qk_gradients(q, k, v, u, tau, slope):\n"
                   "    return torch.autograd.grad((q * k).sum(), (q, k))")
    at = nb.cells.index(cell)
    nb.cells.insert(at, nbformat.v4.new_code_cell("import torch\n" + "torch.autograd.grad\n" * 300))
    found = assignments.notebook_reference_calls(nb, "ps1_derivations")
    assert found[0].startswith(f"cell {at + 2} of the notebook, line 2: torch.autograd.grad"), found[:2]


@pytest.mark.parametrize("source", ["import re\np = re.compile('a')", "for ex in range(3):\n    print(ex)",
                                    "import torch\nm = torch.nn.Linear(2, 2)\nn = len(list(m.modules()))"])
def test_ordinary_code_that_shares_a_name_with_a_code_runner_is_not_reported(source):
    """compile, ex and modules are also re.compile, a loop variable and nn.Module.modules: only the builtins
    (bare or from builtins), IPython's executors and sys.modules are reported."""
    assert assignments.reference_calls(source, "ps1_derivations") == []


def test_a_helper_defined_under_an_if_is_the_cells_definition():
    """A finite-difference helper under ``if True:`` (or in a ``try``) in its own cell: the answer that calls
    it makes that cell an answer cell, as a helper at the cell's top level does."""
    import ast as python_ast
    tree = python_ast.parse("if True:\n    def central(f, h=1e-5):\n        return f\ntry:\n    g = 1\nexcept Exception:\n"
                            "    pass\ndef outer():\n    def inner():\n        pass\nmatch 0:\n    case _:\n        def m():\n"
                            "            pass")
    assert set(assignments._definitions(tree)) == {"central", "g", "outer", "m"}   # not what a function defines inside

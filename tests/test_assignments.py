"""The problem sets: the committed student versions are what the generator makes of the instructor
versions, they leak no solution, and every question the grader runs names a real check and an object
the instructor version defines."""

import ast

import nbformat
import pytest

from bayesattn_lite import assignments, checks
from bayesattn_lite.assignments import ASSIGNMENTS

ALL = sorted(ASSIGNMENTS.values(), key=lambda a: a.id)


@pytest.mark.parametrize("assignment", ALL, ids=lambda a: a.id)
def test_committed_student_version_is_up_to_date(assignment):
    assert assignment.student_path.exists(), f"run python -m bayesattn_lite.assignments to write {assignment.student_path.name}"
    assert assignment.student_path.read_text(encoding="utf-8") == assignments.render(assignment), (
        f"{assignment.student_path.name} is out of date: run python -m bayesattn_lite.assignments")


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
        assert callable(getattr(checks, q.check, None)), q.check
        assert set(q.names) <= defined, f"{q.id}: {set(q.names) - defined} not defined in {assignment.instructor_path.name}"
        assert q.points > 0


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

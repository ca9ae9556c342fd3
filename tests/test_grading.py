"""The autograder on a correct submission (the instructor version), an unanswered one (the student
version) and broken ones: a syntax error, an endless loop, a dying kernel, a file that is not a notebook.
Every case gets a report and exit status 0; the submission file is never modified."""

import hashlib
import json
import subprocess
import sys

import nbformat
import pytest

from bayesattn_lite import grading
from bayesattn_lite.assignments import ASSIGNMENTS

PS1 = ASSIGNMENTS["ps1_derivations"]


def _grade(tmp_path, submission, *extra):
    report = tmp_path / "out" / "report.json"
    before = hashlib.sha256(submission.read_bytes()).hexdigest()
    assert grading.main([str(submission), "--report", str(report), *extra]) == 0
    assert hashlib.sha256(submission.read_bytes()).hexdigest() == before, "the submission was modified"
    data = json.loads(report.read_text())
    md = report.with_suffix(".md").read_text()
    assert f"Score: {data['score']} / {data['max_score']}" in md
    return data, md


def _variant(tmp_path, name, change):
    """A copy of the instructor version of problem set 1, changed by ``change(cells)``."""
    nb = nbformat.read(PS1.instructor_path, as_version=4)
    change(nb.cells)
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def _code_cell_defining(cells, name):
    return next(c for c in cells if c.cell_type == "code" and f"def {name}(" in c.source)


def test_the_instructor_version_gets_full_marks(tmp_path, capsys):
    data, md = _grade(tmp_path, PS1.instructor_path)
    assert data["assignment"] == "ps1_derivations"
    assert data["score"] == data["max_score"] == sum(q.points for q in PS1.questions) == 10
    assert [q["id"] for q in data["questions"]] == ["q1", "q2", "q3", "q4"]
    assert all(q["passed"] and q["points"] == q["max_points"] for q in data["questions"])
    assert data["problems"] == []
    assert "10 / 10" in capsys.readouterr().out


def test_the_student_version_gets_zero_and_says_what_is_missing(tmp_path):
    data, md = _grade(tmp_path, PS1.student_path)
    assert data["score"] == 0 and data["max_score"] == 10
    for q in data["questions"]:
        assert not q["passed"] and q["feedback"].startswith("not answered yet")
    assert "u = (softmax(logits) - onehot(y)) @ W_O / T" in data["questions"][0]["feedback"]


def test_a_wrong_answer_and_a_syntax_error_cost_only_their_questions(tmp_path):
    def change(cells):
        cell = _code_cell_defining(cells, "error_signal")
        cell.source = cell.source.replace("- torch.nn.functional.one_hot", "+ torch.nn.functional.one_hot")
        _code_cell_defining(cells, "score_gradient").source = "def score_gradient(alpha, b:\n    return alpha"

    data, md = _grade(tmp_path, _variant(tmp_path, "answers.ipynb", change), "--assignment", "ps1_derivations")
    points = {q["id"]: q["points"] for q in data["questions"]}
    assert points == {"q1": 0, "q2": 0, "q3": 3, "q4": 2} and data["score"] == 5
    assert "score_gradient" in data["questions"][1]["feedback"] and "not defined" in data["questions"][1]["feedback"]
    assert any("SyntaxError" in p for p in data["problems"])


def test_an_endless_loop_is_interrupted_and_grading_goes_on(tmp_path):
    def change(cells):
        cells.insert(3, nbformat.v4.new_code_cell("while True:\n    pass"))

    data, _ = _grade(tmp_path, _variant(tmp_path, "loop.ipynb", change), "--assignment", "ps1_derivations",
                     "--timeout", "5")
    assert any("longer than 5" in p for p in data["problems"])
    assert data["score"] == 10


def test_a_dying_kernel_still_gets_a_report(tmp_path):
    def change(cells):
        cells.insert(3, nbformat.v4.new_code_cell("import os\nos._exit(1)"))

    data, md = _grade(tmp_path, _variant(tmp_path, "dies.ipynb", change), "--assignment", "ps1_derivations")
    assert data["score"] == 0 and data["max_score"] == 10
    assert any("execution stopped" in p for p in data["problems"])
    assert "Problems while running your notebook" in md


@pytest.mark.parametrize("content", ["{ this is not json", json.dumps({"cells": "no"}), ""])
def test_a_file_that_is_not_a_notebook_gets_a_report_from_the_command_line(tmp_path, content):
    bad = tmp_path / "ps1_derivations_submission.ipynb"
    bad.write_text(content)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "bayesattn_lite.grading", str(bad), "--report", str(report)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    assert data["assignment"] == "ps1_derivations"  # from the file name
    assert data["score"] == 0 and data["max_score"] == 10
    assert "not a Jupyter notebook" in data["problems"][0]
    assert bad.read_text() == content


def test_an_unknown_assignment_is_reported(tmp_path):
    path = tmp_path / "homework.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    data, md = _grade(tmp_path, path)
    assert data["assignment"] is None and data["max_score"] == 0
    assert "--assignment" in data["problems"][0]


def test_an_unwritable_report_path_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert grading.main([str(tmp_path / "x.ipynb"), "--report", str(blocker / "sub" / "r.json")]) == 2

"""Reports, the gradebook, manual points and feedback (bayesattn_lite.instructor.release), without a kernel."""

import csv
import json

import pytest

from bayesattn_lite.instructor import release


def _report(name="alice_ps1.ipynb", late=None):
    return {"submission": name, "assignment": "ps1_derivations", "title": "Problem set 1", "status": "graded",
            "score": 3, "max_score": 7, "manual_pending": 2, "problems": [], "reference_calls": [],
            "late": late or {"submitted": None, "kept": 1.0, "note": ""},
            "questions": [
                {"id": "q1", "title": "gradients", "manual": False, "points": 3, "max_points": 3, "passed": True,
                 "feedback": "matches the reference on 5 random inputs."},
                {"id": "q2", "title": "why", "manual": True, "points": None, "max_points": 2, "passed": None,
                 "answer": "<script>alert(1)</script> the bias", "answered": True, "instructor_points": None,
                 "comment": "", "feedback": "a written answer: your instructor grades it with the rubric"},
                {"id": "q3", "title": "basis", "manual": False, "points": 0, "max_points": 2, "passed": False,
                 "feedback": "wrong sign."}]}


def _write_manual(path, rows):
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(release.MANUAL_COLUMNS)
        writer.writerows(rows)
    return path


def test_the_template_lists_every_written_answer_and_never_overwrites_the_instructors_file(tmp_path):
    path = tmp_path / "manual.csv"
    assert release.manual_template([_report("a.ipynb"), _report("b.ipynb")], path)
    rows = list(csv.DictReader(path.open()))
    assert [(r["submission"], r["question"]) for r in rows] == [("a.ipynb", "q2"), ("b.ipynb", "q2")]
    path.write_text("mine")
    assert not release.manual_template([_report()], path) and path.read_text() == "mine"


def test_manual_points_are_merged_totalled_and_can_override_a_checked_question(tmp_path):
    report = _report()
    marks = release.read_manual(_write_manual(tmp_path / "m.csv", [
        ["alice_ps1.ipynb", "q2", "1.5", "good on (a), (b) misses the tau"],
        ["alice_ps1.ipynb", "q3", "1", "a sign slip only: one point back"]]))
    release.merge_manual([report], marks)
    q = {q["id"]: q for q in report["questions"]}
    assert q["q2"]["instructor_points"] == 1.5 and q["q3"]["instructor_points"] == 1
    assert report["score"] == 3 + 1.5 + 1 and report["manual_pending"] == 0
    header, rows = release.gradebook_rows([report])
    row = dict(zip(header, rows[0]))
    assert row["q2_manual"] == 1.5 and row["q3"] == 1 and row["q2_answered"] == "yes"


def test_the_late_policy_scales_the_total_with_the_manual_points_in(tmp_path):
    report = _report(late={"submitted": "2027-02-03T00:00:00+00:00", "kept": 0.8, "note": "2 days late: -20%"})
    release.merge_manual([report], {("alice_ps1.ipynb", "q2"): (2.0, "")})
    assert report["raw_score"] == 5 and report["score"] == 4
    assert "2 days late" in release.markdown(report)


@pytest.mark.parametrize("rows, words", [
    ([["nobody.ipynb", "q2", "1", ""]], "nobody.ipynb q2: no such submission"),
    ([["alice_ps1.ipynb", "q9", "1", ""]], "alice_ps1.ipynb q9: no such question"),
    ([["alice_ps1.ipynb", "q2", "3", ""]], "between 0 and 2"),
])
def test_a_manual_row_that_matches_nothing_is_refused_by_name(tmp_path, rows, words):
    marks = release.read_manual(_write_manual(tmp_path / "m.csv", rows))
    with pytest.raises(ValueError, match=words):
        release.merge_manual([_report()], marks)


def test_a_manual_file_with_bad_columns_or_points_is_refused_with_its_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("submission,points\nx,1\n")
    with pytest.raises(ValueError, match="missing question, comment"):
        release.read_manual(bad)
    with pytest.raises(ValueError, match="line 2: points must be a number"):
        release.read_manual(_write_manual(tmp_path / "m.csv", [["a", "q2", "two", ""]]))


def test_feedback_is_released_as_markdown_and_escaped_html(tmp_path):
    report = _report()
    report["report"] = str(tmp_path / "alice.json")
    release.merge_manual([report], {("alice_ps1.ipynb", "q2"): (2.0, "<b>nice</b>")})
    release.release([report], tmp_path / "feedback")
    page = (tmp_path / "feedback" / "alice.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;nice&lt;/b&gt;" in page
    assert "Score: 5 / 7" in page
    words = (tmp_path / "feedback" / "alice.md").read_text()
    assert "Your instructor: <b>nice</b>" in words and "| 2 / 2 |" in words


def test_an_unanswered_written_question_is_marked_in_the_gradebook():
    report = _report()
    report["questions"][1].update(answer="", answered=False)
    header, rows = release.gradebook_rows([report])
    assert dict(zip(header, rows[0]))["q2_answered"] == "unanswered"


def test_reports_are_read_back_in_name_order_with_their_path(tmp_path):
    for name in ("b", "a"):
        release.write_report(_report(f"{name}.ipynb"), tmp_path / f"{name}.json")
    reports = release.load_reports(tmp_path)
    assert [r["submission"] for r in reports] == ["a.ipynb", "b.ipynb"]
    assert json.loads((tmp_path / "a.json").read_text())["score"] == 3 and reports[0]["report"].endswith("a.json")

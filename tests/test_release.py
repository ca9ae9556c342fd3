"""Reports, the gradebook, manual points and feedback (bayesattn_lite.instructor.release), without a kernel."""

import csv
import json
import unicodedata

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

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
    assert [(r["submission"], r["question"]) for r in rows] == [("a.ipynb", "q2"), ("b.ipynb", "q2")]   # no report file: the submission names
    path.write_text("mine")   # not a manual-points file: the instructor's to mend, left as it is
    assert not release.manual_template([_report()], path) and path.read_text() == "mine"


def test_the_template_gains_rows_for_files_graded_since_and_keeps_the_instructors_rows(tmp_path):
    path = _write_manual(tmp_path / "manual.csv", [["a.ipynb", "q2", "1.5", "a fair try"]])
    text = path.read_text()
    added = release.manual_template([_report("a.ipynb"), _report("b.ipynb")], path)
    assert added == [["b.ipynb", "q2", "", ""]] and path.read_text().startswith(text)
    assert release.read_manual(path) == {("a.ipynb", "q2"): (1.5, "a fair try"), ("b.ipynb", "q2"): (None, "")}
    assert release.manual_template([_report("a.ipynb"), _report("b.ipynb")], path) == []   # nothing new: unchanged


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
    assert row["q3_manual"] == 1 and "q1_manual" not in row   # a checked question set by hand shows as such
    words = release.markdown(report)
    assert "points set by your instructor (the automatic check said: wrong sign). Your instructor: a sign slip" in words


def test_an_unanswered_written_question_is_0_not_pending():
    report = _report()
    report["questions"][1].update(answer="", answered=False)
    release.total(report)
    words = release.markdown(report)
    assert report["manual_pending"] == 0 and "| 0 / 2 | not answered: the answer cell still holds the stub" in words
    assert "your instructor grades it" not in words.split("## Your written answers")[0]
    assert "before" not in release.summary_line(report)
    report["questions"][1]["answered"] = True
    release.total(report)
    assert report["manual_pending"] == 2 and "before 2 points of written answers" in release.summary_line(report)


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


def test_two_submissions_whose_names_print_alike_get_their_own_manual_rows(tmp_path):
    # a hostile student named a file "dup<newline>.ipynb" beside a classmate's "dup\\n.ipynb": both print
    # as dup\n, and the manual points of one went to the other, silently
    reports = [_report("dup\n.ipynb"), _report("dup\\n.ipynb")]
    reports[0]["report"], reports[1]["report"] = str(tmp_path / "dup_.json"), str(tmp_path / "dup_n.json")
    path = tmp_path / "manual.csv"
    assert release.manual_template(reports, path)
    assert [r["submission"] for r in csv.DictReader(path.open())] == ["dup_", "dup_n"]
    release.merge_manual(reports, {("dup_", "q2"): (1.0, ""), ("dup_n", "q2"): (2.0, "")})
    assert [r["questions"][1]["instructor_points"] for r in reports] == [1, 2]
    with pytest.raises(ValueError, match=r"names 2 submissions; use their report names dup_, dup_n"):
        release.merge_manual(reports, {("dup\\n.ipynb", "q2"): (1.0, "")})   # how the gradebook prints both
    with pytest.raises(ValueError, match="line 3: dup_ q2 has a row already, on line 2"):
        release.read_manual(_write_manual(tmp_path / "m.csv", [["dup_", "q2", "1", ""], ["dup_", "q2", "2", ""]]))


def test_a_report_name_that_is_also_another_submissions_file_name_means_its_own_report(tmp_path):
    # x.ipynb's report is x.json and x.ipynb.ipynb's is x.ipynb.json: the template names the second
    # "x.ipynb", which is also the first's file name, and the merge refused the whole file as ambiguous
    reports = [_report("x.ipynb"), _report("x.ipynb.ipynb")]
    reports[0]["report"], reports[1]["report"] = str(tmp_path / "x.json"), str(tmp_path / "x.ipynb.json")
    path = tmp_path / "manual.csv"
    assert release.manual_template(reports, path)
    names = [r["submission"] for r in csv.DictReader(path.open())]
    assert names == ["x", "x.ipynb"]
    release.merge_manual(reports, {(names[0], "q2"): (1.0, ""), (names[1], "q2"): (2.0, "")})
    assert [r["questions"][1]["instructor_points"] for r in reports] == [1, 2]
    release.merge_manual(reports, {("x.ipynb.ipynb", "q2"): (0.5, "")})   # a file name no report is named still works
    assert reports[1]["questions"][1]["instructor_points"] == 0.5
    notes = []   # an instructor who typed the first one's file name is told where the points went
    release.merge_manual(reports, {(names[1], "q2"): (2.0, "")}, notes)
    assert notes[0] == ("x.ipynb q2: given to the report named x.ipynb ('x.ipynb.ipynb'); 'x.ipynb' is a file of that "
                        "name too: its report is x")


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
    assert "Your instructor: &lt;b&gt;nice&lt;/b&gt;" in words and "| 2 / 2 |" in words  # shown, not rendered
    assert "```\n<script>alert(1)</script> the bias\n```" in words  # the answer verbatim, in a fence


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


@pytest.mark.parametrize("text, words", [('{"questions": [', "cannot be read"), ("[1, 2]", "list"),
                                         ('{"score": 3}', "without questions")])
def test_a_damaged_report_is_refused_with_its_file_name(tmp_path, text, words):
    release.write_report(_report("a.ipynb"), tmp_path / "a.json")
    (tmp_path / "b.json").write_text(text)
    with pytest.raises(ValueError, match="b.json: expected a grader's report") as raised:
        release.load_reports(tmp_path)
    assert words in str(raised.value)
    with pytest.raises(ValueError, match="expected a grader's report"):
        release.total({})



# ----------------------------------------------------------------------------- hostile text (issue 35, item 4)

SCRIPT, IMG, COMMENT = "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<!-- the rest is hidden"


def _hostile(name=f"{IMG}.ipynb"):
    """A report whose every learner text attacks its reader: HTML, an unclosed comment, an unclosed code
    fence, a bar and a newline in a table cell; the reference-call section comes after all of them."""
    report = _report(name)
    report.update(title=None, problems=[f"code cell 2: raised ValueError: {SCRIPT}", COMMENT, "```"],
                  reference_calls=["cell 4, line 1: attention_weights (the reference's own)"])
    q1, q2, q3 = report["questions"]
    q1["feedback"] = f"got {IMG} | forged cell\n# forged heading"
    q2.update(answer=f"{COMMENT}\n```\n{SCRIPT}\n````", warning=COMMENT)
    q3["title"] = "[click](javascript:alert(1)) ![](http://x/track.png)"
    return report


def _html_of(markdown):
    """The Markdown as a CommonMark renderer that passes raw HTML (markdown-it's default) shows it."""
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_learner_html_never_renders_and_never_hides_the_reference_calls(tmp_path):
    release.write_report(_hostile(), tmp_path / "r.json")
    page = _html_of((tmp_path / "r.md").read_text(encoding="utf-8"))
    for raw in ("<script", "<img", "<!--", "<a "):
        assert raw not in page, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "onerror=alert(1)" in page  # shown as text
    # what follows every attack is still there, outside any code block
    assert "<h2>Uses of the course's reference functions" in page
    assert "<li>cell 4, line 1: attention_weights (the reference's own)</li>" in page
    assert page.count("<tr>") == 4 and "<h1>forged" not in page  # the header and 3 rows; no forged heading


def test_the_feedback_page_escapes_every_learner_text(tmp_path):
    report = _hostile()
    report["report"] = str(tmp_path / "r.json")
    release.release([report], tmp_path / "feedback")
    page = (tmp_path / "feedback" / "r.html").read_text(encoding="utf-8")
    for raw in (SCRIPT, IMG, "<!--"):
        assert raw not in page, raw
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;!-- the rest is hidden" in page
    assert "<script" not in _html_of((tmp_path / "feedback" / "r.md").read_text(encoding="utf-8"))


def test_learner_text_in_a_table_cell_is_never_bold_struck_or_a_link():
    text = release._md("**win** ~~no~~ _x_ https://evil.example/p www.evil.example")
    page = MarkdownIt("gfm-like").render(f"| a |\n| --- |\n| {text} |")   # strikethrough and bare links on
    for rendered in ("<strong>", "<em>", "<del>", "<s>", "<a "):
        assert rendered not in page, (rendered, page)
    assert "**win**" in page and "~~no~~" in page and "https://evil.example/p" in page


def test_a_fence_is_longer_than_any_run_of_backticks_inside():
    fenced = release._fenced("a ```` b\n```")
    assert fenced.startswith("`````\n") and fenced.endswith("\n`````")


def test_a_lone_surrogate_is_written_everywhere_and_read_back(tmp_path):
    report = _report("bad\ud800name.ipynb")
    report["problems"] = ["code cell 1: raised UnicodeError: \udcff"]
    report["questions"][0]["feedback"] = "got \ud800"
    report["questions"][1]["answer"] = "my answer \ud83d"
    report["report"] = str(tmp_path / "r.json")
    release.write_report(report, tmp_path / "r.json")
    release.write_gradebook([report], tmp_path / "grades.csv")
    assert release.manual_template([report], tmp_path / "manual.csv")
    release.release([report], tmp_path / "feedback")
    again = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))  # strict UTF-8 throughout
    assert again["submission"] == "bad\ud800name.ipynb" and again["score"] == 3  # the record keeps the text
    shown = [_html_of((tmp_path / "r.md").read_text(encoding="utf-8")),
             _html_of((tmp_path / "feedback" / "r.md").read_text(encoding="utf-8")),
             (tmp_path / "feedback" / "r.html").read_text(encoding="utf-8")]
    for page in shown:
        assert "got \\ud800" in page and "my answer \\ud83d" in page  # shown as its escape
    row = next(csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8")))
    assert row["submission"] == "bad\\ud800name.ipynb" and row["score"] == "3" and "\\udcff" in row["problems"]
    assert next(csv.DictReader((tmp_path / "manual.csv").open(encoding="utf-8")))["submission"] == "r"   # its report
    assert release.summary_line(report).startswith("bad\\ud800name.ipynb: 3 / 7")
    assert "\\ud800" in release.gradescope_results(report)["tests"][0]["output"]


FORMULAS = ['=HYPERLINK("http://x","y")', "@SUM(1)", "\tx", "-2+3", "+cmd|' /C calc'!A0", "\rx"]


def _cells(path):
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_a_name_that_is_a_formula_is_text_in_every_csv_and_still_takes_manual_points(tmp_path):
    reports = [_report(name) for name in FORMULAS]
    reports[0]["late"]["note"] = "-1 day: =1+1"
    release.write_gradebook(reports, tmp_path / "grades.csv")
    assert release.manual_template(reports, tmp_path / "manual.csv")
    for path in (tmp_path / "grades.csv", tmp_path / "manual.csv"):
        for row in _cells(path)[:-1]:  # all but the CR one
            assert row["submission"].startswith("'"), (path.name, row["submission"])
    rows = _cells(tmp_path / "grades.csv")
    assert [r["submission"] for r in rows][:3] == ["'" + name for name in FORMULAS[:3]]
    assert rows[-1]["submission"] == "\\rx"  # a CR is escaped, so nothing is left to neutralise
    assert rows[0]["late"].startswith("'-1 day") and rows[0]["score"] == "3" and rows[0]["q1"] == "3"  # numbers stay
    # the instructor fills the template in: its names, quote and all, still name the reports
    filled = tmp_path / "filled.csv"
    filled.write_text((tmp_path / "manual.csv").read_text(encoding="utf-8").replace(",,\n", ",2,ok\n"),
                      encoding="utf-8")
    release.merge_manual(reports, release.read_manual(filled))
    assert all(r["questions"][1]["instructor_points"] == 2 for r in reports)


def test_a_report_that_is_not_graded_has_empty_score_cells(tmp_path):
    report = _report()
    report.update(status="not graded", score=None)
    release.write_gradebook([report], tmp_path / "grades.csv")
    assert _cells(tmp_path / "grades.csv")[0]["score"] == ""


def test_the_summary_line_is_one_line_without_control_characters():
    report = _report("a\x1b[2J\x1b]0;pwned\x07\rforged: 7 / 7\n\u202egnp.ipynb")
    report["problems"] = ["x"]
    line = release.summary_line(report)
    assert not any(unicodedata.category(c) in ("Cc", "Cf") for c in line), repr(line)
    assert line.startswith("a\\x1b[2J\\x1b]0;pwned\\x07\\rforged: 7 / 7\\n\\u202egnp.ipynb: 3 / 7")


def test_a_report_that_fails_to_render_costs_its_own_files_never_the_batch(tmp_path, capsys):
    broken = _report("broken.ipynb")
    del broken["questions"][0]["feedback"]  # a grader bug: the Markdown and the page cannot be made
    odd = {"submission": "odd.ipynb", "status": "graded", "problems": []}  # no questions, no score at all
    good = _report("good.ipynb")
    for r in (broken, good):
        r["report"] = str(tmp_path / Path(r["submission"]).with_suffix(".json"))
        release.write_report(r, r["report"])
        release.write_report(r, r["report"])  # a batch writes a report twice: its problem is said once
    assert json.loads((tmp_path / "broken.json").read_text())["problems"] == [
        "its Markdown report could not be written: KeyError: 'feedback'"]
    assert "could not be written: KeyError" in (tmp_path / "broken.md").read_text()
    assert "Score: 3 / 7" in (tmp_path / "good.md").read_text()
    release.write_gradebook([broken, odd, good], tmp_path / "grades.csv")
    rows = {r["submission"]: r for r in _cells(tmp_path / "grades.csv")}
    assert rows["broken.ipynb"]["score"] == "3" and "KeyError: 'feedback'" in rows["broken.ipynb"]["problems"]
    assert rows["odd.ipynb"]["status"] == "report error" and rows["odd.ipynb"]["score"] == ""
    assert "its gradebook row could not be written: KeyError" in rows["odd.ipynb"]["problems"]
    assert rows["good.ipynb"]["score"] == "3" and rows["good.ipynb"]["q1"] == "3"
    release.release([broken, good], tmp_path / "feedback")
    assert "could not be written" in (tmp_path / "feedback" / "broken.html").read_text()
    assert "Score: 3 / 7" in (tmp_path / "feedback" / "good.html").read_text()
    assert "broken.ipynb: its Markdown report could not be written" in capsys.readouterr().err


def test_feedback_after_the_deadline_has_the_practice_words_and_no_instructor_notes(tmp_path):
    """--release --practice shows the checks' practice words (kept in every report); a written answer the
    instructor graded says so; a note meant for the instructor (no submission time) is not shown."""
    from bayesattn_lite.instructor.course import NO_TIME
    report = _report(late={"submitted": None, "kept": 1.0, "note": NO_TIME})
    report["questions"][2]["feedback_practice"] = "wrong sign: the reference is -1/2 alpha c."
    report["questions"][1]["instructor_points"] = 2
    release.release([report], tmp_path / "graded")
    release.release([report], tmp_path / "practice", practice=True)
    graded = (tmp_path / "graded" / "alice_ps1.md").read_text()
    practice = (tmp_path / "practice" / "alice_ps1.html").read_text()
    assert "wrong sign." in graded and "the reference is" not in graded
    assert "the reference is -1/2 alpha c." in practice
    for text in (graded, practice):
        assert "graded by your instructor" in text and "grades it with the rubric" not in text
        assert "late policy" not in text and "submitted-times" not in text


def test_a_gradebook_cell_the_learner_fills_is_capped():
    report = _report()
    report["reference_calls"] = [f"cell 4, line {n}: attention.gradients (answers q1/q3)" for n in range(12_000)]
    header, rows = release.gradebook_rows([report])
    cell = rows[0][header.index("reference_calls")]
    assert len(cell) < release.MAX_CSV_CELL + 100 and "see the report" in cell
    report["problems"] = [f"code cell {n} raised ValueError: " + "x" * 400 for n in range(2_000)]   # the same for
    header, rows = release.gradebook_rows([report])                                                 # problems
    assert len(rows[0][header.index("problems")]) < release.MAX_CSV_CELL + 100


def test_an_empty_cell_changes_nothing_and_clear_takes_points_back(tmp_path):
    # two TAs, one file each: the second's empty q2 cells must not erase the first's q2 points
    report = _report()
    release.merge_manual([report], release.read_manual(_write_manual(tmp_path / "ta1.csv", [
        ["alice_ps1.ipynb", "q2", "1.5", "good"], ["alice_ps1.ipynb", "q3", "", ""]])))
    notes = []
    release.merge_manual([report], release.read_manual(_write_manual(tmp_path / "ta2.csv", [
        ["alice_ps1.ipynb", "q2", "", ""], ["alice_ps1.ipynb", "q3", "1", "sign"]])), notes)
    q = {q["id"]: q for q in report["questions"]}
    assert q["q2"]["instructor_points"] == 1.5 and q["q2"]["comment"] == "good" and q["q3"]["instructor_points"] == 1
    assert notes == ["points set 1, changed 0, cleared 0, left as they were 1, comments changed 1 (an empty cell "
                     "changes nothing; 'clear' takes points back)"]
    release.merge_manual([report], release.read_manual(_write_manual(tmp_path / "undo.csv", [
        ["alice_ps1.ipynb", "q3", "CLEAR", ""]])))
    assert q["q3"]["instructor_points"] is None and q["q3"]["comment"] == ""   # back to the automatic points
    with pytest.raises(ValueError, match="empty \\(no change\\) or 'clear'"):
        release.read_manual(_write_manual(tmp_path / "bad.csv", [["alice_ps1.ipynb", "q2", "none", ""]]))


def test_the_written_answers_page_gathers_each_question_across_the_class(tmp_path):
    reports = [{"report": f"r/{name}.json", "submission": f"{name}.ipynb",
                "questions": [{"id": "q2", "title": "Why", "manual": True, "rubric": "1 pt: the bias", "answer": text},
                              {"id": "q1", "manual": False, "points": 3}]}
               for name, text in (("smithjane", "The bias is `shared`."), ("doejohn", ""))]
    page = tmp_path / "grades_written_answers.md"
    assert release.written_answers_page(reports, page) == 2
    text = page.read_text()
    assert text.index("## q2: Why") < text.index("1 pt: the bias") < text.index("### smithjane (q2)") \
        < text.index("The bias is `shared`.") < text.index("### doejohn (q2)") < text.index("(not answered)")
    assert release.written_answers_page([{**reports[0], "questions": []}], tmp_path / "none.md") == 0
    assert not (tmp_path / "none.md").exists()

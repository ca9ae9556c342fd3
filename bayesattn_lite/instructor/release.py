"""What the grader writes and the instructor reads back: reports, the gradebook, manual points, feedback.

    python -m bayesattn_lite.instructor.grading --csv grades.csv --reports DIR --manual manual.csv --release feedback/

- A report is one submission's JSON (``REPORT.json``) with its Markdown beside it (``REPORT.md``).
- The gradebook CSV has one row per report; it is always rebuilt from the reports, so a regrade or a
  manual point changes its row and nothing else.
- The manual-points file is a CSV the instructor fills in: ``submission,question,points,comment``, one
  row per graded question (the grader writes a template with a row for every written answer). Points
  given there replace the automatic ones (for a checked question too: an instructor's override), and
  the comment reaches the student.
- ``release`` writes one feedback file per student, Markdown and HTML (every text escaped), with the
  automatic and manual points and the comments.
"""

import contextlib
import csv
import html
import io
import json
import os
import secrets
from pathlib import Path

MANUAL_COLUMNS = ("submission", "question", "points", "comment")
NOT_GRADED = ("grader error", "not graded")  # the statuses of the grader's own failures: never a score


# ----------------------------------------------------------------------------- writing files

def _write_new(path, text):
    """Write ``text`` to ``path`` through a new file of the grader's (created exclusively, never through
    a link) renamed over it: whatever was at ``path`` before, a planted link included, is replaced,
    never written through."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_report(report, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    _write_new(path.with_suffix(".md"), markdown(report))


def _csv_text(header, rows):
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(header)
    writer.writerows(rows)
    return table.getvalue()


# ----------------------------------------------------------------------------- the report in words

def _points(q):
    """A question's points as shown: the instructor's when given, else the grader's ("to grade" if none)."""
    mine = q.get("instructor_points")
    if mine is not None:
        return mine
    return "to grade" if q["points"] is None else q["points"]


def markdown(report):
    """The report in words, for the learner."""
    lines = [f"# Grading report: {report.get('title') or report['submission']}", "",
             f"**Score: {report['score']} / {report['max_score']}**"]
    late = report.get("late") or {}
    if late.get("note"):
        lines.append(f"(late: {late['note']})")
    if report.get("manual_pending"):
        lines.append(f"({report['manual_pending']} of these points are written answers your instructor grades.)")
    lines.append("")
    if report["questions"]:
        lines += ["| Question | Points | Feedback |", "|---|---|---|"]
        for q in report["questions"]:
            mark = "📝" if q.get("manual") else "✅" if q["passed"] else "❌"
            feedback = q["feedback"] + (f" Your instructor: {q['comment']}" if q.get("comment") else "")
            feedback = feedback.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {mark} {q['id']}: {q['title']} | {_points(q)} / {q['max_points']} | {feedback} |")
        lines.append("")
    if report["problems"]:
        lines += ["## Problems while running your notebook", ""] + [f"- {p}" for p in report["problems"]] + [""]
    written = [q for q in report["questions"] if q.get("manual")]
    if written:
        lines += ["## Your written answers (as your instructor reads them)", ""]
        for q in written:
            lines += [f"### {q['id']}: {q['title']}", ""]
            if q.get("warning"):
                lines += [f"*Note: {q['warning']}.*", ""]
            lines += [q.get("answer") or "*(no answer found: the cell tagged answer-" + q["id"] + " holds the stub)*", ""]
    if report.get("reference_calls"):
        lines += ["## Uses of the course's reference functions (your instructor will look at these)", ""]
        lines += [f"- {c}" for c in report["reference_calls"]] + [""]
    for warning in report.get("isolation", {}).get("warnings", []):
        lines += [f"**Warning:** {warning}.", ""]
    return "\n".join(lines)


def feedback_html(report):
    """The feedback as a standalone HTML page; every text from the submission or the grader is escaped."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(q['id'])}: {e(q['title'])}</td><td>{e(str(_points(q)))} / {e(str(q['max_points']))}</td>"
        f"<td>{e(q['feedback'])}{'<br><b>Your instructor:</b> ' + e(q['comment']) if q.get('comment') else ''}</td></tr>"
        for q in report["questions"])
    late = (report.get("late") or {}).get("note")
    problems = "".join(f"<li>{e(p)}</li>" for p in report["problems"])
    answers = "".join(f"<h3>{e(q['id'])}: {e(q['title'])}</h3><pre>{e(q.get('answer') or '(no answer found)')}</pre>"
                      for q in report["questions"] if q.get("manual"))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(report.get('title') or 'Feedback')}</title>"
            "<style>body{font-family:sans-serif;max-width:50em;margin:auto}td{border:1px solid #ccc;padding:4px;"
            "vertical-align:top}pre{white-space:pre-wrap}</style></head><body>"
            f"<h1>{e(report.get('title') or report['submission'])}</h1>"
            f"<p><b>Score: {e(str(report['score']))} / {e(str(report['max_score']))}</b>"
            f"{' (late: ' + e(late) + ')' if late else ''}</p>"
            f"<table><tr><th>Question</th><th>Points</th><th>Feedback</th></tr>{rows}</table>"
            + (f"<h2>Problems while running your notebook</h2><ul>{problems}</ul>" if problems else "")
            + (f"<h2>Your written answers</h2>{answers}" if answers else "") + "</body></html>\n")


def gradescope_results(report):
    """The report in Gradescope's autograder format (``/autograder/results/results.json``): the checked
    questions as tests; written answers are left to Gradescope's manual grading."""
    tests = [{"name": f"{q['id']}: {q['title']}", "score": q["points"], "max_score": q["max_points"],
              "output": q["feedback"], "visibility": "visible"} for q in report["questions"] if not q.get("manual")]
    output = "\n".join(["Problems while running your notebook:"] + [f"- {p}" for p in report["problems"]]
                       ) if report["problems"] else ""
    return {"score": report["score"], "output": output, "tests": tests}


def summary_line(report):
    return (f"{report['submission']}: {report['score']} / {report['max_score']} "
            f"({report['assignment'] or 'unknown assignment'}, {report.get('status', 'graded')}); "
            + "; ".join(f"{q['id']} {'manual' if q.get('manual') else q['points']}/{q['max_points']}"
                        for q in report["questions"])
            + (f"; {len(report['problems'])} problem(s)" if report["problems"] else ""))


# ----------------------------------------------------------------------------- the gradebook

def gradebook_rows(reports):
    """The CSV header and one row per report: totals, each question's points (a written answer has a
    ``<id>_manual`` column with the instructor's points and ``<id>_answered``), late, warnings, problems."""
    ids, manual = [], []
    for r in reports:
        for q in r["questions"]:
            if q["id"] not in ids:
                ids.append(q["id"])
            if q.get("manual") and q["id"] not in manual:
                manual.append(q["id"])
    header = (["submission", "assignment", "status", "score", "max_score", "manual_pending", "late"]
              + [c for qid in ids for c in ([qid, f"{qid}_manual", f"{qid}_answered"] if qid in manual else [qid])]
              + ["warnings", "problems", "reference_calls", "report"])
    rows = []
    for r in reports:
        by_id = {q["id"]: q for q in r["questions"]}
        row = {"submission": r["submission"], "assignment": r["assignment"] or "", "status": r.get("status", ""),
               "score": r["score"], "max_score": r["max_score"], "manual_pending": r.get("manual_pending", 0),
               "late": (r.get("late") or {}).get("note", ""),
               "warnings": " | ".join(f"{q['id']}: {q['warning']}" for q in r["questions"] if q.get("warning")),
               "problems": " | ".join(p.replace("\n", " ")[:500] for p in r["problems"]),
               "reference_calls": " | ".join(r.get("reference_calls", [])), "report": r.get("report", "")}
        for qid in ids:
            q = by_id.get(qid) or {}
            mine = q.get("instructor_points")
            row[qid] = mine if mine is not None and not q.get("manual") else "" if q.get("points") is None else q["points"]
            if qid in manual:
                row[f"{qid}_manual"] = "" if mine is None else mine
                row[f"{qid}_answered"] = "" if not q else "yes" if q.get("answered") else "unanswered"
        rows.append([row[h] for h in header])
    return header, rows


def write_gradebook(reports, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, _csv_text(*gradebook_rows(reports)))


def load_reports(folder):
    """Every report (``*.json``) of ``folder``, in name order, with where it lives."""
    reports = []
    for path in sorted(Path(folder).glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        report["report"] = str(path)
        reports.append(report)
    return reports


# ----------------------------------------------------------------------------- the score

def points_number(x):
    """Points as the gradebook shows them: 2 for 2.0, else two decimals."""
    x = round(float(x), 2)
    return int(x) if x.is_integer() else x


def total(report):
    """The score from the questions' points (an instructor's points replace the automatic ones), the
    late policy applied; ``manual_pending`` counts the points of written answers not graded yet."""
    raw = 0.0
    for q in report["questions"]:
        mine = q.get("instructor_points")
        raw += mine if mine is not None else (q["points"] or 0)
    kept = (report.get("late") or {}).get("kept", 1.0)
    report["raw_score"] = points_number(raw)
    report["score"] = points_number(raw * kept)
    report["manual_pending"] = sum(q["max_points"] for q in report["questions"]
                                   if q.get("manual") and q.get("instructor_points") is None)
    return report


# ----------------------------------------------------------------------------- manual points

def manual_template(reports, path):
    """A manual-points file with a row for every written answer (points and comment empty), unless one
    exists already: the instructor's work is never overwritten."""
    path = Path(path)
    if path.exists():
        return False
    rows = [[r["submission"], q["id"], "", ""] for r in reports for q in r["questions"] if q.get("manual")]
    _write_new(path, _csv_text(MANUAL_COLUMNS, rows))
    return True


def read_manual(path):
    """The manual points: {(submission, question): (points or None, comment)}. Raises ValueError naming
    the file, the line and what was expected."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in MANUAL_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: expected the columns {', '.join(MANUAL_COLUMNS)}; missing {', '.join(missing)}")
        marks = {}
        for line, row in enumerate(reader, start=2):
            text = (row["points"] or "").strip()
            try:
                points = float(text) if text else None
            except ValueError:
                raise ValueError(f"{path}, line {line}: points must be a number or empty, got {text!r}") from None
            marks[row["submission"].strip(), row["question"].strip()] = (points, (row["comment"] or "").strip())
    return marks


def merge_manual(reports, marks):
    """Put the instructor's points and comments into ``reports`` (in place) and total them again.
    Raises ValueError for a row that names no report or question, or points outside 0..max."""
    by_name = {}
    for r in reports:
        by_name[r["submission"]] = r
        by_name.setdefault(Path(r["submission"]).name, r)
    problems = []
    for (submission, qid), (points, comment) in marks.items():
        report = by_name.get(submission) or by_name.get(Path(submission).name)
        q = next((q for q in (report or {}).get("questions", []) if q["id"] == qid), None)
        if q is None:
            problems.append(f"{submission} {qid}: no such " + ("question" if report else "submission"))
        elif points is not None and not 0 <= points <= q["max_points"]:
            problems.append(f"{submission} {qid}: points must be between 0 and {q['max_points']}, got {points:g}")
        else:
            q["instructor_points"], q["comment"] = None if points is None else points_number(points), comment
    if problems:
        raise ValueError("the manual-points file does not match the reports: " + "; ".join(problems))
    for r in reports:
        total(r)
    return reports


def release(reports, folder):
    """One feedback file per report in ``folder``: ``<report name>.md`` and ``.html``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for r in reports:
        stem = Path(r.get("report") or r["submission"]).stem
        _write_new(folder / f"{stem}.md", markdown(r))
        _write_new(folder / f"{stem}.html", feedback_html(r))
    return folder

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

Every text in a report that came from a submission (its file name, its answers, the exception messages in
its problems, its feedback) is the learner's, and may be written to attack whoever reads it: each format
gets it through one helper of "hostile text" below, never as it is.
"""

import contextlib
import csv
import html
import io
import json
import os
import re
import secrets
import sys
from pathlib import Path

from .course import NO_TIME

MANUAL_COLUMNS = ("submission", "question", "points", "comment")
NOT_GRADED = ("grader error", "not graded")  # the statuses of the grader's own failures: never a score


# ----------------------------------------------------------------------------- hostile text

# what a terminal, a spreadsheet or a reader may act on instead of showing it: control characters but tab
# and newline (an ESC sequence rewrites a terminal, a CR overwrites its line), the bidirectional overrides
# (they reorder what is shown) and lone surrogates (UTF-8 cannot encode one: the write would fail)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet runs as a formula at a cell's start (OWASP)


def _safe(text):
    """``text`` as a string whose every character is shown as itself: CRLF as LF, each unsafe character as
    its visible escape (``\\x1b``, ``\\ud800``), so nothing is lost to the reader and nothing acts."""
    return _UNSAFE.sub(lambda m: m[0].encode("unicode_escape").decode(), str(text).replace("\r\n", "\n"))


def _one_line(text):
    """``text`` safe on one line (a console line, a CSV cell): a newline would forge a line of its own."""
    return _safe(text).replace("\n", "\\n")


def _cell(value):
    """A CSV cell a spreadsheet shows and never runs: a number stays a number (None an empty cell); text is
    on one line, and text that starts like a formula gets a ' first (OWASP's "CSV injection"): shown as text."""
    if value is None or isinstance(value, (int, float)):
        return value
    text = _one_line(value)
    return "'" + text if text.startswith(_FORMULA) else text


def _md(text):
    """``text`` as inline Markdown that shows as written: on one line (a line break could end the table row
    or start a heading), ``& < >`` as entities (no HTML, no ``<!--`` hiding the rest of the report), and
    backslashes, backticks, brackets, bars and emphasis marks escaped (no code span, link, image, table
    column, bold or strikethrough), and web addresses broken so that no renderer makes them links."""
    text = " ".join(_safe(text).splitlines())
    text = re.sub(r"([\\`\[\]|*_~])", r"\\\1", text)
    text = re.sub(r"(?i)\b(https?|ftp)://", r"\1:\\/\\/", text)
    text = re.sub(r"(?i)\b(www)\.", r"\1\\.", text)
    return html.escape(text, quote=False)


def _fenced(text):
    """``text`` as a fenced code block, shown verbatim whatever it holds (HTML, Markdown, a fence of its
    own): the fence is longer than any run of backticks inside, so nothing inside can close it."""
    text = _safe(text)
    fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


def _html(text):
    return html.escape(_safe(text))


def _guarded(what, render, report, fallback):
    """``render(report)``; if it fails, ``fallback`` of the reason, which is added to the report's problems
    (so its gradebook row says what happened) and told on stderr: one report that fails to render costs
    that report's file, never the batch and its gradebook."""
    try:
        return render(report)
    except Exception as exc:  # noqa: BLE001 - a bug or an odd report, whatever it is
        why = f"its {what} could not be written: {type(exc).__name__}: {exc}"
        problems = report.setdefault("problems", [])
        if why not in problems:  # a report is written more than once in a batch
            problems.append(why)
        print(_one_line(f"{report.get('submission', '?')}: {why}"), file=sys.stderr)
        return fallback(why)


# ----------------------------------------------------------------------------- writing files

def _write_new(path, text):
    """Write ``text`` to ``path`` through a new file of the grader's (created exclusively, never through
    a link) renamed over it: whatever was at ``path`` before, a planted link included, is replaced,
    never written through."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        # a lone surrogate that reached here is written as its escape (\ud800), not a failed write: in a
        # JSON string (json.dumps leaves it as it is with ensure_ascii=False) that is its own JSON escape
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") as f:
            f.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_report(report, path):
    """The report as JSON (the learner's text as it was, for the record) and in Markdown beside it. A
    Markdown that fails to render says why in its place and in the JSON; a failure to write is raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    words = _guarded("Markdown report", markdown, report, _md)  # first, so that the JSON has its failure
    _write_new(path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    _write_new(path.with_suffix(".md"), words)


def _csv_text(header, rows):
    """Every CSV the grader writes: each cell through ``_cell``."""
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(map(_cell, header))
    writer.writerows(map(_cell, row) for row in rows)
    return table.getvalue()


# ----------------------------------------------------------------------------- the report in words

def _points(q):
    """A question's points as shown: the instructor's when given, else the grader's ("to grade" if none,
    0 for a written question left unanswered: nothing to grade)."""
    mine = q.get("instructor_points")
    if mine is not None:
        return mine
    if q["points"] is None:
        return 0 if q.get("manual") and q.get("answered") is False else "to grade"
    return q["points"]


def _feedback(q, practice=False):
    """A question's words for the learner: the check's (its practice-mode words with ``practice``, after the
    deadline) or, for a written answer, whether it is graded yet; then the instructor's comment."""
    if q.get("manual"):
        words = ("a written answer, graded by your instructor" if q.get("instructor_points") is not None
                 else "not answered: the answer cell still holds the stub, so there is nothing to grade"
                 if q.get("answered") is False else q["feedback"])
    else:
        words = q.get("feedback_practice", q["feedback"]) if practice else q["feedback"]
        if q.get("instructor_points") is not None:   # a checked question's points set by hand
            words = f"points set by your instructor (the automatic check said: {words.rstrip('.')})"
        elif q["points"] and not q.get("passed"):
            words = f"{words} Partial credit: a right output or a named slip earns part of the points."
    return words, q.get("comment") or ""


def _late_note(report):
    """The late policy's note, for the learner: none where it says the policy was not applied (that is
    the instructor's to act on, in the gradebook)."""
    note = (report.get("late") or {}).get("note") or ""
    return "" if note == NO_TIME else note


def markdown(report, practice=False):
    """The report in words, for the learner. Every text in it is escaped (``_md``) or fenced (``_fenced``):
    what a submission wrote is shown as written, never rendered. ``practice``: the checks' practice-mode
    words (the formula), for feedback released after the deadline."""
    lines = [f"# Grading report: {_md(report.get('title') or report['submission'])}", "",
             f"**Score: {_md(report['score'])} / {_md(report['max_score'])}**"]
    late, late_note = report.get("late") or {}, _late_note(report)
    if late_note:
        lines.append(f"(submission time: {_md(late_note)})")
    if report.get("manual_pending"):
        lines.append(f"({_md(report['manual_pending'])} more points are written answers your instructor grades"
                     + ("; the late penalty applies to them too" if late.get("kept", 1.0) < 1 else "") + ".)")
    lines.append("")
    if report["questions"]:
        lines += ["| Question | Points | Feedback |", "|---|---|---|"]
        for q in report["questions"]:
            mark = "📝" if q.get("manual") or q.get("instructor_points") is not None else "✅" if q["passed"] else "❌"
            words, comment = _feedback(q, practice)
            feedback = f"{words.rstrip('.')}. Your instructor: {comment}" if comment else words
            lines.append(f"| {mark} {_md(q['id'])}: {_md(q['title'])} | {_md(_points(q))} / {_md(q['max_points'])} "
                         f"| {_md(feedback)} |")
        lines.append("")
    if report["problems"]:  # tracebacks and learner messages: verbatim
        lines += ["## Problems while running your notebook", "",
                  _fenced("\n".join(f"- {p}" for p in report["problems"])), ""]
    written = [q for q in report["questions"] if q.get("manual")]
    if written:
        lines += ["## Your written answers (as your instructor reads them)", ""]
        for q in written:
            lines += [f"### {_md(q['id'])}: {_md(q['title'])}", ""]
            if q.get("warning"):
                lines += [f"*Note: {_md(q['warning'])}.*", ""]
            lines += [_fenced(q["answer"]) if q.get("answer") else
                      f"*(no answer found: no cell is tagged answer-{_md(q['id'])})*" if q.get("tag_missing") else
                      f"*(no answer found: the cell tagged answer-{_md(q['id'])} holds the stub)*", ""]
    if report.get("reference_calls"):
        lines += ["## Uses of the course's reference functions (your instructor will look at these)", ""]
        lines += [f"- {_md(c)}" for c in report["reference_calls"]] + [""]
    for warning in report.get("isolation", {}).get("warnings", []):
        lines += [f"**Warning:** {_md(warning)}.", ""]
    return "\n".join(lines)


def feedback_html(report, practice=False):
    """The feedback as a standalone HTML page; every text from the submission or the grader is escaped."""
    e = _html
    rows = "".join(
        f"<tr><td>{e(q['id'])}: {e(q['title'])}</td><td>{e(_points(q))} / {e(q['max_points'])}</td>"
        f"<td>{e(words)}{'<br><b>Your instructor:</b> ' + e(comment) if comment else ''}</td></tr>"
        for q in report["questions"] for words, comment in [_feedback(q, practice)])
    late = _late_note(report)
    problems = "".join(f"<li>{e(p)}</li>" for p in report["problems"])
    answers = "".join(f"<h3>{e(q['id'])}: {e(q['title'])}</h3><pre>{e(q.get('answer') or '(no answer found)')}</pre>"
                      for q in report["questions"] if q.get("manual"))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{e(report.get('title') or 'Feedback')}</title>"
            "<style>body{font-family:sans-serif;max-width:50em;margin:auto}td{border:1px solid #ccc;padding:4px;"
            "vertical-align:top}pre{white-space:pre-wrap}</style></head><body>"
            f"<h1>{e(report.get('title') or report['submission'])}</h1>"
            f"<p><b>Score: {e(report['score'])} / {e(report['max_score'])}</b>"
            f"{' (submission time: ' + e(late) + ')' if late else ''}</p>"
            f"<table><tr><th>Question</th><th>Points</th><th>Feedback</th></tr>{rows}</table>"
            + (f"<h2>Problems while running your notebook</h2><ul>{problems}</ul>" if problems else "")
            + (f"<h2>Your written answers</h2>{answers}" if answers else "") + "</body></html>\n")


def gradescope_results(report):
    """The report in Gradescope's autograder format (``/autograder/results/results.json``): the checked
    questions as tests; written answers are left to Gradescope's manual grading. Its texts are made safe
    (``_safe``): Gradescope shows them to the learner."""
    tests = [{"name": _safe(f"{q['id']}: {q['title']}"), "score": q["points"], "max_score": q["max_points"],
              "output": _safe(q["feedback"]), "visibility": "visible"}
             for q in report["questions"] if not q.get("manual")]
    parts = []
    if report["problems"]:
        parts += ["Problems while running your notebook:"] + [f"- {p}" for p in report["problems"]]
    if report.get("reference_calls"):   # as in the released feedback: the instructor looks at these
        parts += ["Uses of the course's reference functions (your instructor will look at these):"] + \
                 [f"- {c}" for c in report["reference_calls"]]
    return {"score": report["score"], "output": _safe(_capped("\n".join(parts))), "tests": tests}


def summary_line(report):
    """The report on one console line: a name with an ESC sequence, a CR or a newline cannot rewrite the
    instructor's terminal or forge another submission's line."""
    return _one_line(_guarded("summary line", _summary, report, str))


def _summary(report):
    pending = report.get("manual_pending")   # the console line comes before the manual points are merged
    return (f"{report['submission']}: {report['score']} / {report['max_score']}"
            + (f" before {pending} points of written answers" if pending else "") + " "
            f"({report['assignment'] or 'unknown assignment'}, {report.get('status', 'graded')}); "
            + "; ".join(f"{q['id']} {_points_said(q)}/{q['max_points']}" for q in report["questions"])
            + (f"; {len(report['problems'])} problem(s)" if report["problems"] else ""))


def _points_said(q):
    """A question's points on the console: a written answer's are "manual" until the instructor set them."""
    if q.get("manual"):
        return "manual" if q.get("instructor_points") is None else f"{q['instructor_points']:g} (manual)"
    return q["points"]


# ----------------------------------------------------------------------------- the gradebook

def gradebook_rows(reports):
    """The CSV header and one row per report: totals, each question's points (a written answer has a
    ``<id>_manual`` column with the instructor's points and ``<id>_answered``), late, warnings, problems.
    A report whose row cannot be made gets a row that says why, with no score."""
    ids, manual, overridden = [], [], []
    rows = [_guarded("gradebook row", lambda report: _gradebook_row(report, ids, manual, overridden), r,
                     lambda why: {"submission": r.get("submission", ""), "status": "report error", "problems": why})
            for r in reports]
    header = (["submission", "assignment", "status", "score", "max_score", "manual_pending", "late"]
              + [c for qid in ids for c in ([qid, f"{qid}_manual", f"{qid}_answered"] if qid in manual
                                            else [qid, f"{qid}_manual"] if qid in overridden else [qid])]
              + ["warnings", "problems", "reference_calls", "report"])
    return header, [[row.get(h, "") for h in header] for row in rows]


MAX_CSV_CELL = 10_000   # characters of a gradebook cell the learner's text fills (csv's own field limit is 131,072)


def _capped(text):
    """A cell's text within MAX_CSV_CELL; the rest is in the report."""
    return text if len(text) <= MAX_CSV_CELL else text[:MAX_CSV_CELL] + f" ... ({len(text):,} characters: see the report)"


def _gradebook_row(r, ids, manual, overridden):
    """One report's row, by column; its question ids are added to ``ids`` (and to ``manual``, written ones;
    to ``overridden``, checked ones whose points an instructor set by hand)."""
    row = {"submission": r["submission"], "assignment": r["assignment"] or "", "status": r.get("status", ""),
           "score": r["score"], "max_score": r["max_score"], "manual_pending": r.get("manual_pending", 0),
           "late": (r.get("late") or {}).get("note", ""),
           "warnings": " | ".join(f"{q['id']}: {q['warning']}" for q in r["questions"] if q.get("warning")),
           "problems": _capped(" | ".join(p.replace("\n", " ")[:500] for p in r["problems"])),
           "reference_calls": _capped(" | ".join(r.get("reference_calls", []))), "report": r.get("report", "")}
    for q in r["questions"]:
        qid, mine = q["id"], q.get("instructor_points")
        if qid not in ids:
            ids.append(qid)
        if q.get("manual") and qid not in manual:
            manual.append(qid)
        if not q.get("manual") and mine is not None and qid not in overridden:
            overridden.append(qid)
        row[qid] = mine if mine is not None and not q.get("manual") else "" if q.get("points") is None else q["points"]
        row[f"{qid}_manual"] = "" if mine is None else mine  # columns only where some report has it written
        row[f"{qid}_answered"] = "tag missing" if q.get("tag_missing") else "yes" if q.get("answered") else "unanswered"
    return row


def write_gradebook(reports, path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, _csv_text(*gradebook_rows(reports)))


def load_reports(folder):
    """Every report (``*.json``) of ``folder``, in name order, with where it lives."""
    reports = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{path}: expected a grader's report (JSON), got a file that cannot be read ({exc}): "
                             "grade that submission again, or move the file out of the folder") from None
        _check_report(report, str(path))
        report["report"] = str(path)
        reports.append(report)
    return reports


# ----------------------------------------------------------------------------- the score

def points_number(x):
    """Points as the gradebook shows them: 2 for 2.0, else two decimals."""
    x = round(float(x), 2)
    return int(x) if x.is_integer() else x


def _check_report(report, what="report"):
    if not isinstance(report, dict) or not isinstance(report.get("questions"), list):
        raise ValueError(f"{what}: expected a grader's report (a dict with a list of 'questions'), got "
                         f"{type(report).__name__}{' without questions' if isinstance(report, dict) else ''}")


def total(report):
    """The score from the questions' points (an instructor's points replace the automatic ones), the
    late policy applied; ``manual_pending`` counts the points of answered written questions not graded yet."""
    _check_report(report)
    raw = 0.0
    for q in report["questions"]:
        mine = q.get("instructor_points")
        raw += mine if mine is not None else (q["points"] or 0)
    kept = (report.get("late") or {}).get("kept", 1.0)
    report["raw_score"] = points_number(raw)
    report["score"] = points_number(raw * kept)
    report["manual_pending"] = sum(q["max_points"] for q in report["questions"]   # an unanswered one is 0, not pending
                                   if q.get("manual") and q.get("answered", True) and q.get("instructor_points") is None)
    return report


# ----------------------------------------------------------------------------- manual points

def report_name(report):
    """The report's file name without ".json": unique in a batch (two submissions whose names print alike,
    a newline and a literal backslash-n, get two), so the manual-points file names submissions by it."""
    return Path(report["report"]).stem if report.get("report") else report["submission"]


def manual_template(reports, path):
    """A manual-points file with a row for every written answer (points and comment empty); where one
    exists, the rows it lacks (files graded since) are added at its end and the instructor's rows are kept
    as written. Its submission column is the report name. Returns the rows added ([] for a file it cannot read)."""
    path = Path(path)
    rows = [[report_name(r), q["id"], "", ""] for r in reports for q in r["questions"] if q.get("manual")]
    old = ""
    if path.exists():
        try:
            old = path.read_text(encoding="utf-8-sig")
            have = set(read_manual(path, text=old))
        except (OSError, ValueError, KeyError, UnicodeDecodeError):   # the instructor's to mend: left as it is
            return []
        rows = [row for row in rows if (row[0], row[1]) not in have]
        if not rows:
            return []
    text = _csv_text(MANUAL_COLUMNS, rows)
    if old:   # under the old file's header, after its rows as the instructor left them
        text = old + ("" if old.endswith("\n") else "\r\n") + text.partition("\r\n")[2]
    _write_new(path, text)
    return rows


def written_answers_page(reports, path):
    """One Markdown page per class, ``path``: each written question's rubric, then every submission's
    answer to it under the name the manual-points file uses, so that a grader marks one question across
    the class in one read instead of opening a report per student. Returns how many answers it holds."""
    questions = {}   # question id -> (title, rubric, [(report name, answer, warning)])
    for r in reports:
        for q in r.get("questions", []):
            if q.get("manual"):
                title, rubric, answers = questions.setdefault(q["id"], (q.get("title", ""), q.get("rubric", ""), []))
                answers.append((report_name(r), q.get("answer") or "", q.get("warning")))
    if not questions:
        return 0
    lines = ["# Written answers, question by question", "",
             "Each answer under the submission name of the manual-points file: put its points and comment there."]
    for qid, (title, rubric, answers) in questions.items():
        lines += ["", f"## {_md(qid)}: {_md(title)}", "", "Rubric:", "", _fenced(rubric or "(no rubric)")]
        for name, answer, warning in answers:
            lines += ["", f"### {_md(name)} ({_md(qid)})"] + ([f"*{_md(warning)}*"] if warning else []) + \
                     ["", _fenced(answer) if answer.strip() else "(not answered)"]
    _write_new(path, "\n".join(lines) + "\n")
    return sum(len(a) for _, _, a in questions.values())


CLEAR = "clear"   # in a manual-points file's points cell: take back the points set before (an empty cell changes nothing)


def read_manual(path, text=None):
    """The manual points: {(submission, question): (points, comment)}, points a number, None (an empty
    cell: no change) or CLEAR, the comment "" where empty (no change). Raises ValueError naming the file,
    the line and what was expected. ``text``: the file's text where it was read already."""
    path = Path(path)
    if text is None:
        with path.open(newline="", encoding="utf-8-sig") as f:
            text = f.read()
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in MANUAL_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path}: expected the columns {', '.join(MANUAL_COLUMNS)}; missing {', '.join(missing)}")
    marks, lines = {}, {}
    for line, row in enumerate(reader, start=2):
        cell = (row["points"] or "").strip()
        try:
            points = CLEAR if cell.lower() == CLEAR else float(cell) if cell else None
        except ValueError:
            raise ValueError(f"{path}, line {line}: points must be a number, empty (no change) or "
                             f"{CLEAR!r} (take back the points set before), got {cell!r}") from None
        key = row["submission"].strip(), row["question"].strip()
        if key in lines:   # a second row would silently replace the first's points
            raise ValueError(f"{path}, line {line}: {key[0]} {key[1]} has a row already, on line {lines[key]}; "
                             "expected one row per submission and question")
        lines[key] = line
        marks[key] = (points, (row["comment"] or "").strip())
    return marks


def merge_manual(reports, marks, notes=None):
    """Put the instructor's points and comments into ``reports`` (in place) and total them again. An empty
    cell changes nothing (two TAs' files, each filling in its own questions, merge one after the other);
    CLEAR takes back a question's points and comment. Raises ValueError for a row that names no report or
    question, or points outside 0..max. A row whose name is one report's name and another submission's
    file name goes to the report, and a line in ``notes`` (a list, if given) says so; another says how
    many points were set, changed, cleared and left as they were."""
    # A report name (what the template writes; unique in a batch) means its own report first, even where
    # it is also another submission's file name: x.ipynb's report is "x", x.ipynb.ipynb's is "x.ipynb".
    by_report, by_name = {}, {}   # every name a row may use -> the reports it could mean
    for r in reports:
        for name in {report_name(r), _cell(report_name(r))}:
            by_report.setdefault(name, []).append(r)
        for name in {r["submission"], _cell(r["submission"]), Path(r["submission"]).name}:
            by_name.setdefault(name, []).append(r)
    problems, counts = [], dict.fromkeys(("set", "changed", "cleared", "left as they were", "comments changed"), 0)
    for (submission, qid), (points, comment) in marks.items():
        candidates = (by_report.get(submission) or by_name.get(submission)
                      or by_name.get(Path(submission).name) or [])
        own = by_report.get(submission)   # the row names a report: another file of that name is told apart
        others = [r for r in by_name.get(submission, []) if r is not candidates[0]] if own else []
        if others and notes is not None:
            notes.append(f"{submission} {qid}: given to the report named {submission} ({candidates[0]['submission']!r}); "
                         f"{others[0]['submission']!r} is a file of that name too: its report is {report_name(others[0])}")
        if len({id(r) for r in candidates}) > 1:   # two submissions whose names read alike
            problems.append(f"{submission} {qid}: names {len(candidates)} submissions; use their report names "
                            + ", ".join(report_name(r) for r in candidates))
            continue
        report = candidates[0] if candidates else None
        q = next((q for q in (report or {}).get("questions", []) if q["id"] == qid), None)
        if q is None:
            problems.append(f"{submission} {qid}: no such " + ("question" if report else "submission"))
        elif points not in (None, CLEAR) and not 0 <= points <= q["max_points"]:
            problems.append(f"{submission} {qid}: points must be between 0 and {q['max_points']}, got {points:g}")
        elif points == CLEAR:
            counts["cleared"] += q.get("instructor_points") is not None
            q["instructor_points"], q["comment"] = None, comment
        else:
            before = q.get("instructor_points")
            if points is not None:
                counts["set" if before is None else "changed"] += before != points_number(points)
                q["instructor_points"] = points_number(points)
            counts["left as they were"] += points is None or before == points_number(points)
            counts["comments changed"] += bool(comment) and comment != q.get("comment", "")
            q["comment"] = comment or q.get("comment", "")
    if problems:
        raise ValueError("the manual-points file does not match the reports: " + "; ".join(problems))
    if notes is not None:
        notes.append("points " + ", ".join(f"{what} {n}" for what, n in counts.items()) + " (an empty cell changes "
                     f"nothing; {CLEAR!r} takes points back)")
    for r in reports:
        total(r)
    return reports


def release(reports, folder, practice=False):
    """One feedback file per report in ``folder``: ``<report name>.md`` and ``.html``; one that fails to
    render says why in its place (``_guarded``), and the others are still written. ``practice``: the
    checks' practice-mode words (the formula, the factor), whatever mode the reports were graded in:
    for feedback released after the deadline."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for r in reports:
        stem = Path(r.get("report") or r["submission"]).stem
        _write_new(folder / f"{stem}.md", _guarded("feedback", lambda r: markdown(r, practice), r, _md))
        _write_new(folder / f"{stem}.html", _guarded("feedback page", lambda r: feedback_html(r, practice), r, _html))
    return folder

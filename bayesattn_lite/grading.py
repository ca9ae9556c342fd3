"""The autograder: execute a submitted notebook, run each question's check, write a score report.

    python -m bayesattn_lite.grading SUBMISSION.ipynb --report REPORT.json [--timeout 60] [--assignment ID]

What it does, in order:

1. reads the submission (never writes it): a file that is not a notebook gets a report saying so;
2. finds the assignment from the notebook's metadata ``bayesattn_lite.assignment`` (set by the
   instructor version and kept in the student version), else from the file name, else ``--assignment``;
3. executes a copy in a fresh kernel, in a temporary folder, cell by cell with a time limit per cell
   (a cell that runs too long is interrupted and the next one runs; errors do not stop execution);
4. runs each question's check (``assignments.Question``) in the same kernel, on the objects the
   learner defined, with ``bayesattn_lite.checks`` reloaded from disk so a notebook cannot replace it;
5. prints a summary and writes REPORT.json (score, max_score, questions with points and feedback,
   execution problems) and REPORT.md beside it, the same in words for the learner.

Exit status 0 whenever a report was written, whatever the submission did; 2 when it could not be
(bad arguments, unwritable report path). The kernel runs the learner's code with the grader's
permissions: grade untrusted submissions inside a container (see the instructors' page).
"""

import argparse
import importlib
import json
import math
import os
import secrets
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import assignments

DEFAULT_TIMEOUT = 60  # seconds per cell


# ----------------------------------------------------------------------------- inside the kernel

def _kernel_check(marker, qid, check_name, names):
    """Run in the submission's kernel: call ``checks.<check_name>`` on the learner's objects ``names``
    and print one line ``marker + JSON`` with passed and feedback. Never raises."""
    import __main__

    from . import checks
    try:
        checks = importlib.reload(checks)  # the notebook may have monkeypatched the module
        missing = [n for n in names if not hasattr(__main__, n)]
        if missing:
            passed, feedback = False, (f"{' and '.join('`' + n + '`' for n in missing)} "
                                       f"{'is' if len(missing) == 1 else 'are'} not defined: run the "
                                       "question's cell, and keep the names the assignment gives.")
        else:
            result = getattr(checks, check_name)(*(getattr(__main__, n) for n in names))
            passed, feedback = bool(result), (result.message if hasattr(result, "message") else str(result))
            if "raised NotImplementedError" in feedback:  # a stub nobody filled in: say so, with its hint
                hint = feedback.split("NotImplementedError: ", 1)[1].split(". It was called with", 1)[0]
                feedback = f"not answered yet: the function still raises NotImplementedError ({hint})."
    except BaseException as exc:  # noqa: BLE001 - the learner's objects may raise anything
        passed, feedback = False, f"the check could not run: {type(exc).__name__}: {str(exc)[:300]}"
    print(marker + json.dumps({"id": qid, "passed": passed, "feedback": feedback}))


# ----------------------------------------------------------------------------- reading

def _read(path):
    """(notebook, None) or (None, a sentence saying why the file is not a readable notebook)."""
    import nbformat
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"the file could not be read: {type(exc).__name__}: {exc}"
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises several kinds
        return None, f"the file is not a Jupyter notebook (invalid JSON or notebook format): {str(exc)[:300]}"
    if not isinstance(nb.get("cells"), list):
        return None, "the file is not a Jupyter notebook: it has no list of cells"
    return nb, None


def identify(nb, path, override=None):
    """The assignment id: ``override``, else the notebook metadata, else the file name; None if unknown."""
    if override:
        return override if override in assignments.ASSIGNMENTS else None
    meta = (nb or {}).get("metadata", {}).get("bayesattn_lite", {}) if nb else {}
    if meta.get("assignment") in assignments.ASSIGNMENTS:
        return meta["assignment"]
    stem = Path(path).stem
    return next((a for a in assignments.ASSIGNMENTS if stem.startswith(a)), None)


# ----------------------------------------------------------------------------- executing

def _error_line(cell):
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {str(out.get('evalue', ''))[:200]}"
    return None


def _execute(nb, assignment, timeout):
    """Run the notebook's code cells, then the checks; return (results by question id, problems)."""
    import nbformat
    from nbclient import NotebookClient

    marker = f"@@grade-{secrets.token_hex(8)}@@"
    problems, results = [], {}
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    checks = [nbformat.v4.new_code_cell(
        f"from bayesattn_lite.grading import _kernel_check\n"
        f"_kernel_check({marker!r}, {q.id!r}, {q.check!r}, {tuple(q.names)!r})") for q in assignment.questions]
    nb.cells.extend(checks)
    os.environ.setdefault("BAYESATTN_PROGRESS", "0")
    with tempfile.TemporaryDirectory(prefix="grading-") as work:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                interrupt_on_timeout=True, resources={"metadata": {"path": work}})
        try:
            with client.setup_kernel():
                for number, (index, cell) in enumerate(code, start=1):
                    start = time.monotonic()
                    client.execute_cell(cell, index)
                    if time.monotonic() - start >= timeout:
                        problems.append(f"code cell {number} ran longer than {timeout} s and was interrupted")
                    elif _error_line(cell):
                        problems.append(f"code cell {number} raised {_error_line(cell)}")
                for n, cell in enumerate(checks):
                    start = time.monotonic()
                    client.execute_cell(cell, len(nb.cells) - len(checks) + n)
                    if time.monotonic() - start >= timeout:
                        problems.append(f"the check of {assignment.questions[n].id} ran longer than {timeout} s")
                    for out in cell.get("outputs", []):
                        for line in str(out.get("text", "")).splitlines():
                            if line.startswith(marker):
                                found = json.loads(line[len(marker):])
                                results[found["id"]] = found
        except Exception as exc:  # noqa: BLE001 - a dead kernel, a kernel that would not start, ...
            problems.append(f"execution stopped: {type(exc).__name__}: {str(exc).strip()[:300]}")
    return results, problems


# ----------------------------------------------------------------------------- the report

def grade(path, assignment_id=None, timeout=DEFAULT_TIMEOUT):
    """The report of one submission as a dict (see the module docstring). Never raises on a bad submission."""
    started = time.monotonic()
    nb, problem = _read(path)
    report = {"submission": str(path), "assignment": None, "score": 0, "max_score": 0,
              "questions": [], "problems": [] if problem is None else [problem]}
    aid = identify(nb, path, assignment_id)
    if aid is None:
        report["problems"].append("could not tell which assignment this is: the notebook metadata names none "
                                  f"and the file name matches none of {sorted(assignments.ASSIGNMENTS)}; "
                                  "pass --assignment")
        aid = assignment_id if assignment_id in assignments.ASSIGNMENTS else None
    if aid is None:
        report["seconds"] = round(time.monotonic() - started, 1)
        return report
    assignment = assignments.ASSIGNMENTS[aid]
    report["assignment"], report["title"] = aid, assignment.title
    report["max_score"] = sum(q.points for q in assignment.questions)
    results = {}
    if nb is not None:
        try:
            results, problems = _execute(nb, assignment, timeout)
        except Exception as exc:  # noqa: BLE001 - the grader reports, it does not crash
            results, problems = {}, [f"the grader failed to execute the notebook: {type(exc).__name__}: {exc}"]
        report["problems"] += problems
    for q in assignment.questions:
        found = results.get(q.id)
        if found is None:
            found = {"passed": False, "feedback": "not checked: the notebook did not get that far "
                                                  "(see the problems above)" if nb is not None else
                                                  "not checked: the file could not be read"}
        report["questions"].append({"id": q.id, "title": q.title, "points": q.points if found["passed"] else 0,
                                    "max_points": q.points, "passed": found["passed"],
                                    "feedback": found["feedback"]})
    report["score"] = sum(q["points"] for q in report["questions"])
    report["seconds"] = round(time.monotonic() - started, 1)
    return report


def markdown(report):
    """The report in words, for the learner."""
    lines = [f"# Grading report: {report.get('title') or report['submission']}", "",
             f"**Score: {report['score']} / {report['max_score']}**", ""]
    if report["questions"]:
        lines += ["| Question | Points | Feedback |", "|---|---|---|"]
        for q in report["questions"]:
            mark = "✅" if q["passed"] else "❌"
            feedback = q["feedback"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {mark} {q['id']}: {q['title']} | {q['points']} / {q['max_points']} | {feedback} |")
        lines.append("")
    if report["problems"]:
        lines += ["## Problems while running your notebook", ""] + [f"- {p}" for p in report["problems"]] + [""]
    return "\n".join(lines)


def summary_line(report):
    return (f"{report['submission']}: {report['score']} / {report['max_score']} "
            f"({report['assignment'] or 'unknown assignment'}); "
            + "; ".join(f"{q['id']} {q['points']}/{q['max_points']}" for q in report["questions"])
            + (f"; {len(report['problems'])} problem(s)" if report["problems"] else ""))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bayesattn_lite.grading", description=__doc__.splitlines()[0])
    parser.add_argument("submission", type=Path, help="the submitted notebook (.ipynb); it is never modified")
    parser.add_argument("--report", type=Path, required=True, help="where to write the JSON report (REPORT.md beside it)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds allowed per cell")
    parser.add_argument("--assignment", choices=sorted(assignments.ASSIGNMENTS), help="override the detection")
    args = parser.parse_args(argv)
    if not (args.timeout > 0 and math.isfinite(args.timeout)):
        parser.error(f"--timeout: expected a positive number of seconds, got {args.timeout}")
    try:
        report = grade(args.submission, args.assignment, args.timeout)
    except Exception as exc:  # noqa: BLE001 - last resort: still write a report
        report = {"submission": str(args.submission), "assignment": args.assignment, "score": 0, "max_score": 0,
                  "questions": [], "problems": [f"internal grader error: {type(exc).__name__}: {exc}",
                                                traceback.format_exc(limit=3)]}
    try:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        args.report.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
    except OSError as exc:
        print(f"could not write the report to {args.report}: {exc}", file=sys.stderr)
        return 2
    print(summary_line(report))
    print(f"report: {args.report} and {args.report.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

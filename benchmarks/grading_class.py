"""How long the autograder takes for a class of 60 mixed submissions, at --jobs 1 and --jobs 2, in one run.

    python benchmarks/grading_class.py                              # problem set 1, --jobs 1 then 2
    python benchmarks/grading_class.py --assignment ps3_experiment --jobs 1 2 4 --size 60

The class, for one problem set, in Canvas's download names (login_userid_submissionid_file), cycling
through: correct (the instructor version handed in as a student would), untouched, half-done (the
first checked answer only), written answers typed into cells added under the stubs, a cell that raises,
an endless loop, and a kernel killed mid-notebook; two of them handed in late. Each grading is one
command: partial credit, a manual-points file merged, feedback released, a Canvas import CSV and a
Gradescope autograder zip written.
The same class is graded at each --jobs value, alternately, and both totals must agree.
"""

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bayesattn_lite.instructor import assignments  # noqa: E402


def _tagged(nb, tag):
    return [i for i, c in enumerate(nb.cells) if tag in c.metadata.get("tags", [])]


def half_done(assignment):
    """The student version with the first solution cell of the instructor version put in its place."""
    nb = nbformat.read(assignment.student_path, as_version=4)
    answer = next(c for c in assignments.solved_submission(assignment).cells if "solution" in c.metadata.get("tags", []))
    nb.cells[_tagged(nb, "solution")[0]] = answer
    return nb


def answered_below(assignment):
    """The student version with each written answer typed into a new cell under its untouched stub."""
    nb = nbformat.read(assignment.student_path, as_version=4)
    for q in reversed([q for q in assignment.questions if q.written]):
        for i in reversed(_tagged(nb, q.answer_tag)):
            nb.cells.insert(i + 1, nbformat.v4.new_markdown_cell(f"My answer to {q.id}: because the bias is fixed."))
    return nb


def with_cell(nb, source, at):
    nb.cells.insert(at, nbformat.v4.new_code_cell(source))
    return nb


def kinds(assignment):
    """The submissions the class cycles through, by name."""
    solved = lambda: assignments.solved_submission(assignment)  # noqa: E731 - a fresh copy each time
    return {"solved": solved, "untouched": lambda: nbformat.read(assignment.student_path, as_version=4),
            "half": lambda: half_done(assignment), "below": lambda: answered_below(assignment),
            "error": lambda: with_cell(solved(), "raise RuntimeError('my bug')", 3),
            "loop": lambda: with_cell(solved(), "while True:\n    pass", 3),
            "killed": lambda: with_cell(solved(), "import os\nos._exit(1)", 3)}


def write_class(folder, assignment, size):
    """The class in ``folder``; the roster, submission times and manual points beside it."""
    makers, rows, times, manual = kinds(assignment), [], [], []
    for n in range(size):
        kind = list(makers)[n % len(makers)]
        login, user, late = f"student{n:02d}{kind}", 10000 + n, n in (1, 2)
        name = f"{login}_{'LATE_' if late else ''}{user}_{900000 + n}_{assignment.id}_student.ipynb"
        nbformat.write(makers[kind](), folder / name)
        rows.append([f"Student {n:02d}", user, f"sis{n}", login, "A"])
        times.append([name, "2027-02-03T12:00:00+00:00" if late else "2027-02-01T12:00:00+00:00"])
        # every written answer graded (Canvas refuses an import while some are not): half marks for every third
        manual += [[name, q.id, q.points / 2 if n % 3 == 0 else q.points, "half marks" if n % 3 == 0 else "full marks"]
                   for q in assignment.questions if q.written]
    _csv(folder.parent / "roster.csv", ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
         [["Points Possible", "", "", "", ""]] + rows)
    _csv(folder.parent / "times.csv", ["submission", "submitted_at"], times)
    _csv(folder.parent / "manual.csv", ["submission", "question", "points", "comment"], manual)


def _csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def course_file(folder, assignment):
    """The shipped configuration with a deadline for ``assignment``, so that the two late ones are late."""
    text = (assignments.FOLDER / "course.toml").read_text()
    path = folder / "course.toml"
    path.write_text(text.replace(f"[{assignment.id}]\n", f"[{assignment.id}]\ndeadline = 2027-02-01T23:59:00Z\n", 1))
    return path


def grade(tmp, assignment, jobs, out, timeout):
    """Seconds for the class in one command, and the class's total points."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bayesattn_lite.instructor.grading", str(tmp / "class"), "--csv", str(out / "grades.csv"),
         "--jobs", str(jobs), "--timeout", str(timeout), "--course", str(course_file(tmp, assignment)),
         "--submitted-times", str(tmp / "times.csv"), "--manual", str(tmp / "manual.csv"),
         "--release", str(out / "feedback"), "--roster", str(tmp / "roster.csv"),
         "--canvas-csv", str(out / "canvas.csv"), "--canvas-column", f"{assignment.title} (1)",
         "--gradescope-bundle", str(out / "autograder.zip"), "--assignment", assignment.id],
        capture_output=True, text=True, cwd=str(out))
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"grading failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with open(out / "grades.csv", newline="") as f:
        points = sum(float(row["score"]) for row in csv.DictReader(f))
    return seconds, points


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="ps1_derivations", choices=sorted(assignments.ASSIGNMENTS))
    parser.add_argument("--size", type=int, default=60)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--timeout", type=float, default=20, help="seconds per cell (the endless loops wait this long)")
    args = parser.parse_args(argv)
    assignment = assignments.ASSIGNMENTS[args.assignment]
    with tempfile.TemporaryDirectory(prefix="bal-class-") as tmp:
        tmp = Path(tmp)
        (tmp / "class").mkdir()
        write_class(tmp / "class", assignment, args.size)
        times, totals = {}, set()
        for jobs in args.jobs:
            out = tmp / f"out-{jobs}"
            out.mkdir()
            times[jobs], points = grade(tmp, assignment, jobs, out, args.timeout)
            totals.add(points)
            print(f"--jobs {jobs}: {times[jobs]:.1f} s for {args.size} submissions of {assignment.id} "
                  f"({points:g} points in all)", flush=True)
        if len(totals) > 1:
            raise SystemExit(f"the class got different totals at different --jobs: {sorted(totals)}")
        base = times[args.jobs[0]]
        for jobs, seconds in times.items():
            print(f"--jobs {jobs}: speed-up {base / seconds:.2f}x over --jobs {args.jobs[0]}")


if __name__ == "__main__":
    main()

"""How long the autograder takes for a class of 20 mixed submissions, side by side with an older grader.

    python benchmarks/grading_class.py                      # this checkout's grader
    python benchmarks/grading_class.py --against 24437c4    # and the grader of that commit, alternately

The class: for each of the three problem sets, the untouched student version, a correct submission
(the instructor version handed in as a student would) and a half-done one (the first checked answer
only), plus 11 more correct ones spread over the sets: 20 notebooks. Each grader grades the class
written from its own checkout's problem sets (a solution written for today's package does not run
on an older one, and would fail fast); the runs alternate (new, old, new, old, ...) so that a busy
machine slows both alike.
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


def half_done(assignment, folder):
    """The student version with the first solution cell of the instructor version put in its place."""
    nb = nbformat.read(folder / assignment.student_path.name, as_version=4)
    answer = next(c for c in assignments.solved_submission(assignment, folder).cells
                  if "solution" in c.metadata.get("tags", []))
    for i, cell in enumerate(nb.cells):
        if "solution" in cell.metadata.get("tags", []):
            nb.cells[i] = answer
            break
    return nb


def write_class(folder, problem_sets):
    """The class of 20 in ``folder``, from the problem sets (instructor and student versions) in ``problem_sets``."""
    sets = list(assignments.ASSIGNMENTS.values())
    notebooks = {}
    for a in sets:
        notebooks[f"{a.id}_student"] = nbformat.read(problem_sets / a.student_path.name, as_version=4)
        notebooks[f"{a.id}_solved"] = assignments.solved_submission(a, problem_sets)
        notebooks[f"{a.id}_half"] = half_done(a, problem_sets)
    for n in range(20 - len(notebooks)):
        a = sets[n % len(sets)]
        notebooks[f"{a.id}_solved_{n}"] = assignments.solved_submission(a, problem_sets)
    for name, nb in notebooks.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
    return len(notebooks)


def grade(checkout, module, folder, out):
    """Seconds for one batch, and the class's points with the grader's last line."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", module, str(folder), "--csv", str(out / "grades.csv"),
                           "--reports", str(out / "reports")], capture_output=True, text=True,
                          cwd=str(out), env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"})
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{module} from {checkout} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    with open(out / "grades.csv", newline="") as f:  # the same class must get the same points from both
        points = sum(float(row["score"]) for row in csv.DictReader(f))
    return seconds, f"{points:g} points in all; " + done.stdout.strip().splitlines()[-1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="a commit whose grader (bayesattn_lite.grading) runs alternately")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bal-class-") as tmp:
        tmp = Path(tmp)
        graders = {"this checkout": (ROOT, "bayesattn_lite.instructor.grading")}
        if args.against:
            old = tmp / "old"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.against],
                           check=True, capture_output=True)
            graders[args.against] = (old, "bayesattn_lite.grading")
        classes = {name: tmp / f"class-{name.replace(' ', '_')}" for name in graders}
        for name, (checkout, _) in graders.items():
            classes[name].mkdir()
            n = write_class(classes[name], checkout / "book" / "assignments")
        times = {name: [] for name in graders}
        try:
            for r in range(args.repeats):
                for name, (checkout, module) in graders.items():
                    out = tmp / f"out-{len(times[name])}-{name.replace(' ', '_')}"
                    out.mkdir()
                    seconds, last = grade(checkout, module, classes[name], out)
                    times[name].append(seconds)
                    print(f"{name}: {seconds:.1f} s for {n} submissions ({last})", flush=True)
        finally:
            if args.against:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "old")],
                               capture_output=True)
        base = min(times["this checkout"])
        for name, t in times.items():
            print(f"{name}: best {min(t):.1f} s, ratio to this checkout {min(t) / base:.2f}")


if __name__ == "__main__":
    main()

"""The grader's side of the learning-management systems: Canvas's files in and out, a Gradescope autograder.

    python -m bayesattn_lite.instructor.grading DIR --assignment ps1_derivations --csv grades.csv --roster roster.csv \\
        --canvas-csv import.csv --canvas-column "Problem set 1 (12345)"
    python -m bayesattn_lite.instructor.grading --gradescope-bundle autograder.zip --assignment ps1_derivations

Canvas
------
- "Download submissions" names each file ``<login>_[LATE_]<user id>_<submission id>_<the student's file
  name>``: the login is the student's name in lower case without spaces (``smithjane``), ``LATE`` marks
  a submission after the due date, and a resubmitted file gets ``-N`` before its extension
  (``smithjane_LATE_12345_6789012_ps1_derivations-1.ipynb``): ``parse_canvas_name``. We found no
  Canvas page that documents this naming; scripts that undo it describe the same fields (github.com/TimHanneman/
  Canvas_submission_sort: "a student name, two id fields", "an extra field if the assignment was
  submitted late", "a number ... before the file extension" on resubmission).
- The gradebook export (Grades > Export) is a CSV with the columns ``Student``, ``ID`` (the Canvas user
  id, the one in the download names), ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per
  assignment, and a "Points Possible" row under the header: ``read_roster``.
- The gradebook import (Grades > Import) takes the student's identity columns, ``SIS Login ID``,
  ``Section`` and one column per assignment, and a score in it overwrites the one in Canvas
  (teaching.resources.osu.edu, "Import a CSV file to Carmen Grades"): ``canvas_import_csv``. Name the
  column as your export names the assignment (``Problem set 1 (12345)``: its title and Canvas id), so
  that the import updates it instead of creating a new one. A student with no submission gets an empty
  cell, and so does a submission the grader could not grade: never a 0 that nobody gave.

Gradescope
----------
Gradescope's autograder format (gradescope-autograders.readthedocs.io, "Autograder Specifications" and
"Technical Details"): a zip with ``setup.sh`` and ``run_autograder`` at its root. Gradescope builds a
Docker image once per assignment, running ``setup.sh`` (dependencies), with the zip's contents in
``/autograder/source``; for each submission it starts a new container of that image, puts the student's
files in ``/autograder/submission`` and runs ``run_autograder``, which must write
``/autograder/results/results.json`` (``score``, ``output``, ``tests``). ``gradescope_bundle`` writes:

- ``setup.sh``: a virtual environment (Python 3.11 or later, installed with apt where the image has an
  older one) with torch's CPU build, pinned to the torch here, and the course's package with its
  ``grading`` extra: from the wheel shipped in the zip, else this version's release wheel from GitHub
  (what the learner notebooks install; the package is on PyPI only if the course switches that on);
- ``run_autograder``: grades the newest ``.ipynb`` anywhere under ``submission/`` (by modification time,
  then name; it says so when there were several) with the grader's ``--gradescope`` output. Gradescope's
  docs ask for a results.json even when the autograder fails: when the grader fails, or no notebook was
  handed in, it writes one that says "NOT GRADED" and why (the grader's own words), with a score of 0
  because Gradescope needs one: look for "NOT GRADED" before publishing, fix, and regrade there. The
  environment variables ``AUTOGRADER_ROOT`` (default ``/autograder``) and ``AUTOGRADER_VENV`` let it run
  on your machine, in a folder laid out as Gradescope's (tests/test_lms.py does);
- ``course.toml``, the course configuration, if one is given, without its ``[<set>.extensions]`` tables
  and without comments (``course.without_extensions``): a submission could read the students' ids and
  your notes there, and on Gradescope deadlines and extensions are Gradescope's own.

The bundle grades with ``--no-sandbox``. Why: the sandbox is bubblewrap, which must create user, mount,
PID and network namespaces. Docker's default seccomp profile denies the ``clone``/``unshare`` calls that
create namespaces to a process without ``CAP_SYS_ADMIN``, which Docker does not grant by default
(docs.docker.com, "Seccomp security profiles for Docker"), and bubblewrap's maintainers say it cannot
work in a container that does not allow what it needs (containers/bubblewrap issue #505, where it took
``--security-opt seccomp=unconfined`` and more). Gradescope documents neither the seccomp profile nor
the capabilities of its containers, and bubblewrap has not been tried there: if they are Docker's
defaults, the sandbox cannot start and the grader would refuse every submission. What isolates students
from one another on Gradescope is then Gradescope's own container, a fresh one per submission. What is
lost: inside it the notebook runs as the same user as the grader, so a determined student could tamper
with their own result (their results.json, nobody else's). For a grade that counts, spot-check
Gradescope's scores against a sandboxed regrade of the downloaded submissions.
"""

import csv
import os
import re
import secrets
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from .release import NOT_GRADED, _csv_text, _one_line, _write_new

# the wheel that the learner notebooks install (a GitHub release of the course): the package is on PyPI
# only if the course switches that on (CONTRIBUTING.md), and an unpinned PyPI name could be anybody's
RELEASE_WHEEL = ("https://github.com/bayesattn-course/bayesattn-lite/releases/download/"
                 "v{version}/bayesattn_lite-{version}-py3-none-any.whl")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # Gradescope has no GPU; CUDA wheels are GBs
GRADESCOPE_VENV = "/opt/bayesattn_lite/venv"  # built by setup.sh into the image, outside /autograder
ROSTER_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


# ----------------------------------------------------------------------------- Canvas's file names

@dataclass(frozen=True)
class CanvasName:
    login: str  # the student's name in lower case without spaces: "smithjane"
    user_id: str  # the Canvas user id: the roster's ID column
    submission_id: str
    late: bool  # Canvas marked it LATE (handed in after the due date)
    original: str  # the student's file name, without Canvas's -N suffix


_CANVAS_NAME = re.compile(r"(?P<login>[^_/\\]+)_(?:(?P<late>LATE)_)?(?P<user>\d+)_(?P<sub>\d+)_(?P<original>.+)")
_RESUBMITTED = re.compile(r"-\d+(?=(\.[^.]*)?$)")  # the -N Canvas adds before the extension


def parse_canvas_name(filename):
    """The parts of a Canvas "download submissions" file name (a path's last part is used), or None for a
    name that is not Canvas's. A student's own trailing "-N" is indistinguishable from Canvas's and is
    dropped from ``original`` too."""
    m = _CANVAS_NAME.fullmatch(Path(str(filename)).name)
    if m is None:
        return None
    original = _RESUBMITTED.sub("", m["original"], count=1)
    return CanvasName(m["login"], m["user"], m["sub"], m["late"] is not None, original)


def assignment_in_name(filename, ids):
    """The id of ``ids`` found anywhere in the file name (any case), longest first so that ``ps1_b`` wins
    over ``ps1``; None if none is. Canvas and Colab put text before it ("Copy of ...", "login_1_2_...")."""
    name = Path(str(filename)).name.lower()
    return next((i for i in sorted(ids, key=len, reverse=True) if i.lower() in name), None)


# ----------------------------------------------------------------------------- the roster and the import

@dataclass(frozen=True)
class Student:
    name: str  # "Smith, Jane", as Canvas sorts it
    user_id: str  # Canvas's ID column
    sis_user_id: str
    sis_login_id: str
    section: str

    def row(self):
        return [self.name, self.user_id, self.sis_user_id, self.sis_login_id, self.section]


def read_roster(path):
    """The students of a Canvas gradebook export CSV, in its order. Skips the "Points Possible" row and
    rows without a Canvas ID; tolerates a byte-order mark (Excel writes one)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in reader.fieldnames or []]
        missing = [c for c in ROSTER_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path}: not a Canvas gradebook export: missing the column(s) {missing} "
                             f"(expected {list(ROSTER_COLUMNS)}; found {header})")
        reader.fieldnames = header  # so that " ID" or "Student " still reads
        students = []
        for row in reader:
            name, uid = (row["Student"] or "").strip(), (row["ID"] or "").strip()
            if name == "Points Possible" or not uid:
                continue
            students.append(Student(name, uid, *((row[c] or "").strip() for c in ROSTER_COLUMNS[2:])))
    return students


def _score_text(score):
    return f"{float(score):g}"  # 7.5 -> "7.5", 10.0 -> "10"


def canvas_import_csv(reports, roster, column, path, notes=None):
    """Write Canvas's gradebook import CSV to ``path``: the roster's identity columns and ``column`` with
    each student's score, matched by the Canvas user id in the report's submission file name. A student
    with two graded files (two notebooks in one submission) gets the higher score, and a line in ``notes``
    (a list, if given) says which. Returns the reports'
    submission names that name no student of the roster (not Canvas names, or not on the roster), each on
    one line (``_one_line``), for the console. Every cell goes through ``_cell``, the roster's too: its names come
    from outside the grader."""
    if not isinstance(column, str) or not column.strip():
        raise ValueError(f"expected the Canvas assignment column, e.g. 'Problem set 1 (12345)', got {column!r}")
    on_roster = {s.user_id for s in roster}
    scores, files, unmatched = {}, {}, []
    for r in reports:
        parsed = parse_canvas_name(r["submission"])
        if parsed is None or parsed.user_id not in on_roster:
            unmatched.append(_one_line(r["submission"]))
        elif r.get("status") not in NOT_GRADED and r.get("score") is not None:
            scores[parsed.user_id] = max(scores.get(parsed.user_id, r["score"]), r["score"])
            files.setdefault(parsed.user_id, []).append(f"{_one_line(r['submission'])} ({_score_text(r['score'])})")
    for uid, graded in files.items():
        if len(graded) > 1 and notes is not None:
            notes.append(f"Canvas user {uid} has {len(graded)} graded files, {', '.join(graded)}: the higher score, "
                         f"{_score_text(scores[uid])}, is exported")
    rows = [s.row() + [_score_text(scores[s.user_id]) if s.user_id in scores else ""] for s in roster]
    missing = [s for s in roster if s.user_id not in scores]
    if missing and notes is not None:   # an empty cell leaves Canvas's grade as it is: say whose
        notes.append(f"{len(missing)} student(s) of the roster have no graded submission, their cells left empty "
                     f"(Canvas keeps what it had): {'; '.join(_one_line(s.row()[0]) for s in missing[:10])}"
                     + ("; ..." if len(missing) > 10 else ""))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _write_new(path, _csv_text([*ROSTER_COLUMNS, column], rows))  # a temporary file renamed over path (os.replace)
    return unmatched


# ----------------------------------------------------------------------------- the Gradescope bundle

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image: a virtual environment with torch's
# CPU build and the course's package (with its grading extra: jupyter_client, ipykernel, nbformat).
set -euo pipefail
VENV={venv}
PY=""
for candidate in python3.13 python3.12 python3.11; do  # the package needs Python 3.11 or later
  if command -v "$candidate" >/dev/null; then PY=$candidate; break; fi
done
if [ -z "$PY" ]; then  # e.g. Ubuntu 22.04, whose python3 is 3.10
  apt-get update && apt-get install -y python3.11 python3.11-venv
  PY=python3.11
fi
"$PY" -m venv "$VENV" || {{ apt-get update && apt-get install -y "$PY-venv" && "$PY" -m venv "$VENV"; }}
"$VENV/bin/python" -m pip install --upgrade pip
"$VENV/bin/python" -m pip install {torch} --index-url {torch_index}
"$VENV/bin/python" -m pip install {package}
"$VENV/bin/python" -c "import bayesattn_lite, ipykernel, jupyter_client, nbformat; print('bayesattn_lite', bayesattn_lite.__version__)"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission: grade the newest notebook, write results/results.json. If the
# grader fails, a results.json that says NOT GRADED and why, so that the failure shows on Gradescope.
set -u
ROOT=$(cd "${{AUTOGRADER_ROOT:-/autograder}}" && pwd) || exit 1  # overridable to try the bundle locally
VENV="${{AUTOGRADER_VENV:-{venv}}}"
if [ -x "$VENV/bin/python" ]; then PATH="$VENV/bin:$PATH"; fi
RESULTS="$ROOT/results/results.json"
WORK=$(mktemp -d)  # the report and the grader's log; the grader runs here, where no student file is
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/grader.log"
mkdir -p "$ROOT/results"

json_text() {{  # a JSON string of $1: printable ASCII, tabs and newlines only, escaped
  local s
  s=$(printf '%s' "$1" | LC_ALL=C tr -cd '\\11\\12\\40-\\176')
  s=${{s//\\\\/\\\\\\\\}}; s=${{s//\\"/\\\\\\"}}; s=${{s//$'\\t'/\\\\t}}; s=${{s//$'\\n'/\\\\n}}
  printf '"%s"' "$s"
}}

not_graded() {{  # $1: why. Score 0 because Gradescope needs one; the output says it was not graded
  local text problems=""
  text="NOT GRADED: $1"
  if [ -f "$WORK/report.json" ]; then
    problems=$(python3 -c 'import json, sys; print("\\n".join(json.load(open(sys.argv[1]))["problems"]))' \\
               "$WORK/report.json" 2>/dev/null || true)
    [ -n "$problems" ] && text="$text"$'\\n\\n'"$problems"
  fi
  [ -s "$LOG" ] && text="$text"$'\\n\\nThe grader said:\\n'"$(tail -c 3000 "$LOG")"
  printf '{{"score": 0, "output": %s}}\\n' "$(json_text "$text")" > "$RESULTS.tmp" && mv "$RESULTS.tmp" "$RESULTS"
  echo "$text"
}}

# the newest .ipynb (by modification time, then name), anywhere under submission/
NB=$(find "$ROOT/submission" -type f -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' -printf '%T@ %p\\n' \\
     2>/dev/null | sort -k1,1nr -k2 | head -n 1 | cut -d' ' -f2-)
if [ -z "$NB" ]; then
  not_graded "no .ipynb file was found in your submission. Upload your notebook (the .ipynb file)."
  exit 0
fi
COUNT=$(find "$ROOT/submission" -type f -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | wc -l)
[ "$COUNT" -gt 1 ] && echo "$COUNT notebooks submitted: grading the newest, ${{NB#"$ROOT/submission/"}}"

rm -f "$RESULTS"
cd "$WORK" || exit 1
python3 -m bayesattn_lite.instructor.grading "$NB" --assignment {assignment} --report "$WORK/report.json" \\
  --gradescope "$RESULTS" --no-sandbox --folder "$ROOT/source/handout"{course}{extra} >"$LOG" 2>&1
STATUS=$?
cat "$LOG"
if [ "$STATUS" -ne 0 ] || [ ! -s "$RESULTS" ]; then
  not_graded "the autograder failed (exit status $STATUS), which may not be your notebook's fault: tell your instructor."
fi
exit 0
"""


def _pinned_torch():
    """``torch==<the version here>`` (without a local +cpu tag), so that Gradescope computes what the
    instructor's checks did; plain ``torch`` where it is not installed."""
    from importlib import metadata
    try:
        return "torch==" + metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return "torch"


def _zip_entry(bundle, name, text, mode=0o644):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # a fixed time: the same zip every time
    info.external_attr = (0o100000 | mode) << 16  # a regular file with these permissions
    info.compress_type = zipfile.ZIP_DEFLATED
    bundle.writestr(info, text)


def gradescope_bundle(path, assignment_id, *, wheel=None, course_file=None, folder=None, extra_args=()):
    """Write a Gradescope autograder zip to ``path`` that grades ``assignment_id``. ``wheel``: the course's
    wheel to put in the zip and install (what you grade with locally, your own questions included); else
    setup.sh installs this version's release wheel from GitHub. ``course_file``: the course configuration
    (TOML), shipped as course.toml without its extensions tables and comments. ``extra_args``: more grader
    options, e.g. ("--notebook-timeout", "600").
    The handout goes along (handout/: the student version as this course writes it, a class variant's
    forms included, written from the instructor version in ``folder``, default: the checkout's
    book/assignments), and the grader reads it with --folder: without it the grader would not know which
    cells the course gave (written answers, reference calls), nor a class variant's forms. The instructor
    version does not go: Gradescope runs a submission without the sandbox, where it could read the zip."""
    from . import assignments
    from . import course as _course
    if assignment_id not in assignments.ASSIGNMENTS:
        raise ValueError(f"expected one of the assignments {sorted(assignments.ASSIGNMENTS)}, got {assignment_id!r}")
    if wheel is not None and not (Path(wheel).is_file() and Path(wheel).suffix == ".whl"):
        raise ValueError(f"expected the course's wheel file (.whl), got {wheel}")
    # a mistake in it is said now (ValueError), not on each submission; what ships leaves out students' extensions
    shipped = _course.without_extensions(course_file) if course_file is not None else None
    a = assignments.ASSIGNMENTS[assignment_id]
    if not (Path(folder or assignments.FOLDER) / a.instructor_path.name).is_file():
        raise ValueError(f"expected the instructor version {a.instructor_path.name} in {folder or assignments.FOLDER} "
                         "(the course's book/assignments; give its folder with --folder DIR)")
    handout = {a.student_path.name: assignments.render(a, folder, course_file)}
    package = (f"/autograder/source/{Path(wheel).name}[grading]" if wheel is not None else
               "bayesattn-lite[grading]@" + RELEASE_WHEEL.format(version=__version__))
    setup = SETUP_SH.format(venv=GRADESCOPE_VENV, torch=shlex.quote(_pinned_torch()), torch_index=TORCH_CPU_INDEX,
                            package=shlex.quote(package))
    run = RUN_AUTOGRADER.format(
        venv=GRADESCOPE_VENV, assignment=shlex.quote(assignment_id),
        course=' --course "$ROOT/source/course.toml"' if course_file is not None else "",
        extra="".join(" " + shlex.quote(str(a)) for a in extra_args))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        with zipfile.ZipFile(temporary, "x") as bundle:
            _zip_entry(bundle, "setup.sh", setup, 0o755)
            _zip_entry(bundle, "run_autograder", run, 0o755)
            for name, text in handout.items():
                _zip_entry(bundle, f"handout/{name}", text)
            if shipped is not None:
                _zip_entry(bundle, "course.toml", shipped)
            if wheel is not None:
                bundle.write(wheel, Path(wheel).name)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path

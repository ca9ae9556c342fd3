"""Canvas's file names, roster and gradebook import, and the Gradescope bundle run in Gradescope's folder
layout (bayesattn_lite.instructor.lms). The bundle's runs use submissions the grader answers without a
kernel (not a notebook, a broken configuration), so that each takes seconds."""

import csv
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from bayesattn_lite import __version__
from bayesattn_lite.instructor import assignments, lms

COURSE_TOML = assignments.FOLDER / "course.toml"


# ----------------------------------------------------------------------------- Canvas's file names

@pytest.mark.parametrize("name, expected", [
    ("smithjane_12345_6789012_ps1_derivations_student.ipynb",
     lms.CanvasName("smithjane", "12345", "6789012", False, "ps1_derivations_student.ipynb")),
    ("smithjane_LATE_12345_6789012_ps1_derivations-1.ipynb",
     lms.CanvasName("smithjane", "12345", "6789012", True, "ps1_derivations.ipynb")),
    ("downloads/obrienpat_7_8_Copy of ps2_dynamics_student-12.ipynb",
     lms.CanvasName("obrienpat", "7", "8", False, "Copy of ps2_dynamics_student.ipynb")),
    ("late_3_4_notes", lms.CanvasName("late", "3", "4", False, "notes")),  # a login "late" is not the marker
])
def test_canvas_names_give_login_ids_late_and_the_students_file_name(name, expected):
    assert lms.parse_canvas_name(name) == expected


@pytest.mark.parametrize("name", ["ps1_derivations_student.ipynb", "Copy of ps1_derivations_student.ipynb",
                                  "smithjane_12345_ps1.ipynb", "smithjane_LATE_x_6789012_ps1.ipynb",
                                  "smithjane_12345_6789012_", ""])
def test_names_that_are_not_canvas_names_give_none(name):
    assert lms.parse_canvas_name(name) is None


def test_the_assignment_is_found_anywhere_in_the_name_longest_first():
    ids = ["ps1", "ps1_derivations", "ps2_dynamics"]
    assert lms.assignment_in_name("smithjane_12345_678_ps1_derivations_student.ipynb", ids) == "ps1_derivations"
    assert lms.assignment_in_name("dir/Copy of PS2_Dynamics_student.ipynb", ids) == "ps2_dynamics"
    assert lms.assignment_in_name("smithjane_12345_678_homework.ipynb", ids) is None


# ----------------------------------------------------------------------------- the roster and the import

EXPORT = ("\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Problem set 1 (12345)\n"
          "    Points Possible,,,,,10\n"
          '"Smith, Jane",12345,S001,jsmith,Sec A,\n'
          '"O\'Brien, Pat",23456,S002,pobrien,Sec B,4\n'
          '"Student, Test",99999,,,Sec A,\n')


def _roster(tmp_path, text=EXPORT):
    path = tmp_path / "roster.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_roster_skips_the_points_possible_row_and_the_byte_order_mark(tmp_path):
    students = lms.read_roster(_roster(tmp_path))
    assert [s.user_id for s in students] == ["12345", "23456", "99999"]
    assert students[0] == lms.Student("Smith, Jane", "12345", "S001", "jsmith", "Sec A")


def test_a_roster_without_canvas_columns_is_refused_naming_them(tmp_path):
    with pytest.raises(ValueError, match=r"missing the column\(s\) \['SIS Login ID', 'Section'\]"):
        lms.read_roster(_roster(tmp_path, "Student,ID,SIS User ID\nSmith,1,S1\n"))


def _report(name, score, status="graded"):
    return {"submission": name, "score": score, "status": status}


def _import(tmp_path, reports, column="Problem set 1 (12345)", export=EXPORT):
    path = tmp_path / "out" / "import.csv"
    unmatched = lms.canvas_import_csv(reports, lms.read_roster(_roster(tmp_path, export)), column, path)
    with path.open(newline="", encoding="utf-8") as f:
        return unmatched, list(csv.reader(f)), path


def test_the_import_has_a_score_per_matched_student_and_empty_cells_otherwise(tmp_path):
    reports = [_report("subs/smithjane_LATE_12345_111_ps1_derivations_student.ipynb", 7.5),
               _report("obrienpat_23456_222_ps1_derivations_student.ipynb", None, "not graded"),
               _report("nobody_55555_333_ps1_derivations_student.ipynb", 9),
               _report("ps1_derivations_student.ipynb", 10)]
    unmatched, rows, path = _import(tmp_path, reports)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Problem set 1 (12345)"]
    assert rows[1:] == [["Smith, Jane", "12345", "S001", "jsmith", "Sec A", "7.5"],
                        ["O'Brien, Pat", "23456", "S002", "pobrien", "Sec B", ""],  # not graded: never a 0
                        ["Student, Test", "99999", "", "", "Sec A", ""]]  # no submission
    assert unmatched == ["nobody_55555_333_ps1_derivations_student.ipynb", "ps1_derivations_student.ipynb"]
    assert [p.name for p in path.parent.iterdir()] == ["import.csv"]  # no temporary file left


def test_two_files_of_one_student_count_once_with_the_higher_score(tmp_path):
    reports = [_report("smithjane_12345_111_a.ipynb", 3), _report("smithjane_12345_111_b.ipynb", 8),
               _report("smithjane_12345_111_c.ipynb", 0)]
    unmatched, rows, _ = _import(tmp_path, reports)
    assert unmatched == [] and rows[1][-1] == "8"
    notes = []   # and the console says which, so that an instructor can look at the other files
    lms.canvas_import_csv(reports, lms.read_roster(_roster(tmp_path, EXPORT)), "PS1", tmp_path / "again.csv", notes)
    assert notes == ["Canvas user 12345 has 3 graded files, smithjane_12345_111_a.ipynb (3), smithjane_12345_111_b.ipynb "
                     "(8), smithjane_12345_111_c.ipynb (0): the higher score, 8, is exported",
                     # and whose cells are empty (Canvas keeps their old grade), named, not left to find
                     "2 student(s) of the roster have no graded submission, their cells left empty (Canvas keeps "
                     "what it had): O'Brien, Pat; Student, Test"]


def test_a_formula_in_the_import_is_text_and_a_hostile_name_is_listed_on_one_line(tmp_path):
    export = (EXPORT.replace('"Student, Test"', '"=HYPERLINK(""http://x"",""y"")"')
              .replace(",jsmith,Sec A,", ",jsmith,@SUM(1),"))
    reports = [_report("smithjane_12345_111_ps1.ipynb", 7.5), _report("x\x1b[2J\rforged_1_2_\n-2+3.ipynb", 9)]
    unmatched, rows, _ = _import(tmp_path, reports, export=export)
    assert rows[1] == ["Smith, Jane", "12345", "S001", "jsmith", "'@SUM(1)", "7.5"]  # the score stays a number
    assert rows[3][0] == "'=HYPERLINK(\"http://x\",\"y\")"
    assert unmatched == ["x\\x1b[2J\\rforged_1_2_\\n-2+3.ipynb"]  # for the console: no control character


def test_the_import_needs_an_assignment_column(tmp_path):
    with pytest.raises(ValueError, match="Problem set 1"):
        _import(tmp_path, [], column=" ")


# ----------------------------------------------------------------------------- the Gradescope bundle

def _read(bundle):
    with zipfile.ZipFile(bundle) as z:
        return {i.filename: (z.read(i).decode("utf-8", "replace"), i.external_attr >> 16) for i in z.infolist()}


def test_the_bundle_has_gradescopes_two_scripts_at_its_root(tmp_path):
    files = _read(lms.gradescope_bundle(tmp_path / "autograder.zip", "ps1_derivations", course_file=COURSE_TOML,
                                        extra_args=("--notebook-timeout", "600")))
    # no instructor version: on Gradescope a submission runs without the sandbox and could read the zip
    assert set(files) == {"setup.sh", "run_autograder", "course.toml", "handout/ps1_derivations_student.ipynb"}
    assert "BEGIN SOLUTION" not in files["handout/ps1_derivations_student.ipynb"][0]
    assert files["setup.sh"][1] & 0o111 and files["run_autograder"][1] & 0o111  # executable
    # the same configuration, without comments (and extensions: the shipped file has none)
    assert tomllib.loads(files["course.toml"][0]) == tomllib.loads(COURSE_TOML.read_text(encoding="utf-8"))
    run = files["run_autograder"][0]
    assert "--assignment ps1_derivations" in run and "--no-sandbox" in run and "--notebook-timeout 600" in run
    assert '--course "$ROOT/source/course.toml"' in run and '--folder "$ROOT/source/handout"' in run
    setup = files["setup.sh"][0]
    assert "download.pytorch.org/whl/cpu" in setup  # torch's CPU build
    assert f"v{__version__}/bayesattn_lite-{__version__}-py3-none-any.whl" in setup  # this version, pinned


def test_the_bundle_warns_that_a_shipped_course_file_shows_its_rubrics_and_its_variant_seed(tmp_path, capsys):
    from bayesattn_lite.instructor import grading
    course = tmp_path / "course.toml"   # on Gradescope a submission runs without the sandbox and could read them
    course.write_text(COURSE_TOML.read_text().replace("[ps1_derivations]\n", "[ps1_derivations]\nvariant = 48213\n", 1))
    assert grading.main(["--gradescope-bundle", str(tmp_path / "a.zip"), "--assignment", "ps1_derivations",
                         "--course", str(course)]) == 0
    err = capsys.readouterr().err
    assert "its class variants' seeds included" in err and "pick a new seed for each class" in err
    assert "its rubrics included" not in err   # the published course file has none (only in its comments)


def test_the_bundle_leaves_out_the_students_extensions_and_the_comments_and_says_so(tmp_path, capsys):
    from bayesattn_lite.instructor import grading
    course = tmp_path / "course.toml"   # students' ids and the instructor's notes: any submission could read them
    course.write_text(COURSE_TOML.read_text().replace(
        "[ps1_derivations]\n", "[ps1_derivations]\ndeadline = 2027-02-01T23:59:00Z\n\n[ps1_derivations.extensions]\n"
        '"12345" = 2027-02-04T23:59:00Z   # medical\nsmithjane = 2027-02-05T23:59:00Z\n', 1))
    assert grading.main(["--gradescope-bundle", str(tmp_path / "a.zip"), "--assignment", "ps1_derivations",
                         "--course", str(course)]) == 0
    shipped = _read(tmp_path / "a.zip")["course.toml"][0]
    for private in ("extensions", "12345", "smithjane", "medical", "#"):
        assert private not in shipped, private
    expected = tomllib.loads(course.read_text())
    del expected["ps1_derivations"]["extensions"]
    assert tomllib.loads(shipped) == expected   # the rest as it was, the deadline included
    err = capsys.readouterr().err
    assert "leaves out its [<set>.extensions] tables and its comments" in err and "extensions in Gradescope" in err


def test_a_wheel_given_is_shipped_and_installed_from_the_bundle(tmp_path):
    wheel = tmp_path / f"bayesattn_lite-{__version__}-py3-none-any.whl"
    wheel.write_bytes(b"PK fake wheel")
    files = _read(lms.gradescope_bundle(tmp_path / "a.zip", "ps2_dynamics", wheel=wheel))
    assert wheel.name in files and "course.toml" not in files
    assert f"/autograder/source/{wheel.name}[grading]" in files["setup.sh"][0]
    assert "github.com" not in files["setup.sh"][0] and "--course" not in files["run_autograder"][0]


def test_the_bundle_refuses_an_unknown_assignment_a_bad_wheel_and_a_broken_configuration(tmp_path):
    with pytest.raises(ValueError, match="ps1_derivations"):
        lms.gradescope_bundle(tmp_path / "a.zip", "ps9")
    with pytest.raises(ValueError, match=r"\.whl"):
        lms.gradescope_bundle(tmp_path / "a.zip", "ps1_derivations", wheel=tmp_path / "missing.whl")
    with pytest.raises(ValueError, match=r"ps1_derivations.ipynb in .*--folder DIR"):   # no handout to write
        lms.gradescope_bundle(tmp_path / "a.zip", "ps1_derivations", folder=tmp_path)
    bad = tmp_path / "course.toml"
    bad.write_text("[course]\nmode = 3\n")
    with pytest.raises(ValueError):
        lms.gradescope_bundle(tmp_path / "a.zip", "ps1_derivations", course_file=bad)
    assert not list(tmp_path.glob("*.zip")) and not list(tmp_path.glob(".*.tmp"))


def _gradescope(tmp_path, submissions, course_file=None, break_course=False, venv=None):
    """Gradescope's layout under tmp_path (source/ from the zip, submission/, results/), run_autograder run
    there with this environment's python; (its stdout, results.json)."""
    with zipfile.ZipFile(lms.gradescope_bundle(tmp_path / "autograder.zip", "ps1_derivations",
                                               course_file=course_file)) as z:
        z.extractall(tmp_path / "source")
    if break_course:
        (tmp_path / "source" / "course.toml").write_text('[course]\nmode = "nonsense "quoted\n')
    (tmp_path / "submission").mkdir()
    (tmp_path / "results").mkdir()
    for i, (name, text) in enumerate(submissions.items()):
        (tmp_path / "submission" / name).write_text(text)
        os.utime(tmp_path / "submission" / name, (1e9 + i, 1e9 + i))  # later in the dict: newer
    env = {**os.environ, "AUTOGRADER_ROOT": str(tmp_path), "AUTOGRADER_VENV": str(venv or tmp_path / "no-venv"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(tmp_path / "source" / "run_autograder")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads((tmp_path / "results" / "results.json").read_text())


def test_run_autograder_grades_the_newest_notebook_into_results_json(tmp_path):
    out, results = _gradescope(tmp_path, {"a_older.ipynb": "{}", "z_newer.ipynb": "not a notebook"}, COURSE_TOML)
    assert "2 notebooks submitted: grading the newest, z_newer.ipynb" in out
    assert results["score"] == 0 and "not a Jupyter notebook (invalid JSON" in results["output"]  # the newer one
    assert [t["name"].split(":")[0] for t in results["tests"]] == ["q1", "q3"]  # the checked questions
    assert all(t["max_score"] > 0 and t["output"] for t in results["tests"])


def test_a_grader_failure_gives_a_not_graded_results_json_with_the_reason(tmp_path):
    _, results = _gradescope(tmp_path, {"mine.ipynb": "not a notebook"}, COURSE_TOML, break_course=True)
    assert results["score"] == 0 and "tests" not in results
    assert results["output"].startswith("NOT GRADED: the autograder failed (exit status 2)")
    assert "cannot read the course configuration" in results["output"]  # the grader's own words


def test_a_grader_crash_is_not_graded_and_its_words_survive_as_json(tmp_path):
    fake = tmp_path / "venv" / "bin"  # a python whose grader crashes with quotes, backslashes and tabs
    fake.mkdir(parents=True)
    for name in ("python", "python3"):
        (fake / name).write_text('#!/bin/sh\nprintf \'Traceback: "q1"\\\\ C:\\\\x\\tend \\302\\265\\n\' >&2\nexit 1\n')
        (fake / name).chmod(0o755)
    _, results = _gradescope(tmp_path, {"mine.ipynb": "{}"}, venv=tmp_path / "venv")
    assert results["output"].startswith("NOT GRADED: the autograder failed (exit status 1)")
    assert results["output"].endswith('Traceback: "q1"\\ C:\\x\tend ')  # the non-ASCII bytes dropped


def test_a_submission_without_a_notebook_is_not_graded_and_says_so(tmp_path):
    _, results = _gradescope(tmp_path, {"answers.pdf": "%PDF"})
    assert results == {"score": 0, "output": "NOT GRADED: no .ipynb file was found in your submission. "
                                             "Upload your notebook (the .ipynb file)."}

"""The course's configuration (book/assignments/course.toml, bayesattn_lite.instructor.course): the shipped
file, overrides and added questions, every error, the late policy, and the points tables it generates."""

from datetime import datetime, timedelta, timezone

import nbformat
import pytest

from bayesattn_lite import checks
from bayesattn_lite.instructor import assignments, course
from bayesattn_lite.instructor.assignments import ASSIGNMENTS

DEADLINE = datetime(2027, 2, 1, 23, 59, tzinfo=timezone.utc)
HEAD = """
[course]
mode = "practice"
[late]
grace_minutes = 15
penalty_per_day = 0.10
max_days = 5
[ps1_derivations]
deadline = 2027-02-01T23:59:00Z
"""


def write(tmp_path, text, head=HEAD):
    path = tmp_path / "course.toml"
    path.write_text(head + text, encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- the shipped file

def test_the_shipped_file_sets_every_question_and_partial_credit_the_checks_can_name():
    c = course.load()
    assert c.path == assignments.FOLDER / "course.toml"
    for aid, registry in ASSIGNMENTS.items():
        configured = c.assignment(aid)
        assert [q.id for q in configured.questions] == [q.id for q in registry.questions]
        assert sum(q.points for q in configured.questions) == 10
        assert c.mode(aid) == "practice" and c.deadline(aid) is None
    q1 = c.assignment("ps1_derivations").questions[0]
    assert q1.per_output and dict(q1.mistakes)["tau_in_chain"] == 2
    assert c.assignment("ps2_dynamics").questions[2].mistakes  # the tempered kernel: named slips earn points
    assert c.assignment("ps3_experiment").questions[4].per_output  # two floors, one point each
    assert c.late_policy == course.LatePolicy(15, 0.10, 5)


def test_the_file_sets_the_points_the_registry_defaults_to():
    # every question's points are written in the file (it is the source of truth), today the registry's
    text = (assignments.FOLDER / "course.toml").read_text(encoding="utf-8")
    for aid, registry in ASSIGNMENTS.items():
        for q in registry.questions:
            assert f"[{aid}.{q.id}]\npoints = {q.points}" in text, f"course.toml: set the points of {aid}.{q.id}"


def test_without_a_file_the_registry_defaults_hold(tmp_path, monkeypatch):
    monkeypatch.setattr(assignments, "FOLDER", tmp_path)  # no course.toml there
    c = course.load()
    assert c.path is None and c.assignment("ps2_dynamics") is ASSIGNMENTS["ps2_dynamics"]
    assert c.mode("ps2_dynamics") == "practice" and c.late("ps2_dynamics", DEADLINE + timedelta(days=9)) == (1.0, "")


# ----------------------------------------------------------------------------- overrides and added questions

def test_overrides_change_points_titles_mode_and_deadline(tmp_path):
    c = course.load(write(tmp_path, """mode = "graded"
[ps1_derivations.q1]
points = 4
title = "the biased gradients"
per_output = true
mistakes = { tau_in_chain = 3, sign = 1.5 }
[ps2_dynamics.q2]
points = 2.5
"""))
    q1 = c.assignment("ps1_derivations").questions[0]
    assert (q1.points, q1.title, q1.per_output, q1.mistakes) == (4, "the biased gradients", True,
                                                                  (("tau_in_chain", 3), ("sign", 1.5)))
    assert q1.check is checks.check_biased_qk_gradients and q1.names == ("biased_qk_gradients",)
    assert c.assignment("ps2_dynamics").questions[1].points == 2.5
    assert c.assignment("ps2_dynamics").questions[1].rubric == ASSIGNMENTS["ps2_dynamics"].questions[1].rubric
    assert c.mode("ps1_derivations") == "graded" and c.mode("ps2_dynamics") == "practice"
    assert c.deadline("ps1_derivations") == DEADLINE and c.deadline("ps3_experiment") is None
    assert ASSIGNMENTS["ps1_derivations"].questions[0].points == 3  # the registry is not changed


def test_added_written_and_checked_questions_come_last(tmp_path):
    c = course.load(write(tmp_path, """[ps1_derivations.q5]
title = "what the bias does far back"
points = 2
rubric = "1 pt: a\\n1 pt: b"
[ps1_derivations.q6]
title = "one more floor"
points = 1
check = "bayesattn_lite.checks:check_markov_floors"
names = ["markov_floors"]
"""))
    questions = c.assignment("ps1_derivations").questions
    assert [q.id for q in questions] == ["q1", "q2", "q3", "q4", "q5", "q6"]
    q5, q6 = questions[4:]
    assert q5.written and q5.rubric == "1 pt: a\n1 pt: b" and q5.points == 2 and q5.answer_tag == "answer-q5"
    assert not q6.written and q6.check is checks.check_markov_floors and q6.names == ("markov_floors",)
    table = assignments.points_table(c.assignment("ps1_derivations"))
    assert "| q5 | what the bias does far back | written, graded by your instructor | 2 |" in table
    assert "| q6 | one more floor | code, checked automatically | 1 |" in table and table.endswith("| | total | | 13 |")


# ----------------------------------------------------------------------------- errors name the key

@pytest.mark.parametrize("text, key, expected", [
    ("[ps9_unknown.q1]\npoints = 1\n", "ps9_unknown", "an assignment id"),
    ("[ps1_derivations.q1]\npoints = -1\n", "ps1_derivations.q1.points", "a number >= 0"),
    ("[ps1_derivations.q1]\npoints = \"3\"\n", "ps1_derivations.q1.points", "a number >= 0"),
    ("[ps1_derivations.q1]\npoint = 3\n", "ps1_derivations.q1.point", "one of the keys"),
    ("[ps1_derivations.q1]\nper_output = 1\n", "ps1_derivations.q1.per_output", "true or false"),
    ("[ps1_derivations.q1]\nmistakes = { no_such_knob = 1 }\n", "ps1_derivations.q1.mistakes.no_such_knob",
     "a mistake check_biased_qk_gradients names"),
    ("[ps1_derivations.q1]\nmistakes = { sign = 5 }\n", "ps1_derivations.q1.mistakes.sign", "at most"),
    ("[ps1_derivations.q3]\nper_output = true\n", "ps1_derivations.q3.per_output", "a single output"),
    ("[ps1_derivations.q2]\nmistakes = { sign = 1 }\n", "ps1_derivations.q2.mistakes", "no mistakes for a written"),
    ("[ps1_derivations.q1]\ncheck = \"m:f\"\n", "ps1_derivations.q1.check", "no check or names"),
    ("[ps1_derivations.q5]\ntitle = \"t\"\npoints = 1\n", "ps1_derivations.q5", "either rubric"),
    ("[ps1_derivations.q5]\ntitle = \"t\"\npoints = 1\ncheck = \"bayesattn_lite.checks:check_seeds\"\n",
     "ps1_derivations.q5", "both check and names"),
    ("[ps1_derivations.q5]\npoints = 1\nrubric = \"1 pt: x\"\n", "ps1_derivations.q5.title", "a title"),
    ("[ps1_derivations.q5]\ntitle = \"t\"\npoints = 1\ncheck = \"no_such_module:check_x\"\nnames = [\"x\"]\n",
     "ps1_derivations.q5.check", "importable"),
    ("[ps1_derivations.q5]\ntitle = \"t\"\npoints = 1\ncheck = \"bayesattn_lite.checks:check_seeds\"\nnames = []\n",
     "ps1_derivations.q5.names", "a list"),
    ("[ps2_dynamics]\ndeadline = \"2027-02-01\"\n", "ps2_dynamics.deadline", "a TOML date-time with an offset"),
    ("[ps2_dynamics]\ndeadline = 2027-02-01T23:59:00\n", "ps2_dynamics.deadline", "with an offset"),
    ("[ps2_dynamics]\nmode = \"strict\"\n", "ps2_dynamics.mode", "one of ['practice', 'graded']"),
    ("[ps2_dynamics]\nweight = 2\n", "ps2_dynamics.weight", "mode, deadline, variant, extensions or a question"),
    ("[ps2_dynamics]\nvariant = -1\n", "ps2_dynamics.variant", "an integer >= 0"),
    ("[ps2_dynamics]\nvariant = \"abc\"\n", "ps2_dynamics.variant", "an integer >= 0"),
    ("[ps2_dynamics]\nvariant = true\n", "ps2_dynamics.variant", "an integer >= 0"),
    ("[grading]\nx = 1\n", "grading", "[course], [late] or an assignment id"),
])
def test_every_mistake_is_a_value_error_naming_the_file_and_the_key(tmp_path, text, key, expected):
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as error:
        course.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}: {key}: expected") and expected in message, message


@pytest.mark.parametrize("head, key", [
    ("[course]\nmode = \"exam\"\n", "course.mode"),
    ("[course]\nmood = \"graded\"\n", "course.mood"),
    ("[late]\npenalty_per_day = -0.1\n", "late.penalty_per_day"),
    ("[late]\ngrace = 10\n", "late.grace"),
])
def test_course_and_late_tables_are_checked(tmp_path, head, key):
    path = write(tmp_path, "", head=head)
    with pytest.raises(ValueError, match=f"^{path}: {key}: expected"):
        course.load(path)


def test_a_file_that_is_not_toml_or_missing_is_named(tmp_path):
    with pytest.raises(ValueError, match="expected a readable TOML file"):
        course.load(write(tmp_path, "[ps1_derivations\n"))
    with pytest.raises(ValueError, match="no_such.toml: expected a readable TOML file"):
        course.load(tmp_path / "no_such.toml")
    with pytest.raises(ValueError, match="unknown assignment 'ps9'"):
        course.load(write(tmp_path, "")).assignment("ps9")


# ----------------------------------------------------------------------------- the late policy

@pytest.mark.parametrize("after, kept, words", [
    (timedelta(minutes=-30), 1.0, ""),                       # on time
    (timedelta(0), 1.0, ""),                                 # at the deadline
    (timedelta(minutes=10), 1.0, "within the 15-minute grace"),
    (timedelta(minutes=16), 0.9, "1 started day late"),     # one minute past the grace: a started day
    (timedelta(days=1.5), 0.8, "2 started days late"),      # 1.5 days: two started days
    (timedelta(days=5, minutes=15), 0.5, "5 started days late"),
    (timedelta(days=5, minutes=16), 0.0, "more than 5 days: 0 points"),
])
def test_late_policy_arithmetic(tmp_path, after, kept, words):
    c = course.load(write(tmp_path, ""))
    got, note = c.late("ps1_derivations", DEADLINE + after)
    assert got == pytest.approx(kept)
    assert (words in note) if words else note == ""


def test_late_needs_a_deadline_a_time_and_an_offset(tmp_path):
    c = course.load(write(tmp_path, ""))
    assert c.late("ps1_derivations", None) == (1.0, course.NO_TIME)   # a deadline and no time: said, not silent
    assert c.late("ps2_dynamics", DEADLINE + timedelta(days=3)) == (1.0, "")  # no deadline for ps2
    with pytest.raises(ValueError, match="timezone-aware"):
        c.late("ps1_derivations", datetime(2027, 2, 3))


def test_a_students_extension_moves_their_deadline_alone(tmp_path):
    """[<set>.extensions]: one student's own deadline, named by Canvas user id or the start of their file name."""
    c = course.load(write(tmp_path, "[ps1_derivations.extensions]\n\"12345\" = 2027-02-04T23:59:00Z\n"
                                    "leelee = 2027-02-03T23:59:00Z\n"))
    late = DEADLINE + timedelta(days=2)
    assert c.late("ps1_derivations", late, "subs/smithjane_12345_678_ps1.ipynb") == (
        1.0, "an extension to 2027-02-04T23:59:00+00:00 (12345)")
    kept, note = c.late("ps1_derivations", late + timedelta(days=2), "leelee_ps1.ipynb")
    assert kept == pytest.approx(0.8) and "after the extended deadline (leelee): 2 started days late" in note
    assert c.late("ps1_derivations", late, "leeleeson_ps1.ipynb")[0] == pytest.approx(0.8)   # another student
    assert c.late("ps1_derivations", late, "doejohn_23456_679_ps1.ipynb")[0] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="ps1_derivations.extensions.leelee: expected a TOML date-time"):
        course.load(write(tmp_path, "[ps1_derivations.extensions]\nleelee = \"friday\"\n"))


def test_extension_keys_that_name_no_submission_are_found(tmp_path):
    c = course.load(write(tmp_path, "[ps1_derivations.extensions]\n\"12345\" = 2027-02-04T23:59:00Z\n"
                                    "leelee = 2027-02-03T23:59:00Z\nsmithjnae = 2027-02-03T23:59:00Z\n"))
    files = ["subs/smithjane_12345_678_ps1.ipynb", "subs/leelee_ps1.ipynb"]
    assert c.unmatched_extensions("ps1_derivations", files) == ["smithjnae"]
    assert c.unmatched_extensions("ps2_dynamics", files) == []


def test_the_copy_without_extensions_drops_them_and_the_comments_and_keeps_the_rest(tmp_path):
    path = write(tmp_path, '[ps1_derivations.extensions]\nleelee = 2027-02-03T23:59:00Z   # medical\n'
                           '[ps1_derivations.q2]\nrubric = """1 pt: \u00e9\n# not a comment\n1 pt: \\"why\\""""\n')
    text = course.without_extensions(path)
    assert "extensions" not in text and "leelee" not in text and "medical" not in text
    assert course.load(write(tmp_path, text, head="")).assignment("ps1_derivations").questions[1].rubric == \
        '1 pt: \u00e9\n# not a comment\n1 pt: "why"'
    assert course.load(path).deadlines == course.load(write(tmp_path, text, head="")).deadlines


# ----------------------------------------------------------------------------- the points tables

def first_markdown(path):
    return next(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("aid", sorted(ASSIGNMENTS))
def test_committed_points_tables_are_the_configuration(aid):
    expected = assignments.points_table(course.load().assignment(aid))
    for path in (ASSIGNMENTS[aid].instructor_path, ASSIGNMENTS[aid].student_path):
        assert expected in first_markdown(path), (
            f"{path.name}: its points table differs from course.toml: run python -m bayesattn_lite.instructor.assignments")


def test_the_generator_rewrites_a_drifted_table_and_check_mode_sees_it(tmp_path):
    a = ASSIGNMENTS["ps2_dynamics"]
    for name in (a.instructor_path.name, a.student_path.name):
        (tmp_path / name).write_bytes((assignments.FOLDER / name).read_bytes())
    (tmp_path / "course.toml").write_text("[ps2_dynamics.q3]\npoints = 5\n", encoding="utf-8")
    assert assignments.main(["ps2_dynamics", "--folder", str(tmp_path), "--check"]) == 1  # drift
    assert assignments.main(["ps2_dynamics", "--folder", str(tmp_path)]) == 0
    for name in (a.instructor_path.name, a.student_path.name):
        text = first_markdown(tmp_path / name)
        assert "| q3 | the score-space kernel under a temperature | code, checked automatically | 5 |" \
            in text and "| | total | | 12 |" in text
    assert assignments.main(["ps2_dynamics", "--folder", str(tmp_path), "--check"]) == 0


def test_a_notebook_without_a_points_table_is_an_error():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A set\n\nno table")])
    with pytest.raises(ValueError, match="expected a points table"):
        assignments.with_points_table(nb, ASSIGNMENTS["ps1_derivations"])

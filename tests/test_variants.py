"""Class variants (bayesattn_lite.instructor.variants): a private seed picks another form of a question, the
handout is edited into it, its solution passes its check while the published solution does not, and the
grader grades a class in its forms."""

import nbformat
import pytest
import torch

from bayesattn_lite import attention, checks
from bayesattn_lite.instructor import assignments, course, grading, variants
from bayesattn_lite.instructor.assignments import ASSIGNMENTS

ALL_FORMS = [(aid, qid, form) for (aid, qid), forms in variants.FORMS.items() for form in forms[1:]]
CHECKS = {("ps1_derivations", "q1"): ("biased_qk_gradients", checks.check_biased_qk_gradients),
          ("ps2_dynamics", "q3"): ("tempered_score_change", checks.check_tempered_score_change)}


def instructor(aid):
    return nbformat.read(ASSIGNMENTS[aid].instructor_path, as_version=4)


def solution(nb, name):
    """The function ``name`` as the notebook's solution cell defines it."""
    cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {name}(" in c.source)
    namespace = {"torch": torch, "attention": attention}
    exec(cell.source, namespace)  # noqa: S102 - the course's own instructor notebook
    return namespace[name]


def test_a_seed_picks_a_form_other_than_the_published_one_and_every_form_is_reached():
    for aid in ("ps1_derivations", "ps2_dynamics"):
        chosen = [variants.choose(aid, seed) for seed in range(20)]
        assert chosen == [variants.choose(aid, seed) for seed in range(20)]  # the same seed, the same forms
        for (a, qid), forms in variants.FORMS.items():
            if a == aid:
                assert {c[qid] for c in chosen} == set(forms[1:])
    assert variants.choose("ps3_experiment", 5) == {}  # no question with forms: the published set
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="an integer >= 0"):
            variants.choose("ps1_derivations", bad)


@pytest.mark.parametrize("aid, qid, form", ALL_FORMS)
def test_each_form_edits_the_handout_and_its_solution_passes_while_the_published_one_does_not(aid, qid, form):
    published = instructor(aid)
    edited = variants.handout(published, aid, {qid: form})  # every edit matched exactly once, or it raised
    assert edited.metadata["bayesattn_lite"]["variant"] == {qid: form}
    assert "variant" not in published.metadata["bayesattn_lite"]  # a copy: the published notebook is untouched
    name, check = CHECKS[(aid, qid)]
    check_cell = next(c.source for c in edited.cells if c.source.startswith(f"checks.{check.__name__}("))
    assert f'form="{form}"' in check_cell
    assert check(solution(edited, name), form=form).passed
    copied = check(solution(published, name), form=form)
    assert not copied.passed and copied.mistakes, copied.message  # named as the form's mistake
    assert check(solution(published, name)).passed and not check(solution(edited, name)).passed


def test_an_edit_that_no_longer_matches_is_an_error_naming_it():
    nb = instructor("ps2_dynamics")
    for cell in nb.cells:
        cell.source = cell.source.replace("scale = tau * q.shape[1] ** 0.5", "scale = tau * q.shape[-1] ** 0.5")
    with pytest.raises(ValueError, match="expected the text .* once .* found it 0 times"):
        variants.handout(nb, "ps2_dynamics", {"q3": "mup"})


def private_course(tmp_path, seed=3):
    path = tmp_path / "private.toml"
    path.write_text("[ps1_derivations]\nvariant = %d\n[ps2_dynamics]\nvariant = %d\n" % (seed, seed), encoding="utf-8")
    return path


def test_the_generator_writes_a_class_variant_to_its_own_folder_only(tmp_path, capsys):
    private = private_course(tmp_path)
    forms = course.load(private).assignment("ps2_dynamics")
    expected = {q.id: q.form for q in forms.questions if q.form}
    assert expected == variants.choose("ps2_dynamics", 3)
    with pytest.raises(SystemExit):  # never over the published notebooks
        assignments.main(["ps2_dynamics", "--course", str(private)])
    assert "write it with --out DIR" in capsys.readouterr().err
    out = tmp_path / "class"
    assert assignments.main(["ps2_dynamics", "--course", str(private), "--out", str(out)]) == 0
    student = nbformat.read(out / "ps2_dynamics_student.ipynb", as_version=4)
    assert variants.recorded(student) == expected
    assert not any("BEGIN SOLUTION" in c.source for c in student.cells)
    assert any(f'form="{expected["q3"]}"' in c.source for c in student.cells)
    teacher = nbformat.read(out / "ps2_dynamics.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in teacher.cells if c.cell_type == "code")  # no published outputs
    assert assignments.main(["--check"]) == 0  # the published notebooks are as committed


def test_the_grader_grades_a_class_in_its_forms(tmp_path):
    private = private_course(tmp_path)
    out = tmp_path / "class"
    assignments.main(["--course", str(private), "--out", str(out)])
    class_course = course.load(private)
    assert grading.handout_mismatch(class_course, out) == ""
    said = grading.handout_mismatch(class_course, assignments.FOLDER)
    assert "grade with --folder DIR" in said and "pass the class's course file with --course FILE" in said
    assert "handed out with the published questions" in said and "{" not in said   # in words, not a dict
    a = ASSIGNMENTS["ps2_dynamics"]
    form = variants.choose("ps2_dynamics", 3)["q3"]
    reports = {}
    for label, folder in (("variant", out), ("published", assignments.FOLDER)):
        nb = assignments.solved_submission(a, folder)
        reports[label] = grading.grade(nbformat.writes(nb).encode(), name=f"{label}.ipynb", sandboxed=False,
                                       course=class_course, folder=out)
    right, copied = reports["variant"], reports["published"]
    assert right["variant"] == {"q3": form} and right["problems"] == []
    assert right["score"] == right["automatic_max"] == 6
    q3 = next(q for q in copied["questions"] if q["id"] == "q3")
    assert q3["points"] == 0 and q3["mistakes"], q3
    assert any("not with your class's q3 in the form" in p for p in copied["problems"])  # handed out in the published form
    # merging manual points or releasing feedback grades nothing: no --folder needed for the class's forms
    from bayesattn_lite.instructor import release
    reports = tmp_path / "reports"
    right["report"] = str(reports / "variant.json")
    release.write_report(right, reports / "variant.json")
    assert grading.main(["--reports", str(reports), "--course", str(private), "--csv", str(tmp_path / "g.csv")]) == 0


def test_a_gradescope_bundle_carries_the_class_handout(tmp_path):
    """The bundle ships this course's handout and grades with --folder on it: a class variant's forms are
    the handout's, so the grader on Gradescope neither refuses the variant nor misreads its given cells."""
    import zipfile

    from bayesattn_lite.instructor import lms
    private = private_course(tmp_path)
    bundle = lms.gradescope_bundle(tmp_path / "autograder.zip", "ps2_dynamics", course_file=private)
    source = tmp_path / "source"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(source)
    handout = nbformat.read(source / "handout" / "ps2_dynamics_student.ipynb", as_version=4)
    class_course = course.load(private)
    assert variants.recorded(handout) == grading.class_forms(class_course.assignment("ps2_dynamics")) != {}
    assert grading.handout_mismatch(class_course, source / "handout") == ""
    assert '--folder "$ROOT/source/handout"' in (source / "run_autograder").read_text()
    # from the class's own folder (the generator's --out), as instructors.md says: the forms are not applied twice
    out = tmp_path / "class"
    assignments.main(["ps2_dynamics", "--course", str(private), "--out", str(out)])
    again = lms.gradescope_bundle(tmp_path / "again.zip", "ps2_dynamics", course_file=private, folder=out)
    with zipfile.ZipFile(again) as z:
        assert z.read("handout/ps2_dynamics_student.ipynb") == (source / "handout" / "ps2_dynamics_student.ipynb").read_bytes()

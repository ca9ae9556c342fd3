"""One configuration file per course: points, partial credit, added questions, deadlines, late policy, mode.

    from bayesattn_lite.instructor import course
    c = course.load()                      # book/assignments/course.toml (absent: the registry's defaults)
    c.assignment("ps1_derivations")        # an assignments.Assignment with the course's points and questions
    c.mode("ps1_derivations")              # "graded" (feedback names the mistake, never the formula) or "practice"
    c.late("ps1_derivations", submitted)   # (fraction of the score kept, a note for the report)

The file is TOML (``book/assignments/course.toml`` documents every key). The registry
(``assignments.ASSIGNMENTS``) says which questions a problem set has and how each is checked; the file
says what they are worth. Every mistake in it is a ValueError naming the file, the key and what was expected.
"""

import dataclasses
import importlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from pathlib import Path

from . import assignments, variants

MODES = ("practice", "graded")
_QUESTION_KEYS = ("title", "points", "per_output", "mistakes", "rubric", "check", "names")
_LATE_KEYS = ("grace_minutes", "penalty_per_day", "max_days")


@dataclass(frozen=True)
class LatePolicy:
    grace_minutes: float = 0.0
    penalty_per_day: float = 0.0  # fraction of the score lost per started day after deadline + grace
    max_days: float = math.inf    # later than this many days: nothing kept


@dataclass(frozen=True)
class Course:
    path: "Path | None"  # None: the registry's defaults, no file
    default_mode: str = "practice"
    late_policy: LatePolicy = LatePolicy()
    assignments: dict = field(default_factory=dict)  # id -> configured assignments.Assignment
    modes: dict = field(default_factory=dict)        # id -> a per-assignment mode
    deadlines: dict = field(default_factory=dict)    # id -> timezone-aware datetime
    extensions: dict = field(default_factory=dict)   # id -> {student: their own timezone-aware deadline}
    variants: dict = field(default_factory=dict)     # id -> the class variant's private seed (variants.py)

    def assignment(self, aid):
        """The problem set ``aid`` with the course's points, titles and partial credit, its added questions last."""
        if aid not in self.assignments:
            raise ValueError(f"unknown assignment {aid!r}: expected one of {sorted(self.assignments)}")
        return self.assignments[aid]

    def mode(self, aid):
        self.assignment(aid)  # an unknown id fails here too, not silently as "practice"
        return self.modes.get(aid, self.default_mode)

    def deadline(self, aid, submission=None):
        """The set's deadline, or the extension of the student whose file ``submission`` is (``extension``)."""
        self.assignment(aid)
        student = self.extension(aid, submission)
        return self.extensions[aid][student] if student else self.deadlines.get(aid)

    def extension(self, aid, submission):
        """The key of ``[<aid>.extensions]`` that names the student of the file ``submission``, or None: a
        Canvas user id (``smithjane_12345_...``'s 12345) or the start of the file's name (``smithjane``)."""
        name = Path(str(submission or "")).name
        return next((k for k in self.extensions.get(aid, {}) if _names_student(k, name)), None)

    def unmatched_extensions(self, aid, submissions):
        """The keys of ``[<aid>.extensions]`` that name the student of none of the files ``submissions``: a
        mistyped id or name would otherwise leave that student's extension unapplied without a word."""
        names = [Path(str(s)).name for s in submissions]
        return [k for k in self.extensions.get(aid, {}) if not any(_names_student(k, n) for n in names)]

    def late(self, aid, submitted, submission=None):
        """(fraction of the score kept, a note) for a submission handed in at ``submitted``; (1.0, "") with no
        deadline; with a deadline and no submission time, 1.0 and a note that the policy was not applied.
        Each started day after deadline + grace costs ``penalty_per_day``. ``submission``: the file's name,
        for a student's extension."""
        deadline = self.deadline(aid, submission)
        extended = self.extension(aid, submission)
        if deadline is None:
            return 1.0, ""
        if submitted is None:   # never silently on time: the instructor forgot the times, or has none
            return 1.0, NO_TIME
        if not isinstance(submitted, datetime) or submitted.tzinfo is None:
            raise ValueError(f"submitted: expected a timezone-aware datetime, got {submitted!r}")
        what = f"the extended deadline ({extended})" if extended else "the deadline"
        policy = self.late_policy
        after = submitted - deadline
        if after <= timedelta(0):
            return 1.0, f"an extension to {deadline.isoformat()} ({extended})" if extended else ""
        late_by = after - timedelta(minutes=policy.grace_minutes)
        if late_by <= timedelta(0):
            return 1.0, (f"handed in {_duration(after)} after {what}, within the "
                         f"{policy.grace_minutes:g}-minute grace: no penalty")
        days = math.ceil(late_by / timedelta(days=1))  # a started day counts whole
        if days > policy.max_days:
            return 0.0, f"handed in {_duration(after)} after {what}, more than {policy.max_days:g} days: 0 points"
        kept = max(0.0, 1.0 - policy.penalty_per_day * days)
        return kept, (f"handed in {_duration(after)} after {what}: {days} started day{'s' * (days > 1)} late, "
                      f"{kept:.0%} of the score kept")


def _names_student(key, name):
    """Whether the extension ``key`` names the student of the file ``name``: their Canvas user id (a field of
    ``login_[LATE_]userid_...``) or the start of the file's name."""
    parts = name.split("_")
    return bool(name) and (key in parts[1:3] or re.match(re.escape(key) + r"([_.-]|$)", name) is not None)


NO_TIME = ("the late policy was not applied: no submission time was given (grade with --submitted-times "
           "FILE.csv or --late-from-mtime)")


def _duration(delta):
    minutes = round(delta.total_seconds() / 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{minutes} min"] * bool(minutes)
    return " ".join(parts) or "0 min"


def defaults():
    """The course the registry describes: its points, no partial credit, no deadlines, practice mode."""
    return Course(None, assignments=dict(assignments.ASSIGNMENTS))


def load(path=None):
    """The course of the TOML file ``path`` (default ``book/assignments/course.toml``; when that default is
    absent, ``defaults()``). ValueError for a file that is missing, unreadable or wrong in any key."""
    if path is None:
        path = assignments.FOLDER / "course.toml"
        if not path.exists():
            return defaults()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: expected a readable TOML file: {exc}") from exc
    return _Reader(path).course(data)


def without_extensions(path):
    """The course file ``path`` as TOML text without its ``[<set>.extensions]`` tables and without comments
    (students' ids, and notes such as "# medical", stay with the instructor): the same configuration
    otherwise, written anew from the parsed file. ValueError as ``load`` for a file it cannot read."""
    load(path)   # a mistake in the file is said as load says it
    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    for table in data.values():
        if isinstance(table, dict):
            table.pop("extensions", None)
    text = _toml_tables(data).lstrip("\n")
    if tomllib.loads(text) != data:   # written by hand below: never ship a configuration that reads otherwise
        raise ValueError(f"{path}: its copy without extensions does not read back the same: ship it by hand")
    return text


def _toml_tables(data, prefix=()):
    """``data`` (a parsed TOML document) as TOML text: its values, then each table under its full name."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    text = "".join(line + "\n" for line in lines)
    for k, v in data.items():
        if isinstance(v, dict):
            name = ".".join(_toml_key(x) for x in (*prefix, k))
            text += f"\n[{name}]\n" + _toml_tables(v, (*prefix, k))
    return text


def _toml_key(key):
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_string(text):
    # JSON's escapes are TOML's, but for DEL, which TOML wants escaped (and, ensure_ascii off, no surrogate halves)
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ValueError(f"expected a TOML value, got {value!r}")


class _Reader:
    """Reads the parsed TOML, each error naming the file and the key."""

    def __init__(self, path):
        self.path = path

    def fail(self, key, expected, got):
        raise ValueError(f"{self.path}: {key}: expected {expected}, got {got!r}")

    def number(self, key, value, low=0.0):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
            self.fail(key, f"a number >= {low:g}", value)
        return value

    def known(self, key, table, allowed):
        if not isinstance(table, dict):
            self.fail(key, "a table", table)
        for k in table:
            if k not in allowed:
                self.fail(f"{key}.{k}", f"one of the keys {list(allowed)}", k)

    def mode(self, key, value):
        if value not in MODES:
            self.fail(key, f"one of {list(MODES)}", value)
        return value

    def course(self, data):
        unknown = [k for k in data if k not in ("course", "late", *assignments.ASSIGNMENTS)]
        if unknown:
            self.fail(unknown[0], f"[course], [late] or an assignment id of {sorted(assignments.ASSIGNMENTS)}",
                      unknown[0])
        head = data.get("course", {})
        self.known("course", head, ("mode",))
        late = data.get("late", {})
        self.known("late", late, _LATE_KEYS)
        policy = LatePolicy(**{k: self.number(f"late.{k}", v) for k, v in late.items()})
        course = Course(self.path, self.mode("course.mode", head.get("mode", "practice")), policy,
                        dict(assignments.ASSIGNMENTS))
        for aid, table in data.items():
            if aid in assignments.ASSIGNMENTS:
                self.assignment(course, aid, table)
        return course

    def assignment(self, course, aid, table):
        if not isinstance(table, dict):
            self.fail(aid, "a table", table)
        registry = course.assignments[aid]
        questions = {q.id: q for q in registry.questions}
        for key, value in table.items():
            if key == "mode":
                course.modes[aid] = self.mode(f"{aid}.mode", value)
            elif key == "deadline":
                course.deadlines[aid] = self.deadline(f"{aid}.deadline", value)
            elif key == "extensions":   # one student's own deadline: [ps1_derivations.extensions] smithjane = ...
                if not isinstance(value, dict) or not value:
                    self.fail(f"{aid}.extensions", "a table of student = deadline (a Canvas user id or the start "
                              "of the student's file name)", value)
                course.extensions[aid] = {self.student(f"{aid}.extensions", k): self.deadline(f"{aid}.extensions.{k}", v)
                                          for k, v in value.items()}
            elif key == "variant":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    self.fail(f"{aid}.variant", "an integer >= 0, the class variant's seed (keep it private)", value)
                course.variants[aid] = value
            elif isinstance(value, dict):
                questions[key] = self.question(f"{aid}.{key}", key, questions.get(key), value)
            else:
                self.fail(f"{aid}.{key}", "mode, deadline, variant, extensions or a question's table [" + aid + ".<question>]",
                          value)
        forms = variants.choose(aid, course.variants[aid]) if aid in course.variants else {}
        questions = {qid: dataclasses.replace(q, form=forms.get(qid, q.form)) for qid, q in questions.items()}
        course.assignments[aid] = dataclasses.replace(registry, questions=tuple(questions.values()))

    def student(self, key, value):
        if not value.strip() or "/" in value or value != value.strip():
            self.fail(key, "a student's Canvas user id or the start of their file name", value)
        return value

    def deadline(self, key, value):
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value
        if isinstance(value, (datetime, date, time)):
            self.fail(key, "a TOML date-time with an offset (2027-02-01T23:59:00Z)", value)
        self.fail(key, "a TOML date-time with an offset, unquoted (2027-02-01T23:59:00Z)", value)

    def question(self, key, qid, question, table):
        """The registry's ``question`` with the table's values, or a new question (``question`` None)."""
        self.known(key, table, _QUESTION_KEYS)
        new = {}
        if "title" in table:
            if not isinstance(table["title"], str) or not table["title"].strip():
                self.fail(f"{key}.title", "a non-empty string", table["title"])
            new["title"] = table["title"]
        if "points" in table:
            new["points"] = self.number(f"{key}.points", table["points"])
        if "per_output" in table:
            if not isinstance(table["per_output"], bool):
                self.fail(f"{key}.per_output", "true or false", table["per_output"])
            new["per_output"] = table["per_output"]
        if "rubric" in table:
            if not isinstance(table["rubric"], str) or not table["rubric"].strip():
                self.fail(f"{key}.rubric", "the criteria of a written answer, a non-empty string", table["rubric"])
            new["rubric"] = table["rubric"]
        if question is None:
            question = self.added(key, qid, table, new)
        elif "check" in table or "names" in table:
            self.fail(f"{key}.check", "no check or names for a question of the package (add a new question id "
                      "instead)", table.get("check", table.get("names")))
        points = new.get("points", question.points)
        if "mistakes" in table:
            new["mistakes"] = self.mistakes(f"{key}.mistakes", table["mistakes"], question, points)
        question = dataclasses.replace(question, **new)
        if question.written and (question.per_output or question.mistakes or not question.rubric):
            self.fail(key, "a written question with a rubric and neither per_output nor mistakes",
                      {k: table[k] for k in table if k in ("per_output", "mistakes", "rubric")})
        if question.per_output and _outputs(question.check) == 1:
            self.fail(f"{key}.per_output", f"false: {question.check.__name__} checks a single output", True)
        return question

    def added(self, key, qid, table, new):
        """A question the instructor adds: written (``rubric``) or checked (``check`` and ``names``)."""
        for needed in ("title", "points"):
            if needed not in new:
                self.fail(f"{key}.{needed}", f"a {needed} for the added question {qid}", None)
        if "rubric" in table and not {"check", "names"} & set(table):
            return assignments.Question(qid, new["title"], new["points"], None, (), new["rubric"])
        if "rubric" in table or not {"check", "names"} <= set(table):
            self.fail(key, "either rubric (a written answer) or both check and names (a checked one)", sorted(table))
        names = table["names"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n.isidentifier() for n in names):
            self.fail(f"{key}.names", "a list of the notebook's names the check is called with", names)
        return assignments.Question(qid, new["title"], new["points"], self.check(f"{key}.check", table["check"]),
                                    tuple(names))

    def check(self, key, spec):
        """The function ``"module:function"`` names, imported in this (the grader's) environment."""
        if not isinstance(spec, str) or spec.count(":") != 1:
            self.fail(key, '"module:function", a check importable where the grader runs', spec)
        module, name = spec.split(":")
        try:
            fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{self.path}: {key}: expected a check importable where the grader runs, "
                             f"got {spec!r} ({type(exc).__name__}: {exc})") from exc
        if not callable(fn):
            self.fail(key, "a callable check", spec)
        return fn

    def mistakes(self, key, table, question, points):
        if question.written:
            self.fail(key, "no mistakes for a written question (its rubric gives partial points)", table)
        if not isinstance(table, dict):
            self.fail(key, "a table { knob = points }", table)
        knobs = _knobs(question.check)
        pairs = []
        for knob, value in table.items():
            if knobs is not None and knob not in knobs:
                self.fail(f"{key}.{knob}", f"a mistake {question.check.__name__} names, one of {sorted(knobs)}", knob)
            if self.number(f"{key}.{knob}", value) > points:
                self.fail(f"{key}.{knob}", f"at most the question's {points:g} points", value)
            pairs.append((knob, float(value)))
        return tuple(pairs)


# ----------------------------------------------------------------------------- what a check can name

def _problem_set_checks():
    """check name -> (the Flaw knobs it names, how many outputs it checks), for the package's problem-set
    checks; the knowledge lives in checks/problem_sets.py, read here so the two cannot drift."""
    from ..checks import problem_sets as ps
    table = {}
    for name, spec, forms in (("check_biased_qk_gradients", "_biased_spec", "BIASED_FORMS"),
                              ("check_second_order_attention_change", "_second_order_spec", None),
                              ("check_tempered_score_change", "_tempered_spec", "TEMPERED_FORMS")):
        try:  # a class variant names its mistakes relative to its form: the knobs of every form count
            specs = [getattr(ps, spec)(form) for form in getattr(ps, forms)] if forms else [getattr(ps, spec)()]
        except Exception:  # noqa: BLE001 - the checks changed shape: we cannot tell, so we do not check
            continue
        table[name] = ({flaw.knob for sp in specs for out in sp.outputs for flaw in out.flaws},
                       len(specs[0].outputs))
    if hasattr(ps, "_FLOOR_FLAWS"):
        table["check_markov_floors"] = ({flaw[0] for flaw in ps._FLOOR_FLAWS}, 2)
    table["check_value_update_basis"] = (set(), 1)
    return table


def _known(check):
    if getattr(check, "__module__", "") != "bayesattn_lite.checks.problem_sets":
        return None  # an instructor's own check: we cannot tell
    return _problem_set_checks().get(check.__name__)


def _knobs(check):
    """The named mistakes ``check`` can report, or None when we cannot tell."""
    known = _known(check)
    return None if known is None else known[0]


def _outputs(check):
    """How many outputs ``check`` checks, or None when we cannot tell."""
    known = _known(check)
    return None if known is None else known[1]

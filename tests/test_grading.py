"""The autograder against the submissions a clever student might hand in.

One batch (``python -m bayesattn_lite.instructor.grading DIR --csv``) grades, in a subprocess, the untouched
student version of problem set 1, a correct submission, broken ones and one submission per cheat of
issue 15; every cheat must score no more than the untouched student version. The grader runs from a
copy of the package and of the instructor folder (files mode 600) in a temporary folder, so a cheat
that manages to write "the package on disk" could only change that copy, never the repository.

The single-submission command, the instructor self-test and files that are not notebooks are
tested on their own. Every kernel runs in a bubblewrap sandbox (user, mount, PID and network
namespaces), as root with a user id of its own; run the file with BAYESATTN_GRADER_NO_ROOT=1 to test
the plain-user mode, which must hold the same attacks.
"""

import contextlib
import csv
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from multiprocessing.connection import Connection
from pathlib import Path

import nbformat
import pytest

from bayesattn_lite.instructor import _sandbox, assignments, grading, release
from bayesattn_lite.instructor.assignments import ASSIGNMENTS

PS1 = ASSIGNMENTS["ps1_derivations"]
PACKAGE = grading.PACKAGE_DIR  # bayesattn_lite/
ROOT = _sandbox.privileged()  # as root the sandbox also gets a user id of its own
SITE_PACKAGES = Path(nbformat.__file__).resolve().parent.parent  # the grader's Python, where a .pth would run


def _require_sandbox():
    """Skip a test that grades in the sandbox where bubblewrap cannot start (saying why), unless
    BAYESATTN_REQUIRE_SANDBOX=1 (CI), where the grader's refusal then fails the test."""
    try:
        _sandbox.check_sandbox()
    except _sandbox.SandboxUnavailable as exc:
        if os.environ.get("BAYESATTN_REQUIRE_SANDBOX") != "1":
            pytest.skip(f"the grader's sandbox cannot start here: {exc}")
TOKEN = f"bal-test-{os.getpid()}-{int(time.time())}"  # in the command line of a cheat's background process
TIMEOUT, NOTEBOOK_TIMEOUT, MAX_OUTPUT = 15, 60, 16  # generous: the test machine may be busy  # seconds per cell, per submission; MiB of output


# ----------------------------------------------------------------------------- submissions

def _student(assignment=PS1):
    return nbformat.read(assignment.student_path, as_version=4)


def _solved(assignment=PS1):
    """A correct submission: the instructor version as a student hands it in."""
    return assignments.solved_submission(assignment)


def _plus(nb, source, at=None):
    """``nb`` with one more code cell (at the end, after every question, unless ``at``)."""
    cell = nbformat.v4.new_code_cell(source)
    nb.cells.insert(len(nb.cells) if at is None else at, cell)
    return nb


ALWAYS_PASS = """
import bayesattn_lite.checks as _c
for _n in dir(_c):
    if _n.startswith("check_"):
        setattr(_c, _n, lambda *a, _n=_n: _c.CheckResult(_n, True, "matches the reference on 5 random inputs."))
"""

CHEATS = {
    # the grader's in-kernel check function (the old design), and every check, replaced
    "c_replace_check": ALWAYS_PASS + """
import bayesattn_lite.instructor.grading as _g
_g._kernel_check = lambda marker, qid, *a: print(marker + '{"id": "%s", "passed": true, "feedback": "ok"}' % qid)
""",
    # a hook that prints pass lines after every execution, the checks' included
    "c_post_run_cell": """
import json
def _hook(*args):
    for q in ("q1", "q2", "q3", "q4", "q5", "q6"):
        print("@@grade-0123456789abcdef@@" + json.dumps({"id": q, "passed": True, "feedback": "ok"}))
        print(f"✅ {q}: matches the reference on 5 random inputs.")
get_ipython().events.register("post_run_cell", _hook)
get_ipython().events.register("post_execute", _hook)
""",
    # reloading the checks made harmless first
    "c_reload_disabled": "import importlib\nimportlib.reload = lambda module: module\n" + ALWAYS_PASS,
    # a tensor whose allclose is always true
    "c_tensor_subclass": """
import torch
class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "isclose", "equal"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})
def biased_qk_gradients(q, k, *rest):
    return torch.zeros_like(q).as_subclass(Liar), torch.zeros_like(k).as_subclass(Liar)
def value_update_basis(W_O):
    return torch.zeros(W_O.shape[1], W_O.shape[0] - 1, dtype=W_O.dtype).as_subclass(Liar)
""",
}


CHEATS["c_check_internals"] = """
from bayesattn_lite.checks import problem_sets as _p
def biased_qk_gradients(q, k, v, u, tau, slope):  # the check's own reference, called from the notebook
    spec = _p._biased_spec()
    inputs = dict(zip(spec.signature, (q, k, v, u, tau, slope)))
    return tuple(o.compute(inputs) for o in spec.outputs)
"""


def _instructor_cheat(paths):
    """Run the solution cells of the instructor notebook: at the path the package gives, and ``paths``."""
    return f"""
import json
_paths = {paths!r}
try:  # the kernel's copy of the package has no instructor subpackage: this should fail
    from bayesattn_lite.instructor import assignments as _a
    _paths.insert(0, str(_a.ASSIGNMENTS["ps1_derivations"].instructor_path))
except ImportError as exc:
    print("no instructor subpackage:", exc)
for _p in _paths:
    try:
        _nb = json.load(open(_p))
    except OSError as exc:
        print("cannot read", _p, exc)
        continue
    for _cell in _nb["cells"]:
        if _cell["cell_type"] == "code" and "solution" in _cell["metadata"].get("tags", []):
            exec("".join(_cell["source"]), globals())
"""


def _background_cheat(report, csv_path):
    """A process that detaches (new session, parent gone) and keeps rewriting the report and the CSV."""
    loop = (f"import sys, time\nfor _ in range(1200):\n    for p in ({str(report)!r}, {str(csv_path)!r}):\n"
            "        try:\n            open(p, 'w').write('{\"score\": 10}')\n        except OSError:\n"
            "            pass\n    time.sleep(0.1)\n")
    return f"""
import subprocess, sys
subprocess.Popen(["sh", "-c", 'setsid "$0" -c "$1" "$2" </dev/null >/dev/null 2>&1 &',
                  sys.executable, {loop!r}, {TOKEN!r}])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)", {TOKEN!r}], start_new_session=True)
"""


def _classmate_cheat(classmate):
    """Run a classmate's notebook (from the submissions folder) and read what the grader's processes
    and the machine would tell: every path that worked is printed, none should."""
    return f"""
import json, os
for _p in ({str(classmate)!r}, "/proc/1/cmdline", "/etc/shadow", "/root/.bash_history"):
    try:
        _text = open(_p, "rb").read()
        print("read", _p, len(_text))
    except OSError as exc:
        print("cannot read", _p, type(exc).__name__)
try:
    for _cell in json.load(open({str(classmate)!r}))["cells"]:
        if _cell["cell_type"] == "code":
            exec("".join(_cell["source"]), globals())
except OSError:
    pass
"""


# a detached process with a name that is not UTF-8 (it once made the clean-up fail before it killed anything)
ODD_NAME = '''
import ctypes, subprocess, sys
code = "import ctypes, time\\nctypes.CDLL(None).prctl(15, b'\\\\xff\\\\xfe odd', 0, 0, 0)\\ntime.sleep(1000)"
subprocess.Popen([sys.executable, "-c", code, TOKEN], start_new_session=True)
'''


def _reference_cheat(folders):
    """Read the real checks (the engine and the problem sets' references) from the checkout's checks/
    folder or the grader's copy, load them as the package's modules, and answer question 1 with its
    reference: it must find no such files to read."""
    return f"""
import sys, types
_sources = None
for _folder in {[str(f) for f in folders]!r}:
    try:
        _sources = {{_m: open(_folder + "/" + _m + ".py").read() for _m in ("_engine", "problem_sets")}}
        break
    except OSError:
        pass
if _sources:
    import bayesattn_lite.checks
    for _m, _src in _sources.items():
        _module = types.ModuleType("bayesattn_lite.checks." + _m)
        _module.__package__ = "bayesattn_lite.checks"
        sys.modules[_module.__name__] = _module
        exec(compile(_src, _m + ".py", "exec"), _module.__dict__)
    def biased_qk_gradients(q, k, v, u, tau, slope):
        spec = sys.modules["bayesattn_lite.checks.problem_sets"]._biased_spec()
        inputs = dict(zip(spec.signature, (q, k, v, u, tau, slope)))
        return tuple(o.compute(inputs) for o in spec.outputs)
"""


def _planting_cheat(victim, site_packages):
    """Links in the kernel's folders to a folder of the grader's (a clean-up that followed them would
    chmod its files), and a .pth file dropped into the grader's Python (it would run in the grader)."""
    return f"""
import os, tempfile
for _where in (os.path.expanduser("~"), tempfile.gettempdir()):
    for _n, _target in enumerate(({str(victim)!r}, {str(victim / "secret.txt")!r})):
        try:
            os.symlink(_target, os.path.join(_where, f"link{{_n}}"))
        except OSError:
            pass
try:
    open(os.path.join({str(site_packages)!r}, "zz_bal_cheat.pth"), "w").write("import os\\n")
except OSError as exc:
    print("cannot write", exc)
"""


SIGSTOP_ALL = """
import os, signal
_stopped = []
for _pid in range(1, 65536):
    if _pid != os.getpid():
        try:
            os.kill(_pid, signal.SIGSTOP)
            _stopped.append(_pid)
        except OSError:
            pass
print("stopped", _stopped)
"""


# problem set 3's experiment answered with a table of made-up numbers read back by a lookup
PS3_TABLE = """
results = {"transformer": {0: 0.11, 1: 0.12, 2: 0.13}, "lstm": {0: 0.31, 1: 0.32, 2: 0.33}}
def run_condition(condition, seed):
    return results[condition][seed]
"""

# ----------------------------------------------------------------------------- issue 35: bounds by construction

GRADER_MEMORY = 1024  # MiB for the batch's grading workers (a problem set 1 submission needs about 300)

# a folder tree deeper than a recursive clean-up goes, with a folder of mode 000 and a link out, in
# the kernel's home and /tmp
DEEP_TREE = """
import os
for _top in (os.path.expanduser("~"), "/tmp"):
    _fd = os.open(_top, os.O_RDONLY)
    for _i in range(3000):
        os.mkdir("d", dir_fd=_fd)
        _next = os.open("d", os.O_RDONLY, dir_fd=_fd)
        os.close(_fd)
        _fd = _next
    os.symlink("/", "root-link", dir_fd=_fd)
    os.mkdir("locked", dir_fd=_fd)
    os.chmod("locked", 0, dir_fd=_fd)
    os.close(_fd)
"""

# fill every place the kernel may write until the file system says no
FILL_SCRATCH = """
_block = b"x" * 2 ** 20
for _where in ("/tmp", "/var/tmp", "/dev/shm", ".."):
    try:
        with open(_where + "/fill", "wb") as _f:
            for _ in range(100_000):
                _f.write(_block)
    except OSError:
        pass
"""

# one IOPub message of many frames, each under the per-frame cap
FRAMES = """
_k = get_ipython().kernel
_k.session.send(_k.iopub_socket, "stream", {{"name": "stdout", "text": ""}}, buffers=[b"x" * 3 * 2 ** 20] * {count})
"""

# processes that spin while the next submission's kernel starts
SPIN = """
import subprocess, sys, time
_spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(8)]
time.sleep(10)
"""

HOSTILE = ["h_other_assignment", "h_deep_tree", "h_fill_scratch", "h_frames", "h_frames_worker", "h_spin",
           "h_source_number", "h_metadata_flood", "h_link", "h_fifo"]


def _edit_checks_cheat(grader_checks):
    """Append an always-passing check to the checks' __init__.py: the kernel's copy and the grader's."""
    return f"""
import bayesattn_lite.checks as _c
for _p in [_c.__file__, {str(grader_checks)!r}]:
    try:
        with open(_p, "a") as _f:
            _f.write("\\ndef check_biased_qk_gradients(fn):\\n    return CheckResult('x', True, 'ok')\\n")
        print("wrote", _p)
    except OSError as exc:
        print("cannot write", _p, exc)
"""


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the package and of the instructor folder (files mode 600) for the grader to run from."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(PACKAGE, root / "bayesattn_lite", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(assignments.FOLDER, root / "book" / "assignments")
    for path in (root / "book" / "assignments").iterdir():
        path.chmod(0o600)
    return root


def _digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def batch(course, tmp_path_factory):
    """Grade the folder of submissions once; every test below reads its reports and CSV."""
    _require_sandbox()
    work = tmp_path_factory.mktemp("batch")
    subs, reports, csv_path = work / "submissions", work / "reports", work / "grades.csv"
    subs.mkdir()
    folder = course / "book" / "assignments"
    grader_checks = course / "bayesattn_lite" / "checks" / "__init__.py"
    victim = work / "victim"  # a folder of the grader's that no clean-up may touch
    victim.mkdir(mode=0o750)
    (victim / "secret.txt").write_text("the grader's\n")
    (victim / "secret.txt").chmod(0o600)
    wanted = {
        "a_student": _student(),
        "b_instructor": nbformat.read(PS1.instructor_path, as_version=4),
        "c_instructor_solution": _plus(_student(), _instructor_cheat([str(folder / "ps1_derivations.ipynb")]
                                                                     if ROOT else [])),
        "c_background": _plus(_student(), _background_cheat(reports / "c_background.json", csv_path)),
        "c_edit_checks": _plus(_student(), _edit_checks_cheat(grader_checks)),
        "c_sigint": _plus(_student(), "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                      "while True:\n    pass"),
        "c_output_lines": _plus(_student(), "for _ in range(300):\n    print('x' * 2 ** 20)"),
        "c_classmate": _plus(_student(), _classmate_cheat(subs / "z_good.ipynb")),
        "c_odd_name": _plus(_student(), ODD_NAME.replace("TOKEN", repr(TOKEN))),
        "c_read_reference": _plus(_student(), _reference_cheat([PACKAGE / "checks", grader_checks.parent])),
        "c_planted_links": _plus(_student(), _planting_cheat(victim, SITE_PACKAGES)),
        # issue 35: what per-process limits and patched checks let through
        "h_other_assignment": _plus(_student(ASSIGNMENTS["ps3_experiment"]), PS3_TABLE),  # graded as PS1 all the same
        "h_deep_tree": _plus(_student(), DEEP_TREE),
        "h_fill_scratch": _plus(_student(), FILL_SCRATCH),
        "h_frames": _plus(_student(), FRAMES.format(count=14)),  # 42 MiB in one message of small frames
        "h_frames_worker": _plus(_student(), FRAMES.format(count=600)),  # 1.8 GiB: over the worker's memory
        "h_spin": _plus(_student(), SPIN),
        "h_spin_z_next": _solved(),  # its kernel started while h_spin's processes spun
        "c_fill_tmp": _plus(_student(), "for _i in range(64):\n    open(f'/tmp/fill{_i}', 'wb').write(bytes(2 ** 20))"),
        # every process the kernel can name, stopped (as a plain user it once could SIGSTOP the grader)
        "c_sigstop": _plus(_student(), SIGSTOP_ALL),
        "d_dies": _plus(_solved(), "import os\nos._exit(1)", at=3),
        "d_loop": _plus(_plus(_solved(), "while True:\n    pass", at=3), "big = bytearray(8 * 2 ** 30)", at=3),
        "z_good": _solved(),  # graded after the cheats: a later student is not affected by them
    }
    wanted.update({name: _plus(_student(), source) for name, source in CHEATS.items()})
    for name, nb in wanted.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    (subs / "e_not_a_notebook.ipynb").write_text("{ this is not json")
    odd = json.loads(nbformat.writes(_solved()))
    odd["cells"][3]["source"] = 12345
    (subs / "h_source_number.ipynb").write_text(json.dumps(odd))
    flood = json.loads(nbformat.writes(_solved()))
    flood["metadata"]["flood"] = [0] * (grading.MAX_JSON_VALUES + 1)
    (subs / "h_metadata_flood.ipynb").write_text(json.dumps(flood))
    (subs / "h_link.ipynb").symlink_to(subs / "z_good.ipynb")  # the classmate's notebook, through a link
    os.mkfifo(subs / "h_fifo.ipynb")  # read, it would block the grader forever
    (subs / os.fsdecode(b"f_\xff\xfe name.ipynb")).write_bytes((subs / "a_student.ipynb").read_bytes())
    before = {p.name: _digest(p) for p in subs.iterdir() if p.is_file()}
    checks_before = _digest(grader_checks)
    # the grader's temporary folders (its workers' and their sandboxes'), to check that none is left: one
    # that the sandboxes' users can enter, as the grader's workers need as root (pytest's are private)
    scratch = Path(tempfile.mkdtemp(prefix="bal-test-", dir="/tmp"))
    scratch.chmod(0o711)
    groups_before = _control_groups()
    env = {**os.environ, "PYTHONPATH": str(course), "TMPDIR": str(scratch)}
    start = time.monotonic()
    done = _run_grader([sys.executable, "-m", "bayesattn_lite.instructor.grading", str(subs), "--csv", str(csv_path),
                        "--assignment", "ps1_derivations", "--grader-memory", str(GRADER_MEMORY),
                        "--reports", str(reports), "--timeout", str(TIMEOUT),
                        "--notebook-timeout", str(NOTEBOOK_TIMEOUT), "--max-output", str(MAX_OUTPUT)],
                       env=env, cwd=str(work), timeout=900)
    seconds = time.monotonic() - start
    time.sleep(1.5)  # a surviving background process would rewrite a report in this time
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    data = {p.stem: json.loads(p.read_text()) for p in reports.glob("*.json")}
    modes = {p.name: oct(p.stat().st_mode & 0o7777) for p in (victim, victim / "secret.txt")}
    yield {"done": done, "seconds": seconds, "groups": (groups_before, _control_groups()), "victim_modes": modes,
           "rows": rows, "reports": data, "subs": subs, "before": before, "scratch": scratch,
           "checks_before": checks_before, "grader_checks": grader_checks, "folder": folder}
    shutil.rmtree(scratch, ignore_errors=True)


def _run_grader(command, timeout, **kwargs):
    """subprocess.run(command, capture_output=True, text=True); past ``timeout`` the grader and its workers
    print where each thread is (SIGUSR1, faulthandler) before they are killed, and the test fails with it."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_grader(proc.pid, signal.SIGUSR1)
        time.sleep(3)
        _signal_grader(proc.pid, signal.SIGKILL)  # the workers too: they hold the grader's pipes
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the grader ran past {timeout} s. Its output:\n{out[-3000:]}\nIts threads:\n{err[-12000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _signal_grader(pid, signum):
    """Send ``signum`` to the grader ``pid`` and to its workers."""
    for target in [pid, *_children(pid)]:
        with contextlib.suppress(OSError):
            os.kill(target, signum)


def _children(pid):
    """The processes started by ``pid`` (the grader's workers), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _control_groups():
    """The grader's control groups (sandboxes' and workers'), wherever they are below its own."""
    found = _sandbox._cgroup.kind()
    bases = [] if found is None else found[1].values() if found[0] == "v1" else [found[1]]
    return sorted(str(p) for base in bases for p in Path(base).rglob("bal-*") if p.is_dir())


def _left_behind(before, after):
    """The groups that appeared during a batch and whose maker (the pid in bal-<pid>-...) has exited: another
    grader on the machine at the same time (a second test run) keeps its own groups until it ends."""
    def maker_alive(path):
        pid = Path(path).name.split("-")[1]
        return pid.isdigit() and Path(f"/proc/{pid}").exists()
    return sorted(g for g in set(after) - set(before) if not maker_alive(g))


def _score(batch, name):
    report = batch["reports"][name]
    return report["score"]


# ----------------------------------------------------------------------------- the batch

def test_the_batch_finishes_with_a_row_and_a_report_for_every_submission(batch):
    done = batch["done"]
    assert done.returncode == 0, done.stderr[-3000:]
    # a name that is not UTF-8 is shown with U+FFFD for its bad bytes
    names = sorted(os.fsencode(p.stem).decode("utf-8", "replace") for p in batch["subs"].iterdir())
    assert sorted(Path(r["submission"]).stem for r in batch["rows"]) == names
    odd = [name for name in batch["reports"] if name.startswith("f____name-")]   # a plain name, and a hash
    assert len(batch["reports"]) == len(names) and len(odd) == 1 and batch["reports"][odd[0]]["status"] == "graded"
    for row in batch["rows"]:
        report = batch["reports"][Path(row["report"]).stem]
        assert int(row["score"]) == report["score"] and int(row["max_score"]) == report["max_score"]
    # the submissions are read, never written
    assert {p.name: _digest(p) for p in batch["subs"].iterdir() if p.is_file()} == batch["before"]
    # the instructor sees each one as soon as it is graded, counted
    progress = re.findall(r"^\[(\d+)/(\d+)\] ", done.stdout, re.M)
    assert progress == [(str(k), str(len(names))) for k in range(1, len(names) + 1)], done.stdout[-2000:]
    print(f"batch of {len(names)} submissions: {batch['seconds']:.0f} s; {done.stdout.strip().splitlines()[-1]}")


def test_the_gradebook_has_points_per_question_and_manual_columns(batch):
    row = next(r for r in batch["rows"] if Path(r["submission"]).stem == "z_good")
    written = [q for q in PS1.questions if q.check is None]
    checked = [q for q in PS1.questions if q.check is not None]
    for q in checked:
        assert row[q.id] == str(q.points)
    for q in written:
        assert row[q.id] == "" and row[f"{q.id}_manual"] == ""
    report = batch["reports"]["z_good"]
    assert report["score"] == sum(q.points for q in checked) and report["problems"] == []
    assert report["manual_pending"] == sum(q.points for q in written)
    for q in report["questions"]:
        if q["manual"]:
            assert q["points"] is None and q["rubric"] and q["instructor_points"] is None


@pytest.fixture(scope="module")
def other_sets():
    """The student versions of problem sets 2 and 3 and the PS3 lookup-table cheat, each graded as its set."""
    _require_sandbox()
    wanted = {"a_student_ps2": _student(ASSIGNMENTS["ps2_dynamics"]), "a_student_ps3": _student(ASSIGNMENTS["ps3_experiment"]),
              "c_ps3_table": _plus(_student(ASSIGNMENTS["ps3_experiment"]), PS3_TABLE)}
    return {name: grading.grade(nbformat.writes(nb).encode(), nb.metadata["bayesattn_lite"]["assignment"], TIMEOUT,
                                name=f"{name}.ipynb", notebook_timeout=NOTEBOOK_TIMEOUT) for name, nb in wanted.items()}


def test_the_student_versions_get_zero(batch, other_sets):
    for name in ("a_student", "a_student_ps2", "a_student_ps3"):
        report = batch["reports"][name] if name in batch["reports"] else other_sets[name]
        assert report["status"] == "graded" and report["score"] == 0, report
        assert all(q["manual"] or q["feedback"].startswith("not answered yet") or "not defined" in q["feedback"]
                   for q in report["questions"]), name
        assert not any("does not match" in p for p in report["problems"]), report["problems"]


def test_an_instructor_version_handed_in_is_rejected(batch):
    report = batch["reports"]["b_instructor"]
    assert report["status"] == "rejected" and report["score"] == 0
    assert "instructor version" in report["problems"][0]


@pytest.mark.parametrize("cheat", sorted(CHEATS) + ["c_instructor_solution", "c_edit_checks", "c_background",
                                                    "c_classmate", "c_odd_name", "c_fill_tmp",
                                                    "c_read_reference", "c_planted_links", "c_sigstop",
                                                    *HOSTILE])
def test_a_cheat_scores_no_more_than_the_untouched_student_version(batch, cheat):
    assert _score(batch, cheat) <= _score(batch, "a_student") == 0, batch["reports"][cheat]


def test_the_ps3_lookup_table_scores_no_more_than_the_untouched_student_version(other_sets):
    assert other_sets["c_ps3_table"]["score"] <= other_sets["a_student_ps3"]["score"] == 0, other_sets["c_ps3_table"]


def test_the_kernel_imports_the_package_without_its_instructor_subpackage_or_real_checks():
    _require_sandbox()
    with _sandbox.Sandbox(grading.PACKAGE_DIR, notebook_timeout=120, replace=grading.KERNEL_REPLACES,
                          leave_out=grading.KERNEL_LEAVES_OUT) as box:
        probe = ("import importlib.util, os, bayesattn_lite.checks as c\n"
                 "found = [importlib.util.find_spec(f'bayesattn_lite.{m}') is not None for m in "
                 "('instructor', 'checks._engine', 'checks.problem_sets', 'attention')]\n"
                 "found += [hasattr(c, '_biased_spec'), sorted(os.listdir(os.path.dirname(c.__file__)))]")
        assert box.execute(probe, timeout=60).status == "ok"
        assert box.fetch("found", timeout=30) == [False, False, False, True, False, ["__init__.py", "__pycache__"]]


def test_the_kernels_package_copy_has_the_stand_in_checks_alone():
    """A replacement inside a left-out folder makes the folder again with the replacement alone: no module
    and no bytecode of the real checks goes into the copy of the package the kernels import."""
    copy = _sandbox.kernel_package(grading.PACKAGE_DIR, grading.KERNEL_REPLACES, grading.KERNEL_LEAVES_OUT)
    cached = f"__init__.{sys.implementation.cache_tag}.pyc"
    assert sorted(p.relative_to(copy / "checks").as_posix() for p in (copy / "checks").rglob("*")) == \
        ["__init__.py", "__pycache__", f"__pycache__/{cached}"]
    assert (copy / "checks" / "__init__.py").read_text(encoding="utf-8") == grading.KERNEL_CHECKS
    assert (copy / "attention.py").exists() and not (copy / "instructor").exists()
    assert not [p for p in copy.rglob("*") if p.is_file() and p.name.split(".")[0] in ("_engine", "problem_sets", "checks")]


def test_the_instructor_notebooks_and_other_submissions_are_out_of_the_kernels_reach(batch):
    for name in ("c_instructor_solution", "c_classmate"):
        report = batch["reports"][name]
        assert report["score"] == 0, report
        isolation = report["isolation"]
        assert isolation["sandbox"].startswith("bubblewrap") and isolation["warnings"] == []
        assert {"user", "mount", "pid", "network"} <= set(isolation["namespaces"].split(", "))


def test_editing_checks_on_disk_is_impossible_or_undone_and_later_students_are_unaffected(batch):
    assert _digest(batch["grader_checks"]) == batch["checks_before"]
    report = batch["reports"]["c_edit_checks"]
    assert report["score"] == 0 and report["status"] == "graded"  # nothing of the grader is writable in the sandbox
    good = batch["reports"]["z_good"]
    assert good["score"] == good["automatic_max"] > 0


def test_no_process_of_a_submission_survives_and_reports_stay_written(batch):
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if TOKEN.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            pass
    assert alive == []
    assert not list(batch["scratch"].iterdir()), "a worker's or a sandbox's folder was left behind"
    assert _left_behind(*batch["groups"]) == [], "a control group was left behind"
    report = batch["reports"]["c_background"]  # read after the batch ended and 1.5 s more
    assert report["submission"].endswith("c_background.ipynb") and report["score"] == 0


def test_planted_links_are_not_followed_and_the_graders_python_is_not_written(batch):
    assert batch["victim_modes"] == {"victim": "0o750", "secret.txt": "0o600"}
    assert not (SITE_PACKAGES / "zz_bal_cheat.pth").exists()


def test_a_cell_that_ignores_sigint_is_killed_and_the_submission_gets_a_report(batch):
    report = batch["reports"]["c_sigint"]
    assert any("did not stop on an interrupt" in p for p in report["problems"]), report["problems"]
    assert report["seconds"] < NOTEBOOK_TIMEOUT + 20
    # the kernel was replaced and the notebook run again without that cell: its questions are still decided
    assert report["isolation"]["restarts"] >= 1 and report["score"] == 0
    assert all(q["feedback"].startswith("not answered yet") for q in report["questions"] if not q["manual"])


def test_300_mb_of_output_is_capped(batch):
    report = batch["reports"]["c_output_lines"]
    assert report["score"] == 0
    # the grader kills it at the cap, or a kernel that buffered the lines faster ran out of its memory first
    assert any(w in p for p in report["problems"] for w in ("printed more than", "output too large", "ran out of its")), \
        report["problems"]
    peak = re.search(r"grader peak memory: (\d+) MiB", batch["done"].stdout)
    assert peak and int(peak.group(1)) < 700, batch["done"].stdout[-500:]


def test_a_dying_kernel_an_endless_loop_and_a_memory_hog_still_get_reports(batch):
    dies = batch["reports"]["d_dies"]
    # the cell that killed the kernel is left out of a fresh kernel's run: the questions are still graded
    assert dies["score"] == dies["automatic_max"] > 0, dies
    assert any("the kernel was stopped" in p for p in dies["problems"])
    assert any("a fresh kernel ran the notebook again without code cell" in p for p in dies["problems"])
    assert dies["isolation"]["restarts"] == 1
    loop = batch["reports"]["d_loop"]
    assert any(f"longer than {TIMEOUT}" in p for p in loop["problems"])
    assert any("MemoryError" in p for p in loop["problems"])  # 8 GiB: over the kernel's memory limit
    assert loop["score"] == loop["automatic_max"] > 0  # interrupted, then the rest ran


def test_a_file_that_is_not_a_notebook_gets_a_row(batch):
    report = batch["reports"]["e_not_a_notebook"]
    assert report["status"] == "unreadable" and report["score"] == 0
    assert "not a Jupyter notebook" in report["problems"][0]


def test_a_notebook_naming_another_assignment_is_graded_as_the_batchs(batch):
    report = batch["reports"]["h_other_assignment"]
    assert report["assignment"] == "ps1_derivations" and report["score"] == 0
    assert any("metadata names the assignment 'ps3_experiment'" in p for p in report["problems"]), report["problems"]


def test_a_deep_tree_and_a_full_scratch_space_are_removed_and_cost_the_next_student_nothing(batch):
    for name in ("h_deep_tree", "h_fill_scratch"):
        assert batch["reports"][name]["status"] == "graded", batch["reports"][name]
    assert not list(batch["scratch"].iterdir()), "a worker's or a sandbox's folder was left behind"
    good = batch["reports"]["z_good"]
    assert good["score"] == good["automatic_max"] > 0 and good["problems"] == []


def test_every_frame_of_a_message_counts_against_the_output_cap(batch):
    report = batch["reports"]["h_frames"]
    assert any(f"printed more than {MAX_OUTPUT}" in p for p in report["problems"]), report["problems"]


def test_a_message_too_large_for_the_graders_memory_stops_only_its_worker(batch):
    """1.8 GiB in one message of 3 MiB frames: the worker that received it is ended at its memory bound,
    the submission gets 0 with the reason, and the next submissions are graded by a fresh worker."""
    report = batch["reports"]["h_frames_worker"]
    assert report["status"] == "stopped" and report["score"] == 0, report
    assert f"over its {GRADER_MEMORY} MiB of memory" in report["problems"][0]
    assert len(report["questions"]) == len(PS1.questions)
    assert "stopped the grader's worker" in batch["done"].stderr
    nxt = batch["reports"]["h_spin_z_next"]
    assert nxt["score"] == nxt["automatic_max"] > 0, nxt


def test_a_worker_stopped_halfway_through_a_report_does_not_block_the_grader():
    """The grader reads each worker in a thread of its own: a worker stopped in the middle of a message
    (here half a message on its socket) leaves the grader's loop, and so its deadlines, running; the
    worker's end is then reported as None."""
    ours, theirs = socket.socketpair()
    worker = grading._Worker.__new__(grading._Worker)
    worker.conn, worker.inbox = Connection(ours.detach()), queue.SimpleQueue()
    threading.Thread(target=worker._listen, daemon=True).start()
    theirs.sendall(struct.pack("!i", 1000) + b"x" * 10)  # a message of 1000 bytes, 10 of them sent
    with pytest.raises(queue.Empty):
        worker.inbox.get(timeout=0.5)
    theirs.close()  # the worker ends
    assert worker.inbox.get(timeout=5) == (worker, None)
    worker.conn.close()


class _FakeWorker:
    """A grading worker without a process, for the loop of ``grading.in_workers``: what it does with a
    submission is ``_FakeWorker.plan[name](worker, index)``; it starts dead when ``dead_on_arrival``."""
    plan, made, dead_on_arrival = {}, [], set()

    def __init__(self, options, jobs, memory, inbox):
        self.inbox, self.task, self.deadline, self.ended, self.dead = inbox, None, None, False, False
        self.proc = types.SimpleNamespace(poll=lambda: 0 if self.dead else None, wait=lambda timeout=None: 0)
        self.group = types.SimpleNamespace(out_of_memory=lambda: False)
        self.made.append(self)
        if len(self.made) in self.dead_on_arrival:
            self.dead = True

    def send(self, index, task, more, seconds):
        self.task, self.deadline = (index, task), time.monotonic() + seconds
        self.plan[task[0]](self, index)

    def end(self, at_once=False):
        self.ended = True


def _loop(monkeypatch, plan, jobs=1, dead_on_arrival=()):
    """The reports of ``in_workers`` on submissions named by ``plan``'s keys, with fake workers."""
    monkeypatch.setattr(grading, "_Worker", _FakeWorker)
    monkeypatch.setattr(grading, "_stopped", lambda task, options, why: {"name": task[0], "status": "stopped", "why": why})
    monkeypatch.setattr(_FakeWorker, "plan", plan)
    monkeypatch.setattr(_FakeWorker, "made", [])
    monkeypatch.setattr(_FakeWorker, "dead_on_arrival", set(dead_on_arrival))
    return grading.in_workers([(name, None, None, None, None) for name in plan], {}, jobs)


def _graded(worker, index):
    worker.inbox.put((worker, ({"name": worker.task[1][0], "status": "graded"}, 100)))


def test_a_report_that_came_in_time_is_taken_before_any_deadline_is_judged(monkeypatch):
    """Two workers' reports wait in the queue, and both deadlines have passed since: both are graded."""
    def late_clock(worker, index):
        _graded(worker, index)
        worker.deadline = time.monotonic() - 1
    reports = _loop(monkeypatch, {"a": late_clock, "b": late_clock}, jobs=2)
    assert [r["status"] for r in reports] == ["graded", "graded"], reports


def test_a_worker_that_ends_unreads_or_dies_costs_only_its_own_submission(monkeypatch):
    """A worker that ends mid-submission, or sends a report that cannot be read, stops that submission
    with the reason; a worker found dead between two submissions is replaced before the next is sent."""
    def dies(worker, index):
        worker.dead = True
        worker.inbox.put((worker, None))

    def unreadable(worker, index):
        worker.inbox.put((worker, ValueError("bad pickle")))
        worker.inbox.put((worker, None))
    reports = _loop(monkeypatch, {"a": dies, "b": unreadable, "c": _graded, "d": _graded}, dead_on_arrival={3})
    assert [r["status"] for r in reports] == ["stopped", "stopped", "graded", "graded"], reports
    assert reports[0]["why"] == "grading it ended the grader's worker"
    assert reports[1]["why"] == "its report could not be read (ValueError)"
    assert len(_FakeWorker.made) == 4 and all(w.ended for w in _FakeWorker.made)  # the third was dead: replaced


@pytest.mark.skipif(not ROOT, reason="a sandbox gets a staging folder as root only")
def test_a_killed_workers_staging_folders_go_with_its_folder(tmp_path, monkeypatch):
    """Its sandboxes' staging folders are made below the worker's own folder (removed with it, however
    the worker ends), even when TMPDIR is a folder other users cannot enter."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    worker = grading._worker_folder()
    try:
        monkeypatch.setattr(tempfile, "tempdir", worker)  # what the worker's process does first
        command, stage, _ = _sandbox.sandboxed_command(["true"], worker, [], [worker] * 3, (), _sandbox.sandbox_uid())
        assert Path(stage).parent == Path(worker), (stage, worker)
    finally:
        _sandbox.remove_tree(worker)


def test_a_kernel_that_spins_does_not_starve_the_next_kernels_start(batch):
    nxt = batch["reports"]["h_spin_z_next"]
    assert nxt["status"] == "graded" and nxt["problems"] == [], nxt


@pytest.mark.parametrize("name, said", [("h_source_number", "cell 4's source is int, expected text"),
                                        ("h_metadata_flood", "JSON values"),
                                        ("h_link", "a link to another file"),
                                        ("h_fifo", "not a regular file")])
def test_learner_data_is_checked_before_it_is_read(batch, name, said):
    report = batch["reports"][name]
    assert report["status"] == "unreadable" and report["score"] == 0, report
    assert said in report["problems"][0], report["problems"]
    assert len(report["questions"]) == len(PS1.questions)  # a full row all the same


def test_a_folder_is_graded_as_one_assignment_the_instructor_names(tmp_path, capsys):
    (tmp_path / "subs").mkdir()
    with pytest.raises(SystemExit):
        grading.main([str(tmp_path / "subs"), "--csv", str(tmp_path / "g.csv")])
    assert "needs --assignment" in capsys.readouterr().err


# ----------------------------------------------------------------------------- one submission

def _grade(tmp_path, submission, *extra):
    if "--no-sandbox" not in extra:
        _require_sandbox()
    report = tmp_path / "out" / "report.json"
    before = _digest(submission)
    assert grading.main([str(submission), "--report", str(report), *extra]) == 0
    assert _digest(submission) == before, "the submission was modified"
    data = json.loads(report.read_text())
    md = report.with_suffix(".md").read_text()
    assert f"Score: {data['score']} / {data['max_score']}" in md
    return data, md


def test_the_notebook_timeout_bounds_the_submission_not_each_fresh_kernel(tmp_path):
    # a hostile student's cells each stay under the cell limit, and the notebook runs past its own: the
    # kernel is stopped, and a fresh kernel used to start a fresh clock (up to 4x the limit in all)
    nb = _student()
    for _ in range(8):
        _plus(nb, "import time\ntime.sleep(3)")
    nbformat.write(nb, tmp_path / "ps1_derivations_slow.ipynb")
    data, _ = _grade(tmp_path, tmp_path / "ps1_derivations_slow.ipynb", "--timeout", "5", "--notebook-timeout", "8")
    assert any("ran past its time limit" in p for p in data["problems"]), data["problems"]
    assert data["isolation"]["restarts"] == 0 and data["seconds"] < 8 + 15, (data["seconds"], data["problems"])


@pytest.mark.parametrize("attack, said", [
    # a frame with a wrong signature: the grader's client raised ValueError outside any handler ("grader error")
    ('get_ipython().kernel.iopub_socket.send_multipart([b"s", b"<IDS|MSG>", b"0" * 64, b"{}", b"{}", b"{}", b"{}"])',
     "a message the grader cannot read"),
    # the bulk of each message in the header it claims to answer, which --max-output did not count
    ('k = get_ipython().kernel\nfor _ in range(40):\n    k.session.send(k.iopub_socket, "stream", '
     'content={"name": "stdout", "text": "x"}, parent={"msg_id": "x", "pad": "x" * 2 ** 20})',
     "printed more than"),
])
def test_a_kernel_that_sends_what_the_grader_cannot_read_or_does_not_count_is_killed(tmp_path, attack, said):
    nb = _student()
    _plus(nb, attack)
    path = tmp_path / "ps1_derivations_frames.ipynb"
    nbformat.write(nb, path)
    data, _ = _grade(tmp_path, path, "--max-output", "16")
    assert data["status"] == "graded" and any(said in p for p in data["problems"]), data["problems"]
    assert len(data["questions"]) == len(PS1.questions)   # every question has its row: the report is whole


def test_a_cell_nested_too_deep_to_parse_is_skipped_by_the_structure_check():
    nb = _plus(_student(), "x = a" + ".a" * 3300)   # RecursionError in ast.parse, which stopped the batch
    assert grading.structure_problems(nb, PS1) == grading.structure_problems(_student(), PS1)


def test_the_instructor_version_gets_full_marks_as_a_self_test(tmp_path, capsys):
    data, md = _grade(tmp_path, PS1.instructor_path, "--self-test", "--folder", str(assignments.FOLDER))
    checked = [q for q in data["questions"] if not q["manual"]]
    assert data["status"] == "graded" and data["problems"] == []
    assert checked and all(q["passed"] and q["points"] == q["max_points"] for q in checked)
    assert data["score"] == data["automatic_max"] == sum(q.points for q in PS1.questions if q.check is not None)
    assert data["max_score"] == sum(q.points for q in PS1.questions)
    assert f"{data['score']} / {data['max_score']}" in capsys.readouterr().out


@pytest.mark.parametrize("content", ["{ this is not json", json.dumps({"cells": "no"}), ""])
def test_a_file_that_is_not_a_notebook_gets_a_report_from_the_command_line(tmp_path, content):
    _require_sandbox()  # the command line refuses without one
    bad = tmp_path / "ps1_derivations_submission.ipynb"
    bad.write_text(content)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "bayesattn_lite.instructor.grading", str(bad), "--report", str(report)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(report.read_text())
    assert data["assignment"] == "ps1_derivations"  # from the file name
    assert data["score"] == 0 and data["max_score"] == sum(q.points for q in PS1.questions)
    assert "not a Jupyter notebook" in data["problems"][0]
    assert bad.read_text() == content


def test_an_unknown_assignment_is_reported(tmp_path):
    path = tmp_path / "homework.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    data, md = _grade(tmp_path, path)
    assert data["assignment"] is None and data["max_score"] == 0
    assert "--assignment" in data["problems"][0]


def test_a_notebook_of_another_assignment_is_reported(tmp_path):
    path = tmp_path / "x.ipynb"
    nbformat.write(_student(ASSIGNMENTS["ps2_dynamics"]), path)
    data, _ = _grade(tmp_path, path, "--assignment", "ps1_derivations", "--notebook-timeout", "30")
    assert any("does not look like ps1_derivations" in p for p in data["problems"])
    assert data["score"] == 0


def test_an_unwritable_report_path_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert grading.main([str(tmp_path / "x.ipynb"), "--report", str(blocker / "sub" / "r.json")]) == 2


def test_without_bubblewrap_the_grader_refuses_and_says_how_to_fix_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_sandbox, "_PROBED", {})
    monkeypatch.setattr(_sandbox.shutil, "which", lambda name, *a, **k: None)
    submission = tmp_path / "ps1_derivations.ipynb"
    nbformat.write(_student(), submission)
    assert grading.main([str(submission), "--report", str(tmp_path / "r.json")]) == 2
    said = capsys.readouterr().err
    assert "bubblewrap (bwrap) is not installed" in said and "apt-get install bubblewrap" in said
    assert "--no-sandbox" in said and not (tmp_path / "r.json").exists()
    with pytest.raises(_sandbox.SandboxUnavailable, match="bubblewrap"):
        grading.grade(submission)


def test_no_sandbox_grades_with_a_warning_in_the_report(tmp_path, capsys):
    submission = tmp_path / "ps1_derivations.ipynb"
    nbformat.write(_solved(), submission)
    report, md = _grade(tmp_path, submission, "--no-sandbox", "--timeout", str(TIMEOUT))
    assert report["score"] == report["automatic_max"] > 0
    assert report["isolation"]["sandbox"] == "none (--no-sandbox)"
    assert report["isolation"]["warnings"] == [grading.NO_SANDBOX_WARNING] and "--no-sandbox" in md
    assert "--no-sandbox" in capsys.readouterr().err


def test_report_names_stay_the_same_whatever_else_the_folder_holds(tmp_path):
    """A file whose name cleans up like a classmate's (o brien, o'brien) cannot take that report's name, nor
    the manual points filed under it: a plain name is its own, another gets a hash of the file's name."""
    alone, crowded = set(), set()
    own = grading._stem(tmp_path / "o'brien.ipynb", alone)
    grading._stem(tmp_path / "o brien.ipynb", crowded)   # sorts first, and cleans up alike
    assert grading._stem(tmp_path / "o'brien.ipynb", crowded) == own and own.startswith("o_brien-")
    assert grading._stem(tmp_path / "alice.ipynb", set()) == "alice"
    # nor can a plain name that copies the hashed one (the fourth hostile round): it is hashed in turn
    taken = set()
    assert grading._stem(tmp_path / f"{own}.ipynb", taken) != own and grading._stem(tmp_path / "o'brien.ipynb", taken) == own


def test_the_sandbox_starts_without_the_instructors_environment(monkeypatch):
    """bubblewrap is process 1 of the sandbox, as the kernel's user: its /proc/1/environ is readable from
    inside, so it gets what starting Python needs and nothing else (a token in the instructor's shell)."""
    monkeypatch.setenv("CANVAS_TOKEN", "secret-123")
    env = _sandbox.launcher_environment()
    assert "CANVAS_TOKEN" not in env and set(env) <= set(_sandbox.LAUNCHER_VARIABLES) and "PATH" in env


def test_reading_a_notebooks_size_is_linear_in_its_length():
    """The count of JSON values before parsing: a megabyte of an unterminated string of escaped quotes
    took minutes (the pattern retried from every quote); now it is one pass."""
    import time
    start = time.perf_counter()
    grading._json_values('"' + '\\"' * 500_000)
    assert time.perf_counter() - start < 2
    assert grading._json_values('{"a": "x,y", "b": [1, 2]}') == grading._json_values('{"a": "", "b": [1, 2]}')


def test_a_file_with_a_second_name_is_not_graded_rather_than_zeroed(tmp_path):
    """A hard link to a classmate's notebook, made to zero it: neither name is opened, and both are
    "not graded" for the instructor to decide, with a non-zero exit, never a 0."""
    carol = tmp_path / "carol.ipynb"
    carol.write_text(nbformat.writes(nbformat.v4.new_notebook()))
    os.link(carol, tmp_path / "zz_mallory.ipynb")
    for path in (carol, tmp_path / "zz_mallory.ipynb"):
        source = grading._bytes_or_error(path)
        assert isinstance(source, grading.SeveralNames)
        report = grading._attempt((path.name, source, tmp_path / f"{path.stem}.json", None, path), {}, None)
        assert report["status"] == "not graded" and report["score"] is None, report
        assert "2 names" in report["problems"][0] and "you decide" in report["problems"][0]


def test_an_output_nbformat_cannot_validate_is_dropped_not_a_grader_error():
    """display({'text/plain': 1}, raw=True) from the learner's code made nbformat raise a schema error
    that stopped the submission as "grader error": such an output is not kept, its bytes are counted."""
    sandbox = object.__new__(_sandbox.Sandbox)
    sandbox.kept_bytes, outputs = 0, []
    msg = {"msg_type": "display_data", "header": {"msg_type": "display_data"},
           "content": {"data": {"text/plain": 1}, "metadata": {}, "transient": {}}}
    sandbox._keep(msg, outputs)
    assert outputs == []


def test_the_sandboxs_root_and_dev_are_read_only():
    """Files can be written only on the scratch file systems and the writable folders: bubblewrap's own
    root and /dev (tmpfs folders) are remounted read-only, after every mount below them."""
    argv, _, _ = _sandbox.bubblewrap_argv("/tmp", [], ["/tmp", "/tmp", "/tmp"], [])
    assert argv[-4:] == ["--remount-ro", "/", "--remount-ro", "/dev"]


def test_a_report_path_planted_as_a_link_is_replaced_not_written_through(tmp_path):
    target = tmp_path / "victim.pth"
    target.write_text("untouched\n")
    out = tmp_path / "shared"
    out.mkdir()
    (out / "report.json").symlink_to(target)
    (out / "report.md").symlink_to(target)
    grading.write_report({"submission": "x", "score": 0, "max_score": 1, "questions": [], "problems": []},
                          out / "report.json")
    assert target.read_text() == "untouched\n"
    assert not (out / "report.json").is_symlink() and json.loads((out / "report.json").read_text())["score"] == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]  # no temporary file left


def test_a_notebook_of_too_many_cells_is_refused_before_it_is_parsed(tmp_path):
    nb = _student()
    nb.cells = [nbformat.v4.new_code_cell("1") for _ in range(grading.MAX_CELLS + 1)]
    start = time.monotonic()
    report = grading.grade(nbformat.writes(nb).encode(), name="ps1_derivations.ipynb", sandboxed=False)
    assert report["status"] == "unreadable" and f"more than {grading.MAX_CELLS}" in report["problems"][0]
    assert time.monotonic() - start < 5


def test_a_15_mb_cell_costs_the_grader_a_bounded_amount_of_memory(tmp_path):
    """One large cell once cost about 730 MiB of grader memory per MB: the grader reads a cell over
    MAX_READ_CELL characters without parsing it, and its peak memory is reported (and bounded here)."""
    _require_sandbox()
    subs = tmp_path / "subs"
    subs.mkdir()
    nb = _student()
    nb.cells.insert(3, nbformat.v4.new_code_cell("x = 1  # " + "a" * (15 * 2 ** 20)))
    nbformat.write(nb, subs / "ps1_derivations_big.ipynb")
    done = subprocess.run([sys.executable, "-m", "bayesattn_lite.instructor.grading", str(subs), "--csv",
                           str(tmp_path / "g.csv"), "--reports", str(tmp_path / "r"), "--assignment", "ps1_derivations"],
                          capture_output=True, text=True, timeout=300)
    peak = re.search(r"grader peak memory: (\d+) MiB", done.stdout)
    assert done.returncode == 0 and peak, done.stdout[-500:] + done.stderr[-2000:]
    assert int(peak.group(1)) < 700, done.stdout[-500:]


def test_a_flood_of_placeholder_names_leaves_nothing_behind_for_the_next_submission():
    for n in range(1000):
        _sandbox.decode(["opaque", f"Name{n}"])
    assert "_OPAQUE" not in _sandbox._codec   # no cache that outlives a submission
    assert repr(_sandbox.decode(["opaque", "MyFloors"])) == "<MyFloors>"   # the next student's object keeps its name


def test_keys_and_big_ints_count_against_the_output_caps():
    assert _sandbox._size({"x" * 1000: None}) >= 1000
    assert _sandbox._size({"data": {"text/plain": "."}, "metadata": {"k" * 5000: 1}}) >= 5000
    assert _sandbox._size(10 ** 4000) >= 1000
    assert _sandbox._size("\x00" * 1000) == 6000 and _sandbox._size("a\nb") == 3   # as the notebook's JSON writes them


def test_the_data_channel_rebuilds_plain_values():
    import numpy as np
    import torch

    from bayesattn_lite.instructor import _sandbox

    class Sub(torch.Tensor):
        pass

    value = {"a": (1, 2.5, float("nan"), None, True, "text"), 3: [np.arange(3), np.float64(0.5)],
             "t": torch.arange(6, dtype=torch.float64).reshape(2, 3).as_subclass(Sub), "o": object()}
    back = _sandbox.decode(json.loads(json.dumps(_sandbox.encode(value))))
    assert back["a"][:2] == (1, 2.5) and np.isnan(back["a"][2]) and back["a"][3:] == (None, True, "text")
    assert type(back["t"]) is torch.Tensor and torch.equal(back["t"], torch.arange(6.).reshape(2, 3).double())
    assert isinstance(back[3][0], np.ndarray) and back[3][1] == 0.5
    assert type(back["o"]).__name__ == "object"
    for bad in (["tensor", "float64", [2], "AAAA"], ["eval", "1"], ["int", "1" * 40], "x", ["list", "no"]):
        with pytest.raises(ValueError):
            _sandbox.decode(bad)


def test_gradescope_results_and_the_learners_report_from_a_report():
    report = {"submission": "s.ipynb", "assignment": "ps1_derivations", "title": "PS1", "status": "graded",
              "score": 3, "max_score": 5, "manual_pending": 2, "problems": ["code cell 2 raised X: y"],
              "reference_calls": [],
              "questions": [{"id": "q1", "title": "a", "manual": False, "points": 3, "max_points": 3,
                             "passed": True, "feedback": "matches"},
                            {"id": "q2", "title": "b", "manual": True, "points": None, "max_points": 2,
                             "passed": None, "rubric": "1 pt: secret criterion", "answer": "Because **x**.",
                             "instructor_points": None, "feedback": "a written answer"}]}
    gs = grading.gradescope_results(report)
    assert gs["score"] == 3 and [t["name"] for t in gs["tests"]] == ["q1: a"]  # written answers: graded by hand
    assert gs["tests"][0]["max_score"] == 3 and "code cell 2 raised" in gs["output"]
    assert "reference functions" not in gs["output"]
    report["reference_calls"] = ["cell 4, line 2: attention.gradients (answers q1)"]   # on Gradescope too
    assert "cell 4, line 2: attention.gradients" in grading.gradescope_results(report)["output"]
    md = grading.markdown(report)
    assert "Because **x**." in md and "secret criterion" not in md and "to grade / 2" in md
    header, rows = grading.gradebook_rows([report])
    assert header[header.index("q2") + 1] == "q2_manual" and rows[0][header.index("q2")] == ""


# ----------------------------------------------------------------------------- a class (issue: assignments for a class)

FORGOT_TAU = ("return ds @ k / scale, ds.T @ q / scale", "return ds @ k / d_k ** 0.5, ds.T @ q / d_k ** 0.5")


def _forgot_tau():
    """A solved problem set 1 whose q1 lost the 1/tau of the chain rule: one named mistake."""
    nb = _solved()
    cell = next(c for c in nb.cells if FORGOT_TAU[0] in c.source)
    cell.source = cell.source.replace(*FORGOT_TAU)
    return nb


def _answered_below_the_stub():
    """The student version with q2's answer typed into a new Markdown cell under its (untouched) answer cell."""
    nb = _student()
    at = next(i for i, c in enumerate(nb.cells) if "answer-q2" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, nbformat.v4.new_markdown_cell("The bias does not depend on q or k."))
    return nb


def test_a_written_answer_in_cells_added_below_its_stub_is_found_with_a_warning():
    nb, q2 = _answered_below_the_stub(), PS1.questions[1]
    text, warning = grading.written_answer(nb, q2, grading.original_cells(assignments.FOLDER, PS1.id))
    assert text == "The bias does not depend on q or k." and "still holds the stub" in warning
    text, warning = grading.written_answer(_student(), q2, grading.original_cells(assignments.FOLDER, PS1.id))
    assert text == "" and warning is None  # the stub alone is no answer
    # an answer typed in the tagged cell below the stub line is the answer (it was thrown away)
    typed = _student()
    cell = next(c for c in typed.cells if grading._answer_tag(q2) in grading._tags(c))
    cell.source += "\n\nThe bias is the same for every key of a row."
    text, warning = grading.written_answer(typed, q2, grading.original_cells(assignments.FOLDER, PS1.id))
    assert text == "The bias is the same for every key of a row." and warning is None
    # a tag moved onto a cell of the handout (the question's own text), the stub deleted: no answer
    moved = _student()
    at = next(i for i, c in enumerate(moved.cells) if grading._answer_tag(q2) in grading._tags(c))
    moved.cells[at - 1].metadata["tags"] = [grading._answer_tag(q2)]
    del moved.cells[at]
    text, _ = grading.written_answer(moved, q2, grading.original_cells(assignments.FOLDER, PS1.id))
    assert text == "", text
    # without the handed-out notebook the next question's heading still ends the answer
    text, _ = grading.written_answer(nb, q2)
    assert text == "The bias does not depend on q or k."


def test_partial_credit_per_named_mistake_and_per_output():
    from bayesattn_lite.checks import _engine, problem_sets
    from bayesattn_lite.instructor import course
    q1 = course.load().assignment(PS1.id).questions[0]
    spec = problem_sets._biased_spec()
    right = _engine.reference(spec)
    dq = spec.outputs[0]

    def forgot_tau_in_dq(*args):
        inputs = dict(zip(spec.signature, args))
        return dq.compute(inputs, tau_in_chain=False), right(*args)[1]

    result = _engine.run(spec, forgot_tau_in_dq)
    assert not result.passed and result.right == ("dk",) and result.mistakes == ("tau_in_chain",)
    named = dict(q1.mistakes)["tau_in_chain"]
    assert grading.partial_points(q1, result) == max(named, q1.points / 2)
    junk = _engine.run(spec, lambda *a: (a[0] * 0 + 1, a[1] * 0 + 1))
    assert grading.partial_points(q1, junk) == 0
    # graded mode names the mistake and leaves the formula out
    graded = grading.graded_feedback(result)
    assert "ds_ij/dq_i =" in result.message and "ds_ij/dq_i" not in graded and "dq is wrong" in graded


def test_a_class_grades_in_one_command_with_partial_credit_manual_points_late_and_feedback(tmp_path, capsys):
    _require_sandbox()
    subs, out = tmp_path / "submissions", tmp_path / "out"
    subs.mkdir()
    wanted = {"smithjane_12345_678901_ps1_derivations_student": _solved(),
              "doejohn_LATE_23456_678902_ps1_derivations-1": _solved(),
              "roealex_34567_678903_ps1_derivations_student": _forgot_tau(),
              "kimlee_45678_678904_ps1_derivations_student": _answered_below_the_stub(),
              "parkmin_56789_678905_ps1_derivations_student": _plus(_solved(), "import os\nos._exit(1)", at=4)}
    for name, nb in wanted.items():
        nbformat.write(nb, subs / f"{name}.ipynb")
    times = tmp_path / "times.csv"
    times.write_text("submission,submitted_at\ndoejohn_LATE_23456_678902_ps1_derivations-1.ipynb,"
                     "2027-02-03T12:00:00+00:00\n")
    manual = tmp_path / "manual.csv"
    manual.write_text("submission,question,points,comment\n"
                      "smithjane_12345_678901_ps1_derivations_student.ipynb,q2,2,clear\n"
                      "kimlee_45678_678904_ps1_derivations_student.ipynb,q2,1,found below the stub\n")
    course = tmp_path / "course.toml"
    course.write_text((assignments.FOLDER / "course.toml").read_text().replace(
        "[ps1_derivations]\n", "[ps1_derivations]\ndeadline = 2027-02-01T23:59:00Z\n", 1))
    csv_path = out / "grades.csv"
    args = [str(subs), "--csv", str(csv_path), "--assignment", "ps1_derivations", "--jobs", "2", "--course", str(course), "--submitted-times", str(times),
            "--manual", str(manual), "--release", str(out / "feedback"), "--timeout", str(TIMEOUT)]
    assert grading.main(args) == 0
    said = capsys.readouterr().out   # the rows to read first, by name
    assert "to look at, late: 1 (doejohn_LATE_23456_678902_ps1_derivations-1)" in said, said
    assert "### kimlee\\_45678\\_678904\\_ps1\\_derivations\\_student (q2)" in (out / "grades_written_answers.md").read_text()
    rows = {r["submission"].rsplit("/", 1)[-1].split("_")[0]: r for r in csv.DictReader(csv_path.open())}
    reports = {k: json.loads(Path(r["report"]).read_text()) for k, r in rows.items()}
    checked = sum(q.points for q in PS1.questions if not q.written)
    assert reports["smithjane"]["score"] == checked + 2 and reports["smithjane"]["manual_pending"] == 2
    late = reports["doejohn"]["late"]
    assert late["kept"] < 1 and late["note"] and reports["doejohn"]["score"] == round(checked * late["kept"], 2)
    q1 = reports["roealex"]["questions"][0]
    assert 0 < q1["points"] < q1["max_points"] and q1["mistakes"] == ["tau_in_chain"]
    q2 = reports["kimlee"]["questions"][1]
    assert q2["answer"] == "The bias does not depend on q or k." and q2["warning"] and q2["instructor_points"] == 1
    assert rows["kimlee"]["warnings"] and rows["kimlee"]["q2_manual"] == "1"
    assert reports["parkmin"]["score"] == checked and reports["parkmin"]["isolation"]["restarts"] == 1
    for stem in (Path(r["report"]).stem for r in rows.values()):
        assert (out / "feedback" / f"{stem}.html").exists() and (out / "feedback" / f"{stem}.md").exists()
        executed = nbformat.read(out / "grades_reports" / f"{stem}.executed.ipynb", as_version=4)
        assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")
    assert "clear" in (out / "feedback" / f"{Path(rows['smithjane']['report']).stem}.md").read_text()

    # a regrade replays the same check inputs, keeps the instructor's points and updates the gradebook row;
    # without --course it grades with the course file the report records (the default's would change the grade)
    report = Path(rows["smithjane"]["report"])
    offset = reports["smithjane"]["isolation"]["input_seed_offset"]
    assert reports["smithjane"]["graded_with"]["course"] == str(course.resolve())
    capsys.readouterr()
    assert grading.main(["--regrade", str(report), "--csv", str(csv_path)]) == 0
    said = capsys.readouterr().out
    assert f"--course {course.resolve()}, as the report was graded" in said
    assert "--assignment ps1_derivations, as the report was graded" in said   # not what the notebook says now
    assert f"feedback: rewritten in {(out / 'feedback').resolve()}, where it was released" in said   # never stale
    assert len(reports["smithjane"]["sha256"]) == 64 and reports["smithjane"]["source_bytes"]
    again = json.loads(report.read_text())
    assert again["score"] == reports["smithjane"]["score"] and again["graded_with"] == reports["smithjane"]["graded_with"]
    assert again["isolation"]["input_seed_offset"] == offset and again["questions"][1]["instructor_points"] == 2
    assert len(list(csv.DictReader(csv_path.open()))) == len(wanted)

    # written answers still to grade: an LMS would take the score as final, so the Canvas export waits
    roster = tmp_path / "roster.csv"
    roster.write_text('Student,ID,SIS User ID,SIS Login ID,Section\n"Smith, Jane",12345,S1,js,A\n')
    canvas = ["--reports", str(out / "grades_reports"), "--csv", str(csv_path), "--roster", str(roster),
              "--canvas-column", "PS1 (1)", "--canvas-csv", str(out / "canvas.csv")]
    capsys.readouterr()
    assert grading.main(canvas + ["--release", str(out / "early")]) == 2 and not (out / "canvas.csv").exists()
    assert "written answers not graded yet" in capsys.readouterr().err
    assert not (out / "early").exists()   # refused before any feedback went out saying "to grade"
    assert grading.main(canvas + ["--allow-pending"]) == 0 and (out / "canvas.csv").exists()

    # the course file edited since: a regrade says this student alone gets the new policy
    course.write_text(course.read_text().replace("grace_minutes = 15", "grace_minutes = 20", 1))   # the policy
    capsys.readouterr()
    assert grading.main(["--regrade", str(report)]) == 0
    said = capsys.readouterr()
    assert "has changed since the report was graded" in said.err
    assert f"--csv {csv_path.resolve()}, the gradebook its folder was graded into" in said.out   # never left stale
    assert grading.main(["--reports", str(out / "grades_reports"), "--csv", str(csv_path)]) == 0
    assert "graded under 2 different course files" in capsys.readouterr().err   # one student under the new policy
    # the folder graded again into the same reports: the instructor's points are kept, and it says so
    again_subs = tmp_path / "again"
    again_subs.mkdir()
    for name in ("smithjane_12345_678901_ps1_derivations_student", "doejohn_LATE_23456_678902_ps1_derivations-1"):
        (again_subs / f"{name}.ipynb").write_bytes((subs / f"{name}.ipynb").read_bytes())
    assert grading.main([str(again_subs), "--csv", str(csv_path), "--assignment", "ps1_derivations", "--course",
                         str(course), "--timeout", str(TIMEOUT)]) == 0
    said = capsys.readouterr().out
    assert "instructor's points and comments kept from the earlier reports" in said
    assert json.loads(report.read_text())["questions"][1]["instructor_points"] == 2
    # without --submitted-times, the unchanged late file keeps its time, so its penalty (it used to be dropped)
    assert "submission times kept from the earlier reports" in said and "for 1 unchanged file(s)" in said
    assert json.loads(Path(rows["doejohn"]["report"]).read_text())["late"] == late


def test_a_written_answer_whose_tag_was_lost_is_left_to_grade_not_scored_0():
    q2, nb = PS1.questions[1], _student()
    cell = next(c for c in nb.cells if grading._answer_tag(q2) in grading._tags(c))
    cell.metadata["tags"] = []
    cell.source = "The bias is the same for every key of a row."
    entry = grading._question_entry(q2, None, nb, "graded", grading.original_cells(assignments.FOLDER, PS1.id))
    assert entry["answered"] and entry["tag_missing"] and "same for every key" in entry["answer"]
    assert "no Markdown cell(s) tagged" in entry["warning"]
    where = nb.cells.index(cell) + 1   # each added cell shown apart, with where it is in the notebook
    assert f"[Markdown cell {where} of the notebook, added or changed by the student, untagged]\nThe bias" in entry["answer"]
    problems = grading.structure_problems(nb, PS1)   # the student's feedback: not "does not match"
    assert problems == [f"{q2.id}: no Markdown cell is tagged {grading._answer_tag(q2)!r} (a written answer's cell "
                        "lost its tag): your instructor reads the Markdown cells you added or changed instead"]
    report = {"questions": [entry]}
    release.total(report)
    assert report["manual_pending"] == q2.points   # waits for the instructor: the Canvas export is held back
    header, rows = release.gradebook_rows([{**report, "submission": "s", "status": "graded", "assignment": PS1.id,
                                            "max_score": q2.points, "problems": []}])
    assert dict(zip(header, rows[0]))[f"{q2.id}_answered"] == "tag missing"


def test_a_written_answer_in_two_cells_one_of_which_lost_its_tag_keeps_both_parts():
    """q4 is answered in two tagged cells: with one tag gone, the tagged part alone used to be the answer
    (the other part lost without a word); now the untagged part is shown with it and the question flagged.
    Another question's answer cells are not shown as added."""
    tag, nb = "answer-q4", _student()
    q4 = next(q for q in PS1.questions if grading._answer_tag(q) == tag)
    cells = [c for c in nb.cells if tag in grading._tags(c)]
    assert len(cells) == 2 == grading.handout_answer_cells(assignments.FOLDER, PS1.id)[tag]
    cells[0].source, cells[0].metadata["tags"] = "My proof for (a): the ranks add.", []
    cells[1].source = "As predicted: rank 2."
    other = next(c for c in nb.cells if c.cell_type == "markdown" and "answer-q2" in grading._tags(c))
    other.source = "The bias is the same for every key of a row."
    entry = grading._question_entry(q4, None, nb, "graded", grading.original_cells(assignments.FOLDER, PS1.id),
                                    handed_out=2)
    assert entry["tag_missing"] and "rank 2" in entry["answer"] and "My proof for (a)" in entry["answer"]
    assert "same for every key" not in entry["answer"] and "1 of the 2" in entry["warning"]
    problems = grading.structure_problems(nb, PS1, grading.handout_answer_cells(assignments.FOLDER, PS1.id))
    assert problems == [f"{q4.id}: 1 of the 2 Markdown cells handed out are tagged {tag!r} (a written answer's cell "
                        "lost its tag): your instructor reads the Markdown cells you added or changed instead"]


def test_a_sandbox_that_cannot_start_is_not_graded_and_the_exit_status_says_so(tmp_path, monkeypatch):
    _require_sandbox()
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(_solved(), subs / "ps1_derivations_a.ipynb")

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(grading, "_new_sandbox", broken)
    monkeypatch.setenv("BAYESATTN_GRADER_IN_PROCESS", "1")  # the patch is in this process, not in a worker
    assert grading.main([str(subs), "--csv", str(tmp_path / "g.csv"), "--assignment", "ps1_derivations"]) == 1
    row = next(csv.DictReader((tmp_path / "g.csv").open()))
    assert row["status"] == "not graded" and row["score"] == "" and "tried 2 time(s)" in row["problems"]


def test_an_executed_notebook_that_cannot_be_kept_costs_no_points(tmp_path, monkeypatch):
    def unwritable(nb, path):
        raise ValueError("outputs nbformat cannot write")

    monkeypatch.setattr(grading, "_write_executed", unwritable)
    monkeypatch.setenv("BAYESATTN_GRADER_IN_PROCESS", "1")
    nbformat.write(_solved(), tmp_path / "ps1_derivations_mine.ipynb")
    data, _ = _grade(tmp_path, tmp_path / "ps1_derivations_mine.ipynb")
    assert data["score"] == data["automatic_max"] and "executed" not in data
    assert any("executed notebook could not be kept" in p for p in data["problems"])


# ----------------------------------------------------------------------------- the sandbox's bounds (issue 35)

def _box(**limits):
    _require_sandbox()
    return _sandbox.Sandbox(grading.PACKAGE_DIR, notebook_timeout=120, replace=grading.KERNEL_REPLACES,
                            leave_out=grading.KERNEL_LEAVES_OUT, **limits)


def test_memory_is_bounded_for_the_whole_sandbox_not_per_process():
    """Four processes of 200 MiB each, every one under the kernel's per-process limit: the sandbox's
    control group holds at most its memory (400 MiB) and the files bound (64 MiB) among all of them."""
    code = """
import subprocess, sys, time
_hold = "x = b'y' * (200 * 2 ** 20); import time; time.sleep(60)"
_procs = [subprocess.Popen([sys.executable, "-c", _hold]) for _ in range(4)]
time.sleep(6)
alive = sum(p.poll() is None for p in _procs)
"""
    with _box(memory_mb=400, scratch_mb=64) as box:
        run = box.execute(code, timeout=60)
        if run.status != "dead":  # the kernel itself may be the process the bound ends
            assert box.fetch("alive", timeout=30) * 200 < 400 + 64


def test_the_kernel_cannot_write_its_supervisors_memory_or_trace_it():
    code = """
import ctypes, os
try:
    open(f"/proc/{os.getppid()}/mem", "r+b")
    mem = "opened"
except OSError as exc:
    mem = type(exc).__name__
traced = ctypes.CDLL(None, use_errno=True).ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
"""
    with _box() as box:
        assert box.execute(code, timeout=30).status == "ok"
        assert box.fetch("mem", timeout=30) == "PermissionError" and box.fetch("traced", timeout=30) == -1


def test_pid_1_is_the_supervisor_whose_control_pipes_the_kernel_cannot_open():
    """bubblewrap's own pid 1 was dumpable and held the grader's pipes to the supervisor (a kernel could
    open /proc/1/fd/1 and forge the supervisor's words): with --as-pid-1 the supervisor is pid 1."""
    code = """
import ctypes, os
opened = []
for fd in (0, 1, 2):
    try:
        os.close(os.open(f"/proc/1/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK))
        opened.append(fd)
    except OSError:
        pass
traced = ctypes.CDLL(None, use_errno=True).ptrace(16, 1, 0, 0)  # PTRACE_ATTACH
"""
    with _box() as box:
        assert box.execute(code, timeout=30).status == "ok"
        assert box.fetch("opened", timeout=30) == [] and box.fetch("traced", timeout=30) == -1


def test_a_thread_storm_stops_at_the_sandboxs_process_bound():
    code = """
import threading, time
threading.stack_size(64 * 1024)
started = 0
try:
    for _ in range(5000):
        threading.Thread(target=time.sleep, args=(20,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
"""
    with _box() as box:
        assert box.execute(code, timeout=60).status == "ok"
        assert box.fetch("started", timeout=30) < _sandbox._cgroup.PIDS_MAX


def _stop_supervisor(box):
    """SIGSTOP the supervisor from outside: the kernel cannot (it is pid 1 of the sandbox, which ignores
    a stop from inside), but a machine under load can stall it as well."""
    supervisor = int(Path(f"/proc/{box.proc.pid}/task/{box.proc.pid}/children").read_text().split()[0])
    os.kill(supervisor, signal.SIGSTOP)


def test_a_stopped_supervisor_and_a_full_pipe_never_block_the_grader():
    with _box(grace=1.0) as box:
        assert box.execute("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nx = 1", timeout=30).status == "ok"
        assert box.fetch("x", timeout=30) == 1   # the kernel's stop of pid 1 is ignored
        _stop_supervisor(box)
        start = time.monotonic()
        box._tell_supervisor(b"x" * 2 ** 20)  # more than the pipe holds, to a supervisor that does not read
        assert time.monotonic() - start < _sandbox.WRITE_DEADLINE + 2
        assert box.dead and "supervisor stopped listening" in box.dead
        assert box.execute("1", timeout=5).status == "dead"
    with _box(grace=1.0) as box:
        box.execute("x = 1", timeout=30)
        _stop_supervisor(box)
        start = time.monotonic()
        run = box.execute("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", timeout=3)
        assert run.status == "dead" and time.monotonic() - start < 3 + 1 + 2 * _sandbox.WRITE_DEADLINE + 5


@pytest.mark.skipif(not ROOT, reason="as an ordinary user the ipc folder is the kernel's own user's")
def test_the_kernel_cannot_replace_the_sockets_the_grader_connected_to():
    code = """
import os
ipc = os.path.join(os.path.dirname(os.environ["HOME"]), "ipc")
tried = []
for action in (lambda: os.unlink(ipc + "/k-1"), lambda: os.symlink("/run/x.sock", ipc + "/k-6"),
               lambda: os.chmod(ipc, 0o777)):
    try:
        action()
        tried.append("done")
    except OSError as exc:
        tried.append(type(exc).__name__)
"""
    with _box() as box:
        assert box.execute(code, timeout=30).status == "ok"
        assert box.fetch("tried", timeout=30) == ["PermissionError"] * 3


def test_a_kernels_start_is_not_starved_by_a_spinning_sandbox():
    with _box() as spinning:
        spinning.execute("import subprocess, sys\n_s = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) "
                         "for _ in range(8)]", timeout=30)
        start = time.monotonic()
        with _box():
            assert time.monotonic() - start < 20


def test_a_tree_too_deep_for_a_recursive_removal_is_removed_without_following_links(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("kept")
    top = tmp_path / "tree"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(5000):  # deeper than PATH_MAX and than Python's recursion limit
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.symlink(victim, "out", dir_fd=fd)
    os.mkdir("locked", dir_fd=fd)
    os.chmod("locked", 0, dir_fd=fd)
    os.close(fd)
    _sandbox.remove_tree(top)
    assert not top.exists() and (victim / "keep").read_text() == "kept"


@pytest.mark.parametrize("change, said", [
    (lambda d: d["cells"][0].update(source=7), "cell 1's source is int"),
    (lambda d: d["cells"][0].update(cell_type="exec"), "cell 1 is not a cell"),
    (lambda d: d.update(metadata=[1]), "metadata is not a JSON object"),
    (lambda d: d["cells"].append("x"), "is not a cell"),
    (lambda d: d["metadata"].update(flood=[[0]] * grading.MAX_JSON_VALUES), "JSON values"),
])
def test_a_notebook_is_checked_as_untrusted_data_before_it_is_parsed(change, said):
    data = json.loads(nbformat.writes(_student()))
    change(data)
    start = time.monotonic()
    report = grading.grade(json.dumps(data).encode(), name="ps1_derivations.ipynb", sandboxed=False)
    assert report["status"] == "unreadable" and said in report["problems"][0], report["problems"]
    assert time.monotonic() - start < 5


def test_as_an_ordinary_user_without_a_delegated_cgroup_the_grader_refuses_and_says_why():
    """On a real unprivileged user (nobody), where this machine lets the test become one."""
    if not ROOT or shutil.which("setpriv") is None:
        pytest.skip("needs root to become an unprivileged user")
    probe = ("from bayesattn_lite.instructor import _cgroup, _sandbox\n"
             "print(_cgroup.kind() is None)\n"
             "try:\n    _sandbox.check_sandbox()\n    print('graded')\nexcept _sandbox.SandboxUnavailable as e:\n"
             "    print('refused:', e)")
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=120, cwd="/",
                          env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    if "Permission denied" in done.stderr or "No module named" in done.stderr:
        pytest.skip(f"the unprivileged user cannot read this checkout: {done.stderr[-200:]}")
    delegated, said = done.stdout.splitlines()[:2]
    if delegated == "False":  # a delegated cgroup v2: this user's sandboxes are bounded, and graded
        assert said == "graded"
    else:
        assert said.startswith("refused: as an ordinary user") and "control group" in said and "--no-sandbox" in said


def test_canvas_late_marks_are_named_where_no_time_was_given_or_the_time_disagrees(capsys):
    from bayesattn_lite.instructor import course as _course
    on_time = {"submitted": "2027-02-01T10:00:00+00:00", "kept": 1.0, "note": ""}
    no_time = {"submitted": None, "kept": 1.0, "note": _course.NO_TIME}
    reports = [{"submission": "doejohn_LATE_2_3_ps1.ipynb", "late": no_time},
               {"submission": "smithjane_4_5_ps1.ipynb", "late": no_time},
               {"submission": "kimlee_LATE_6_7_ps1.ipynb", "late": on_time},
               {"submission": "roealex_8_9_ps1.ipynb", "late": on_time}]
    grading._warn_late(reports)
    err = capsys.readouterr().err
    assert "2 submission(s) of a set with a deadline have no submission time" in err
    assert "Canvas marks 1 of them LATE: doejohn_LATE_2_3_ps1.ipynb" in err
    assert "Canvas marks 1 submission(s) LATE whose given submission time is before the deadline" in err
    assert "kimlee_LATE" in err and "roealex" not in err and "smithjane" not in err.split("LATE:")[-1]
    grading._warn_late(reports[3:])
    assert capsys.readouterr().err == ""



class _LateKernel:
    """A fake kernel client and shell socket in one, whose kernel_info replies come late: ``lag`` "slow"
    answers the requests one after another, 2.5 s each (longer than the grader's 2-second wait); "next"
    sends each reply only when the next request arrives (the shape of ipykernel's shell-reply race)."""
    lag = "slow"

    def __init__(self, context=None):
        self.asked, self.replies, self.free_at = [], [], time.monotonic()
        self.shell_channel = self.iopub_channel = self.socket = self

    def load_connection_file(self, path):
        pass

    def start_channels(self, hb):
        pass

    def get_monitor_socket(self, events):
        return None

    def kernel_info(self):
        msg_id = f"request-{len(self.asked)}"
        if self.lag == "next" and self.asked:
            self.replies.append((time.monotonic(), self.asked[-1]))   # the previous reply goes out now
        elif self.lag == "slow":
            self.free_at = max(self.free_at, time.monotonic()) + 2.5
            self.replies.append((self.free_at, msg_id))
        self.asked.append(msg_id)
        return msg_id

    def msg_ready(self):
        return bool(self.replies) and self.replies[0][0] <= time.monotonic()

    def poll(self, ms):
        end = time.monotonic() + ms / 1000
        while not self.msg_ready() and time.monotonic() < end:
            time.sleep(0.01)
        return self.msg_ready()

    def get_msg(self, timeout=0):
        return {"parent_header": {"msg_id": self.replies.pop(0)[1]}}


@pytest.mark.parametrize("lag", ["slow", "next"])
def test_a_kernel_whose_replies_come_late_is_still_heard(monkeypatch, lag):
    """The grader asked kernel_info again every 2 s and took only the newest request's reply: a kernel
    whose every reply came after that wait (a loaded machine; or ipykernel's race, where a reply goes
    out when the next message comes in) was never heard, and the sandbox failed with "the kernel did not
    start in time" though the kernel was up. A reply to any request the grader sent now counts."""
    import jupyter_client.blocking

    monkeypatch.setattr(_LateKernel, "lag", lag)
    monkeypatch.setattr(jupyter_client.blocking, "BlockingKernelClient", _LateKernel)
    monkeypatch.setattr(_sandbox, "KERNEL_START", 8)
    box = _sandbox.Sandbox.__new__(_sandbox.Sandbox)   # no kernel, no sandbox: only the start-up handshake
    box.deadline, box.dead = time.monotonic() + 60, None
    for name, stub in (("_sockets_ready", lambda end: None), ("_read_supervisor", lambda: None), ("_log_tail", lambda: "")):
        monkeypatch.setattr(box, name, stub, raising=False)
    start = time.monotonic()
    box._connect("kernel.json")
    assert time.monotonic() - start < 4.5, "the first late reply should have been taken"


# ----------------------------------------------------------------------------- after grading, without a kernel

def _fake_report(name, out, q3=0, late=None, status="graded"):
    """A report as the grader writes it, of the shape release's tests use: 3 + q3 points of 7, q2 written."""
    return {"submission": name, "assignment": "ps1_derivations", "title": "Problem set 1", "status": status,
            "score": 3 + q3, "max_score": 7, "manual_pending": 2, "problems": [], "reference_calls": [],
            "report": str(out), "late": late or {"submitted": None, "kept": 1.0, "note": ""},
            "questions": [
                {"id": "q1", "title": "gradients", "manual": False, "points": 3, "max_points": 3, "passed": True,
                 "feedback": "right."},
                {"id": "q2", "title": "why", "manual": True, "points": None, "max_points": 2, "passed": None,
                 "answer": "the bias", "answered": True, "instructor_points": None, "comment": "",
                 "feedback": "a written answer"},
                {"id": "q3", "title": "basis", "manual": False, "points": q3, "max_points": 2, "passed": q3 == 2,
                 "feedback": "checked."}]}


def _fake_grader(monkeypatch, q3=0, late=None, status="graded"):
    """Grading without a kernel: each task gets ``_fake_report``, said as ready as the workers say it."""
    def grade_tasks(tasks, options, jobs, guard=None, done=None):
        reports = []
        for name, source, out, _when, where in tasks:
            report = _fake_report(name, out, q3, late, status)
            report.update(source=str(where), sha256=hashlib.sha256(source).hexdigest())
            if done is not None:
                done(report)
            reports.append(report)
        return reports
    monkeypatch.setattr(grading, "_grade_tasks", grade_tasks)


def _fake_class(tmp_path, names=("alice_ps1_derivations",)):
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in names:
        (subs / f"{name}.ipynb").write_text("{}")
    return subs


def _batch(subs, csv_path, *extra):
    return grading.main([str(subs), "--csv", str(csv_path), "--assignment", "ps1_derivations", "--no-sandbox",
                         *extra])


def test_a_manual_merge_after_a_release_rewrites_the_released_feedback(tmp_path, monkeypatch, capsys):
    _fake_grader(monkeypatch)
    subs, csv_path, feedback = _fake_class(tmp_path), tmp_path / "grades.csv", tmp_path / "feedback"
    assert _batch(subs, csv_path, "--release", str(feedback)) == 0
    assert "Score: 3 / 7" in (feedback / "alice_ps1_derivations.md").read_text()
    manual = tmp_path / "manual.csv"
    manual.write_text("submission,question,points,comment\nalice_ps1_derivations,q2,1.5,fair\n")
    capsys.readouterr()
    assert grading.main(["--reports", str(tmp_path / "grades_reports"), "--csv", str(csv_path),
                         "--manual", str(manual)]) == 0
    assert "Score: 4.5 / 7" in (feedback / "alice_ps1_derivations.md").read_text()   # never the old 3 / 7
    assert f"feedback: rewritten in {feedback.resolve()}, where it was released (1 report(s))" in capsys.readouterr().out


def test_grading_a_folder_again_keeps_the_release_record_and_rewrites_the_feedback(tmp_path, monkeypatch, capsys):
    _fake_grader(monkeypatch)
    subs, csv_path, feedback = _fake_class(tmp_path), tmp_path / "grades.csv", tmp_path / "feedback"
    assert _batch(subs, csv_path, "--release", str(feedback)) == 0
    _fake_grader(monkeypatch, q3=2)   # a fixed check: the same file earns more
    capsys.readouterr()
    assert _batch(subs, csv_path) == 0
    report = json.loads((tmp_path / "grades_reports" / "alice_ps1_derivations.json").read_text())
    assert report["released"] == {"folder": str(feedback.resolve()), "practice": False}   # a later --regrade finds it
    assert "Score: 5 / 7" in (feedback / "alice_ps1_derivations.md").read_text()
    assert "feedback: rewritten in" in capsys.readouterr().out
    _fake_grader(monkeypatch, status="not graded")   # the grader's own failure: the student's feedback stays
    assert _batch(subs, csv_path) == 1
    assert "Score: 5 / 7" in (feedback / "alice_ps1_derivations.md").read_text()
    assert "is left as it was for alice_ps1_derivations" in capsys.readouterr().err


def test_extension_keys_that_match_no_submission_are_named(tmp_path, monkeypatch, capsys):
    _fake_grader(monkeypatch)
    subs = _fake_class(tmp_path, ["smithjane_12345_678901_ps1_derivations", "doejohn_23456_678902_ps1_derivations"])
    course = tmp_path / "course.toml"
    course.write_text("[ps1_derivations]\ndeadline = 2027-02-01T23:59:00Z\n\n[ps1_derivations.extensions]\n"
                      '"12345" = 2027-02-04T23:59:00Z\ndoejohn = 2027-02-04T23:59:00Z\n"99999" = 2027-02-04T23:59:00Z\n'
                      "roealx = 2027-02-04T23:59:00Z\n")
    assert _batch(subs, tmp_path / "grades.csv", "--course", str(course)) == 0
    err = capsys.readouterr().err
    assert "2 key(s) of [ps1_derivations.extensions]" in err and "match no submission" in err
    named = err.split("were not applied: ")[1].split(" (")[0]
    assert named == "99999, roealx"   # the keys that match a file are not named


def test_rows_of_the_submission_times_that_match_no_file_and_files_without_a_row_are_named(tmp_path, capsys):
    import argparse
    times = tmp_path / "times.csv"
    times.write_text("submission,submitted_at\nalice.ipynb,2027-02-01T10:00:00+00:00\n"
                     "alice-1.ipynb,2027-02-02T10:00:00+00:00\n")
    args = argparse.Namespace(late_from_mtime=False, submitted_times=times)
    paths = [tmp_path / "alice.ipynb", tmp_path / "bob.ipynb"]
    got = grading._submitted_times(args, paths)
    assert list(got) == [paths[0]]
    err = capsys.readouterr().err
    assert "1 row(s) of" in err and "match no file graded" in err and "alice-1.ipynb" in err
    assert "has no row for 1 file(s)" in err and "bob.ipynb" in err
    grading._submitted_times(args, paths[:1], whole_folder=False)   # one file of a class: the others' rows are not its
    assert capsys.readouterr().err == ""


def _course_with_extension(tmp_path, extension):
    course = tmp_path / "course.toml"
    course.write_text("[ps1_derivations]\ndeadline = 2027-02-01T23:59:00Z\n\n[ps1_derivations.extensions]\n"
                      f"smithjane = {extension}   # medical\n")
    return course


def test_a_regrade_after_an_extension_alone_changed_says_the_students_regrade_is_enough(tmp_path, capsys):
    import argparse
    course = _course_with_extension(tmp_path, "2027-02-04T23:59:00Z")
    used = {"course": str(course.resolve()), "course_sha256": grading._file_sha256(course),
            "course_policy_sha256": grading._policy_sha256(course), "folder": None}
    old = tmp_path / "smithjane.json"
    old.write_text(json.dumps({"graded_with": used, "questions": []}))
    course.write_text(course.read_text() + 'doejohn = 2027-02-06T23:59:00Z\n')   # one student's extension added
    args = argparse.Namespace(regrade=old, course=None, folder=None, assignment=None, csv=None)
    grading._regrade_settings(args)
    err = capsys.readouterr().err
    assert "only in its [<set>.extensions] tables" in err and "regrading the students whose extensions changed" in err
    assert "grade the folder again" not in err
    reports = [{"submission": "a", "max_score": 7, "graded_with": used},   # one report regraded since: one policy
               {"submission": "b", "max_score": 7, "graded_with": {**used, "course_sha256": "edited"}}]
    grading._warn_mixed(reports)
    assert capsys.readouterr().err == ""
    course.write_text(course.read_text().replace("deadline = 2027-02-01", "deadline = 2027-02-02"))
    grading._regrade_settings(argparse.Namespace(regrade=old, course=None, folder=None, assignment=None, csv=None))
    assert "grade the folder again to treat every student alike" in capsys.readouterr().err   # the policy changed


def test_one_file_with_a_deadline_and_no_time_says_the_late_policy_was_not_applied(tmp_path, monkeypatch, capsys):
    from bayesattn_lite.instructor import course as _course
    _fake_grader(monkeypatch, late={"submitted": None, "kept": 1.0, "note": _course.NO_TIME})
    sub = _fake_class(tmp_path) / "alice_ps1_derivations.ipynb"
    assert grading.main([str(sub), "--report", str(tmp_path / "out" / "alice.json"), "--no-sandbox",
                         "--assignment", "ps1_derivations"]) == 0
    assert "1 submission(s) of a set with a deadline have no submission time" in capsys.readouterr().err


def test_a_regrade_says_only_its_own_students_missing_time(tmp_path, monkeypatch, capsys):
    from bayesattn_lite.instructor import course as _course
    no_time = {"submitted": None, "kept": 1.0, "note": _course.NO_TIME}
    _fake_grader(monkeypatch, late=no_time)
    subs, csv_path = _fake_class(tmp_path, ["alice_ps1_derivations", "bob_ps1_derivations"]), tmp_path / "grades.csv"
    assert _batch(subs, csv_path) == 0
    assert "2 submission(s) of a set with a deadline have no submission time" in capsys.readouterr().err
    assert grading.main(["--regrade", str(tmp_path / "grades_reports" / "alice_ps1_derivations.json"),
                         "--no-sandbox"]) == 0
    assert "1 submission(s) of a set with a deadline have no submission time" in capsys.readouterr().err


def test_a_refused_canvas_export_speaks_of_released_feedback_only_when_a_release_was_asked(tmp_path, monkeypatch,
                                                                                            capsys):
    _fake_grader(monkeypatch)
    subs, csv_path = _fake_class(tmp_path, ["smithjane_12345_678901_ps1_derivations"]), tmp_path / "grades.csv"
    assert _batch(subs, csv_path) == 0
    roster = tmp_path / "roster.csv"
    roster.write_text('Student,ID,SIS User ID,SIS Login ID,Section\n"Smith, Jane",12345,S1,js,A\n')
    canvas = ["--reports", str(tmp_path / "grades_reports"), "--csv", str(csv_path), "--roster", str(roster),
              "--canvas-column", "PS1 (1)", "--canvas-csv", str(tmp_path / "canvas.csv")]
    capsys.readouterr()
    assert grading.main(canvas) == 2
    err = capsys.readouterr().err
    assert "so no Canvas import was written" in err and "feedback" not in err
    assert grading.main(canvas + ["--release", str(tmp_path / "feedback")]) == 2
    assert "no feedback was released by this command" in capsys.readouterr().err

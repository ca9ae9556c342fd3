"""The grader's sandbox: one fresh, limited Jupyter kernel per submission, and the data channel to it.

Private to ``bayesattn_lite.instructor.grading``. The isolation is bubblewrap's (``bwrap``, the sandbox behind
Flatpak; Debian's package ``bubblewrap``), the same as root and as a plain user:

- **Namespaces**: new user, mount, PID, network, IPC and UTS namespaces. The kernel's user has no
  privileges; as root the whole sandbox also runs as a user id of its own (random, no groups, used by
  no other process). No network (the kernel talks to the grader over Unix sockets in its folder).
  Its processes see only each other, and when the sandbox's first process ends, every process the
  kernel started ends with it, whatever it did to detach or rename itself.
- **A minimal file system** (``bubblewrap_argv``): /usr and Python read-only; a temporary folder with
  ``home/`` (the kernel's working folder, HOME, Jupyter and matplotlib folders), ``io/`` (the answers
  the kernel writes for the grader), ``ipc/`` (its sockets) and ``pkg/``, a read-only copy of this
  package that the kernel imports (PYTHONPATH) whose ``checks/`` holds a stand-in alone
  (``grading.KERNEL_CHECKS``) and which has no ``instructor/`` (no grader, no problem-set solutions):
  the checks, and the references inside them, run in the grader only;
  private /tmp, /var/tmp and /dev/shm, removed with the folder. Nothing else: not the checkout (its
  .git, the built book), not the instructor notebooks, not the other submissions, not the grader's
  reports. An installed copy of the package inside a visible folder is covered.
- **Bounds for the whole sandbox** (``_cgroup``): one control group per sandbox holds every process
  the launcher starts, and none can leave it: memory (the kernel's and its files' together), processes
  and threads, CPU time. As root the sandbox's folder is a tmpfs of its own of ``scratch_mb`` (a full
  one is this sandbox's problem; unmounting removes whatever the kernel wrote, however deep); as an
  ordinary user it is on /dev/shm, whose pages count against the group. Per process, too: address space
  (RLIMIT_AS), file size, core dumps. Time per cell and per notebook, enforced by the grader (SIGINT,
  then the end of everything); output counted on the grader's side, every frame of every message, and
  the kernel killed past a cap; one frame is at most MAX_MESSAGE bytes (ZeroMQ drops a larger one, and
  the grader treats the broken connection as "output too large").
- **A supervisor** inside the sandbox (stdlib only, ``python -I -S``): it starts the kernel in a new
  session with the limits, is the "child subreaper" of everything it starts, passes the grader's
  interrupt on, and kills them all when the grader says stop; bubblewrap ends it when the grader goes
  away (``--die-with-parent``). It is not dumpable (the kernel cannot trace it or write its memory);
  the grader never blocks on it (non-blocking writes with a deadline, then the group is killed from
  outside), nor on the kernel (ZeroMQ sends time out).
- **Sockets the grader checked**: it connects once (no reconnection) to the kernel's five sockets, each
  checked to be a socket of the kernel's user; as root their folder is then the grader's, so the kernel
  cannot replace them with a path to another socket of the machine.

Where bubblewrap cannot start (not installed, user namespaces disabled), or no control group can be
made (an ordinary user without a delegated cgroup v2 subtree), ``check_sandbox`` says why and how to fix
it, and the grader refuses; ``Sandbox(sandboxed=False)`` (``--no-sandbox``) runs the
supervisor and kernel as the grader's user without any of this, for notebooks one trusts.

Nothing the kernel prints is read as a verdict. The grader asks the kernel for data only
(``call``/``fetch``): the request goes in the code of a silent execute request, the answer comes back
as a JSON file in ``io/`` under a random name, read with a size cap and strict parsing (``decode``
accepts numbers, strings, lists, dicts and arrays of numbers, nothing else).
"""

import atexit
import builtins
import compileall
import functools
import json
import os
import py_compile
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import _cgroup

MiB = 2 ** 20
MAX_MESSAGE = 4 * MiB  # one ZeroMQ message from the kernel; larger ones are dropped (connection reset)
MAX_KEPT_OUTPUT = 2 * MiB  # outputs kept for the executed notebook the instructor reads, per submission
MAX_ANSWER = 8 * MiB  # one answer file (what a check gets back from one call; JSON, so parsing costs ~10x)
KERNEL_START = 60  # seconds for the kernel to start and answer kernel_info
DEFAULT_SCRATCH = 512  # MiB of files one sandbox may write (its home, /tmp, answers, log together)
WRITE_DEADLINE = 2.0  # seconds a write to the supervisor or the kernel may wait before the sandbox is ended


# ----------------------------------------------------------------------------- where we run

class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot start a sandbox here; the message says why and how to fix it."""


HOW_TO_FIX = ("install bubblewrap (Debian and Ubuntu: apt-get install bubblewrap) on Linux with user "
              "namespaces enabled (sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0; "
              "in Docker, run the grader with --security-opt seccomp=unconfined or use a VM), or pass "
              "--no-sandbox to grade notebooks you trust without one")
_PROBED = {}


def check_sandbox():
    """Raise SandboxUnavailable unless bubblewrap can start a sandbox as the grader would (probed once)."""
    if "error" not in _PROBED:
        _PROBED["error"] = _probe()
    if _PROBED["error"]:
        raise SandboxUnavailable(_PROBED["error"])


def _probe():
    if not sys.platform.startswith("linux"):
        return f"the grader's sandbox needs Linux (this is {sys.platform}): " + HOW_TO_FIX
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: " + HOW_TO_FIX
    if _cgroup.unavailable():
        return _cgroup.unavailable()
    with tempfile.TemporaryDirectory(prefix="bal-probe-") as root:
        os.chmod(root, 0o711)
        group = stage_dir = None
        try:
            group = _cgroup.Group(256 * MiB, 1)
            command, stage_dir, _ = sandboxed_command([sys.executable, "-I", "-S", "-c", "print('ok')"],
                                                      Path(root), [], [], [], sandbox_uid(),
                                                      cgroup=group.procs_files)
            done = subprocess.run(command, capture_output=True, timeout=60)
        except OSError as exc:
            return f"the sandbox could not be prepared ({exc}): " + HOW_TO_FIX
        except subprocess.TimeoutExpired as exc:
            return f"bubblewrap did not start ({exc}): " + HOW_TO_FIX
        finally:
            if stage_dir:
                shutil.rmtree(stage_dir, ignore_errors=True)
            if group is not None:
                group.remove()
    if done.returncode or done.stdout.strip() != b"ok":
        why = done.stderr.decode(errors="replace").strip()[-300:] or f"exit status {done.returncode}"
        return f"bubblewrap cannot create the sandbox here ({why}): " + HOW_TO_FIX
    return ""


@functools.lru_cache(maxsize=None)
def bubblewrap_version():
    """bwrap's version, asked once (each report names it)."""
    try:
        return subprocess.run(["bwrap", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "bubblewrap"


def sandbox_uid():
    """As root, a user id of its own for one sandbox (random, used by no other process); else None."""
    return 1_000_000 + secrets.randbelow(1_000_000_000) if privileged() else None


def sandboxed_command(command, root, writable, scratch, hide, uid, chdir=None, cgroup=()):
    """(the command that runs ``command`` in a sandbox over ``root``, as ``uid`` when given, inside the
    control group of ``cgroup``; the staging folder the caller removes afterwards, or None; the paths
    covered). See ``bubblewrap_argv``."""
    stage_dir = staging_folder() if uid is not None else None
    argv, stage, covered = bubblewrap_argv(root, writable, scratch, hide, stage_dir)
    argv += ["--chdir", str(chdir)] if chdir else []
    return launch_argv(argv + ["--"] + command, stage, uid, cgroup), stage_dir, covered


# What the kernel sees of /etc: what the dynamic loader, fonts and user look-ups need, nothing else.
ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/fonts",
       "/etc/alternatives", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf")


def bubblewrap_argv(root, writable, scratch, hide, stage_dir=None):
    """bwrap's arguments for a sandbox over ``root`` (the grader's temporary folder): (argv, the
    folders the launcher binds to a staging place first, paths covered).

    New user, mount, PID, network, IPC and UTS namespaces; the kernel's user has no privileges. Its
    file system: the system's programs and libraries (/usr) and Python read-only; ``root`` read-only,
    with ``writable`` (its home, the answer and socket folders, the log) writable; private /tmp,
    /var/tmp and /dev/shm on ``scratch``; a new /proc and a minimal, read-only /dev; the root itself
    read-only (nothing can be written but the scratch and ``writable`` folders). Nothing else of the
    machine: no checkout, no instructor folder, no other submission. ``hide`` and any installed copy
    of this package (the checks' reference code) are covered where they fall inside what is visible.
    The sandbox ends when the grader does (--die-with-parent) and takes every process it started with
    it (the PID namespace ends with its first process).

    With ``stage_dir`` (as root, where bubblewrap runs as a user of its own), a folder that user
    could not reach (Python under /root, a temporary folder under a private one) is bound by the
    launcher to an empty folder of ``stage_dir`` first, and bubblewrap binds it from there.
    """
    stage = []

    def source(path):
        path = os.path.realpath(path)
        if stage_dir is None or _reachable_by_others(path):
            return path
        for real, staged in stage:
            if path == real or path.startswith(real + "/"):
                return staged + path[len(real):]
        stage.append((path, os.path.join(stage_dir, str(len(stage)))))
        return stage[-1][1]

    root = os.path.realpath(root)
    source(root)  # staged whole, if it must be: its parts below (scratch, writable) are reached through it
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--uid", "1000", "--gid", "1000",
            "--as-pid-1",   # the supervisor is pid 1, not bubblewrap's dumpable reaper holding its control pipes
            "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for path in ETC:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # the private /tmp first: a Python or a sandbox folder below /tmp (a virtual environment in a
    # checkout under /tmp, say) is mounted on top of it, not hidden by it
    for name, path in zip(("/tmp", "/var/tmp", "/dev/shm"), scratch):
        argv += ["--bind", source(path), name]
    pythons = dict.fromkeys(os.path.realpath(p) for p in
                            (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))))
    pythons = [p for p in pythons if not p.startswith("/usr/") and not any(
        q != p and p.startswith(q.rstrip("/") + "/") for q in pythons)]
    if os.path.dirname(sys.executable) not in pythons and not os.path.realpath(sys.executable).startswith("/usr/"):
        pythons.append(os.path.dirname(sys.executable))  # a venv's bin folder of symlinks
    for path in dict.fromkeys(pythons):
        argv += ["--ro-bind", source(path), path]
    argv += ["--ro-bind", source(root), root]
    for path in writable:
        argv += ["--bind", source(path), os.path.realpath(path)]
    visible = ["/usr", *pythons]
    package = [os.path.realpath(p) for p in sys.path if p and os.path.isdir(os.path.join(p, "bayesattn_lite"))]
    covered = []
    for path in dict.fromkeys([*hide, *(os.path.join(p, "bayesattn_lite") for p in package)]):
        real = os.path.realpath(path)
        if not any(real == v or real.startswith(v.rstrip("/") + "/") for v in visible):
            continue  # not mounted at all
        argv += (["--tmpfs", real] if os.path.isdir(real) else ["--ro-bind", "/dev/null", real])
        covered.append(path)
    # the sandbox's own root and /dev are tmpfs folders bubblewrap makes: read-only, so that the only
    # places the kernel can write files are the scratch file systems and the writable folders above
    argv += ["--remount-ro", "/", "--remount-ro", "/dev"]
    return argv, stage, covered


def staging_folder(prefix="bal-stage-"):
    """An empty folder that any user can enter, for the launcher's staging binds (removed by the caller)."""
    for base in dict.fromkeys([tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"]):
        if os.path.isdir(base) and _reachable_by_others(os.path.realpath(base) + "/x"):
            folder = tempfile.mkdtemp(prefix=prefix, dir=base)
            os.chmod(folder, 0o711)
            return folder
    raise OSError("no temporary folder that another user can enter (/tmp, /var/tmp, /dev/shm) for the sandbox")


def _reachable_by_others(path):
    """Whether a user with no rights of its own can reach ``path`` (execute for others on every folder above)."""
    parts = Path(path).parts
    return all(os.stat(Path(*parts[:n])).st_mode & 0o001 for n in range(1, len(parts)))


# The launcher (stdlib only) puts itself into the sandbox's control group first, so that everything it
# starts is counted and bounded there. As root it then binds any Python folder the sandbox's own user
# could not reach into a staging place, in a mount namespace of its own that nothing else sees, and
# becomes that user; then it starts bubblewrap.
LAUNCHER = r'''
import ctypes, json, os, sys
cfg = json.loads(sys.argv[1])
for procs in cfg["cgroup"]:
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
if cfg["stage"]:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        sys.exit("launcher: no mount namespace (errno %d)" % ctypes.get_errno())
    libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None)  # MS_REC | MS_PRIVATE
    for source, target in cfg["stage"]:
        os.makedirs(target, mode=0o755, exist_ok=True)
        if libc.mount(source.encode(), target.encode(), None, 4096 | (1 << 14), None) != 0:  # MS_BIND | MS_REC
            sys.exit("launcher: cannot bind %s (errno %d)" % (source, ctypes.get_errno()))
if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["uid"])
    os.setuid(cfg["uid"])
os.execv(cfg["argv"][0], cfg["argv"])  # an absolute path: the standard library is out of reach now
'''


def launch_argv(argv, stage, uid, cgroup=()):
    """The command that starts ``argv`` (bubblewrap's) inside the control group whose ``cgroup.procs``
    files are ``cgroup``, after staging and as ``uid`` (as root)."""
    if uid is None and not cgroup:
        return argv
    config = {"stage": stage, "uid": uid, "argv": argv, "cgroup": list(cgroup)}
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(config)]


LAUNCHER_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH", "TZ")


def launcher_environment():
    """The environment of the launcher, bubblewrap and the supervisor: what starting Python needs, nothing
    of the instructor's (a token, a password). bubblewrap is process 1 of the sandbox and runs as the
    kernel's user, so its /proc/1/environ is readable from inside; the kernel gets its own ``env``."""
    return {k: os.environ[k] for k in LAUNCHER_VARIABLES if k in os.environ}


def privileged():
    """True when the grader can give the kernel a user of its own (root on Linux). The environment
    variable BAYESATTN_GRADER_NO_ROOT=1 makes root behave as a plain user (to test that mode)."""
    return (sys.platform.startswith("linux") and os.geteuid() == 0
            and os.environ.get("BAYESATTN_GRADER_NO_ROOT") != "1")


# ----------------------------------------------------------------------------- the data codec
# One source, executed here (grader) and sent to the kernel: what crosses is JSON built from plain
# values; arrays travel as raw little-endian bytes with their dtype and shape.

CODEC = r'''
import base64 as _b64, json as _json, sys as _sys

_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool")
_MAX_DEPTH, _MAX_ITEMS = 12, 100000


def _enc(x, depth=0):
    if depth > _MAX_DEPTH:
        return ["opaque", "a structure nested too deep"]
    if x is None:
        return ["none"]
    if x is True or x is False:
        return ["bool", bool(x)]
    if type(x) is int:
        return ["int", str(x)] if abs(x) < 10 ** 30 else ["opaque", "int"]
    if type(x) is float:
        return ["float", x.hex()]
    if type(x) is str:
        return ["str", x]
    if type(x) in (list, tuple):
        if len(x) > _MAX_ITEMS:
            return ["opaque", type(x).__name__]
        return [type(x).__name__, [_enc(v, depth + 1) for v in x]]
    if type(x) is dict:
        if len(x) > _MAX_ITEMS:
            return ["opaque", "dict"]
        return ["dict", [[_enc(k, depth + 1), _enc(v, depth + 1)] for k, v in x.items()]]
    torch = _sys.modules.get("torch")
    np = _sys.modules.get("numpy")
    if torch is not None and isinstance(x, torch.Tensor):
        t = torch.Tensor.detach(x).cpu().contiguous()
        t = t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in _DTYPES:
            return ["opaque", "a tensor of dtype " + dtype]
        return ["tensor", dtype, list(t.shape), _b64.b64encode(t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()).decode()]
    if np is not None and isinstance(x, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(x)
        if str(a.dtype) not in _DTYPES:
            return ["opaque", "a numpy array of dtype " + str(a.dtype)]
        kind = "ndarray" if isinstance(x, np.ndarray) else "npscalar"
        return [kind, str(a.dtype), list(a.shape), _b64.b64encode(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).decode()]
    return ["opaque", type(x).__name__]


def _array(dtype, shape, data):
    import numpy as np
    if dtype not in _DTYPES or not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise ValueError("bad array")
    raw = _b64.b64decode(data.encode("ascii"), validate=True)
    count = 1
    for s in shape:
        count *= s
    if count * np.dtype(dtype).itemsize != len(raw):
        raise ValueError("array size does not match its shape")
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)


def _opaque(name):
    """A stand-in whose type has the kernel object's type name, so a check can say "got Foo". A new type
    each time, kept nowhere: a cache of them would outlive the submission (a flood of names in one
    changed what the next student's feedback said)."""
    name = "".join(c for c in str(name) if c.isalnum() or c in "_ ")[:60] or "object"
    return type(name.replace(" ", "_"), (), {"__repr__": lambda self, n=name: "<" + n + ">"})()


def _dec(v, depth=0):
    if depth > _MAX_DEPTH + 1 or not isinstance(v, list) or not v or not isinstance(v[0], str):
        raise ValueError("malformed data")
    kind = v[0]
    if kind == "none" and len(v) == 1:
        return None
    if kind == "bool" and len(v) == 2 and isinstance(v[1], bool):
        return v[1]
    if kind == "int" and len(v) == 2 and isinstance(v[1], str) and len(v[1]) <= 32:
        return int(v[1])
    if kind == "float" and len(v) == 2 and isinstance(v[1], str) and len(v[1]) <= 40:
        return float.fromhex(v[1])
    if kind == "str" and len(v) == 2 and isinstance(v[1], str):
        return v[1]
    if kind in ("list", "tuple") and len(v) == 2 and isinstance(v[1], list) and len(v[1]) <= _MAX_ITEMS:
        items = [_dec(x, depth + 1) for x in v[1]]
        return items if kind == "list" else tuple(items)
    if kind == "dict" and len(v) == 2 and isinstance(v[1], list) and len(v[1]) <= _MAX_ITEMS:
        out = {}
        for pair in v[1]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError("malformed dict")
            key = _dec(pair[0], depth + 1)
            if not isinstance(key, (str, int, float, bool, type(None), tuple)):
                raise ValueError("unhashable dict key")
            out[key] = _dec(pair[1], depth + 1)
        return out
    if kind in ("tensor", "ndarray", "npscalar") and len(v) == 4 and isinstance(v[1], str) and isinstance(v[3], str):
        a = _array(v[1], v[2], v[3])
        if kind == "ndarray":
            return a.copy()
        if kind == "npscalar":
            return a.reshape(()).copy()[()]
        import torch
        return torch.from_numpy(a.copy())
    if kind == "opaque" and len(v) == 2:
        return _opaque(v[1])
    raise ValueError("unknown data kind " + repr(kind)[:40])
'''

_codec = {}
exec(compile(CODEC, "<bayesattn_lite codec>", "exec"), _codec)
encode, decode = _codec["_enc"], _codec["_dec"]

# Run in the kernel (user namespace) for every request; defines one function and calls it.
HELPER = r'''
def _bal_answer(op, name, payload, out, _codec_src):
    import os as _os, json as _json
    codec = {}
    exec(_codec_src, codec)
    ns = globals()
    try:
        if name not in ns:
            result = ["missing"]
        elif op == "describe":
            result = ["callable" if callable(ns[name]) else "value"]
        elif op == "fetch":
            result = ["ok", codec["_enc"](ns[name])]
        else:
            args = codec["_dec"](_json.loads(payload))
            result = ["ok", codec["_enc"](ns[name](*args))]
    except BaseException as exc:
        result = ["raised", type(exc).__name__, str(exc)[:2000]]
    tmp = out + ".part"
    with open(tmp, "w") as f:
        _json.dump(result, f)
    _os.replace(tmp, out)
'''


class RemoteError(Exception):
    """The learner's code raised in the kernel (its type and message, as text)."""


def remote_exception(type_name, message):
    """An exception to raise in the grader for the learner's ``type_name: message``. A built-in
    Exception keeps its class (a check can tell NotImplementedError); anything else, even a
    KeyboardInterrupt or SystemExit, becomes an Exception subclass of the same name."""
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except TypeError:
            pass
    safe = "".join(c for c in type_name if c.isalnum() or c == "_")[:60] or "Error"
    return type(safe, (RemoteError,), {})(message)


# ----------------------------------------------------------------------------- the supervisor

SUPERVISOR = r'''
import ctypes, json, os, resource, select, signal, sys, time

cfg = json.loads(sys.argv[1])


def say(*words):
    try:
        os.write(1, (" ".join(str(w) for w in words) + "\n").encode())
    except OSError:
        pass


libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
if libc is not None:
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the kernel come to us
    # PR_SET_DUMPABLE 0: the kernel, the same user without privileges, can no longer ptrace us or write
    # our memory through /proc/<pid>/mem (it once rewrote this loop to shed the kernel's limits)
    libc.prctl(4, 0, 0, 0, 0)
say("ready")

pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        for name, value in cfg["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        log = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 4096)
        os.chdir(cfg["cwd"])
        os.umask(0o077)
        os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
    except BaseException as exc:
        os.write(2, ("supervisor: could not start the kernel: %r\n" % (exc,)).encode())
    os._exit(127)
say("pid", pid)


def ours():
    """Every other process of the sandbox's PID namespace (bubblewrap's init, pid 1, excepted), or
    without a sandbox our children (the kernel and every orphan it left)."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) in (os.getpid(), 1 if cfg["pid_namespace"] else 0):
            continue
        if cfg["pid_namespace"]:
            found.append(int(entry))
            continue
        try:  # bytes: a process may give itself a name that is not UTF-8
            with open("/proc/%s/stat" % entry, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid():
            found.append(int(entry))
    return found


def reap():
    global pid
    while True:
        try:
            done, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if done == 0:
            return
        if done == pid:
            say("exit", status)
            pid = None


def clean():
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    killed, quiet = set(), 0
    for _ in range(500):
        found = ours()
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
                killed.add(p)
            except OSError:
                pass
        reap()
        quiet = quiet + 1 if not found else 0
        if quiet >= 3 and not ours():
            break
        time.sleep(0.02)
    say("clean", len(killed))


signal.signal(signal.SIGTERM, lambda *a: (clean(), os._exit(0)))
while True:
    ready, _, _ = select.select([0], [], [], 0.2)
    reap()
    if ready:
        words = os.read(0, 4096)
        if b"int" in words.split() and pid is not None:  # the grader's interrupt, for the cell that runs
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass
        if not words or b"stop" in words.split():
            clean()
            os._exit(0)
'''


# ----------------------------------------------------------------------------- the sandbox's resources

def _cpus():
    """CPU cores one sandbox may use: all but one, so that the grader and the next kernel's start
    always have one (a kernel that spins cannot starve them)."""
    return float(max(1, (os.cpu_count() or 2) - 1))


def _scratch_base(sandboxed):
    """Where a sandbox's folder is made. As an ordinary user, on /dev/shm (a tmpfs) when there is one,
    so that what the kernel writes is memory charged to its control group, not the shared disk; as
    root the folder gets a tmpfs of its own (``_mount_tmpfs``)."""
    if sandboxed and not privileged() and os.access("/dev/shm", os.W_OK | os.X_OK):
        return tempfile.gettempdir() if tempfile.gettempdir().startswith("/dev/shm/") else "/dev/shm"
    return None


def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(folder, size_mb):
    """Mount a tmpfs of ``size_mb`` MiB on ``folder`` (as root): the sandbox's files, bounded."""
    import ctypes
    options = f"size={int(size_mb)}m,mode=0711".encode()
    if _libc().mount(b"bal-sandbox", str(folder).encode(), b"tmpfs", 2 | 4, options) != 0:  # MS_NOSUID | MS_NODEV
        raise OSError(ctypes.get_errno(), f"cannot mount a tmpfs on {folder}")


def _unmount(folder):
    """Detach the sandbox's tmpfs: its files are gone with it once no process holds them."""
    _libc().umount2(str(folder).encode(), 2)  # MNT_DETACH


def remove_tree(path):
    """Remove ``path`` whatever the kernel made of it: any depth, any modes, links never followed; then
    check that it is gone (raise OSError if not). Iterative and flat: each folder's entries are moved
    up to ``path`` itself and removed from there, so no path ever gets long and no fd stays open."""
    path = str(path)
    if not os.path.lexists(path):
        return
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        os.unlink(path)
        return
    os.chmod(path, 0o700)
    top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    token = secrets.token_hex(8)  # moved names no entry the kernel made can already have
    try:
        moved = 0
        while True:
            entries = list(os.scandir(top))
            if not entries:
                break
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.name, dir_fd=top)
                    continue
                os.chmod(entry.name, 0o700, dir_fd=top)  # a folder, not a link: chmod does not follow
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
                try:
                    for inner in list(os.scandir(sub)):
                        moved += 1
                        os.rename(inner.name, f".bal-{token}-{moved}", src_dir_fd=sub, dst_dir_fd=top)
                finally:
                    os.close(sub)
                os.rmdir(entry.name, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(path)
    if os.path.lexists(path):
        raise OSError(f"the sandbox's folder {path} is still there after its removal")


_ZMQ = {}


def _zmq_context():
    """One ZeroMQ context for the grader process (each context has threads of its own): messages over
    MAX_MESSAGE dropped, a few queued, sends that give up after WRITE_DEADLINE."""
    if "context" not in _ZMQ:
        import zmq
        context = zmq.Context()
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        context.setsockopt(zmq.RCVHWM, 64)
        context.setsockopt(zmq.SNDHWM, 64)
        context.setsockopt(zmq.LINGER, 0)
        context.setsockopt(zmq.SNDTIMEO, int(WRITE_DEADLINE * 1000))
        context.setsockopt(zmq.RECONNECT_IVL, -1)  # connect once, to the checked socket: never again to its path
        _ZMQ["context"] = context
    return _ZMQ["context"]


# ----------------------------------------------------------------------------- the sandbox

class ExecResult:
    """What one execute request did: status is "ok", "error", "interrupted" (ran past its time and
    stopped on SIGINT) or "dead" (the kernel is gone: see ``Sandbox.dead``)."""

    def __init__(self, status, error=None, seconds=0.0, outputs=()):
        self.status, self.error, self.seconds = status, error, seconds
        self.outputs = list(outputs)  # nbformat outputs of the cell, for the executed notebook


_PACKAGES, _PACKAGES_LOCK = {}, threading.Lock()


def kernel_package(package_dir, replace, leave_out):
    """The package as a kernel gets it, made once per grader process: without ``leave_out`` (folders),
    with the files of ``replace`` (path below the package -> text) in place of its own, and compiled, so
    that each kernel does not compile the package again (about 0.35 s a kernel). A replacement inside a
    left-out folder (``checks/__init__.py``) makes that folder again, with the replacement alone in it.
    No bytecode of the grader's own files goes with it: everything is compiled from the copy."""
    key = (str(package_dir), tuple(sorted(replace.items())), tuple(leave_out))
    with _PACKAGES_LOCK:
        if key not in _PACKAGES:
            folder = Path(tempfile.mkdtemp(prefix="bal-package-"))
            atexit.register(shutil.rmtree, folder, True)
            copy = folder / Path(package_dir).name
            shutil.copytree(package_dir, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", *leave_out))
            for name, text in replace.items():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                (copy / name).write_text(text, encoding="utf-8")
            # unchecked: a copy's new modification times do not make Python compile it again
            compileall.compile_dir(copy, quiet=2, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            _PACKAGES[key] = copy
        return _PACKAGES[key]


class Sandbox:
    """A kernel for one submission. Use as a context manager; ``execute`` runs code, ``describe``,
    ``fetch`` and ``call`` exchange data with the learner's namespace."""

    def __init__(self, package_dir, hide=(), notebook_timeout=600, memory_mb=4096, max_output_mb=16,
                 grace=5.0, replace=None, leave_out=(), sandboxed=True, scratch_mb=DEFAULT_SCRATCH):
        self.package_dir = Path(package_dir)
        self.leave_out = tuple(leave_out)  # subfolders of the package the kernel's copy does not have
        self.sandboxed = sandboxed  # False: --no-sandbox, the kernel runs as the grader's user, unconfined
        self.replace = dict(replace or {})  # path below the package copy -> the text the kernel gets there
        self.hide = [str(Path(p).resolve()) for p in hide if p]
        self.notebook_timeout = notebook_timeout
        self.deadline = time.monotonic() + notebook_timeout
        self.memory_mb, self.max_output = memory_mb, int(max_output_mb * MiB)
        self.scratch_mb = scratch_mb
        self.group, self.mounted, self.uid = None, False, None  # the control group, the own tmpfs, the kernel's uid
        self.grace = grace
        self.output_bytes = 0
        self.kept_bytes = 0  # of outputs kept for the executed notebook (MAX_KEPT_OUTPUT at most)
        self.dead = None  # a sentence once the kernel is gone
        self.info = {"sandbox": None, "kernel_user": None, "hidden": []}
        self.root = self.stage_dir = None
        self.proc = None
        self.kc = None
        self._lines = b""
        self.kernel_pid = None

    # --------------------------------------------------------------------- start and stop

    def __enter__(self):
        """Start the kernel unless it was started already (``start``); the notebook's clock starts now."""
        if self.proc is None:
            self.start()
        self.deadline = time.monotonic() + self.notebook_timeout
        return self

    def start(self):
        """Start the kernel (it then waits, idle, for ``with``); on failure nothing is left behind."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        # As root the sandbox starts as a user id of its own (random, no groups): bubblewrap then maps
        # the kernel's user onto it, a user no other process has. As anyone else it maps onto the
        # grader's user, which the kernel cannot use outside its namespaces.
        uid = self.uid = sandbox_uid() if self.sandboxed else None
        self.root = Path(tempfile.mkdtemp(prefix="bal-grade-", dir=_scratch_base(self.sandboxed)))
        if self.sandboxed:
            # every process of the sandbox, and the files it writes, in one bounded control group
            self.group = _cgroup.Group((self.memory_mb + self.scratch_mb) * MiB, _cpus())
            if privileged():  # a file system of a fixed size: a full one is this sandbox's problem alone
                _mount_tmpfs(self.root, self.scratch_mb)
                self.mounted = True
        os.chmod(self.root, 0o711)  # the kernel's user may enter by name, not list
        home, io, ipc, log = (self.root / n for n in ("home", "io", "ipc", "log"))
        scratch = [self.root / "scratch" / n for n in ("tmp", "var-tmp", "shm")]
        (self.root / "scratch").mkdir(mode=0o711)
        for d in (home, io, ipc, log, *scratch):
            d.mkdir(mode=0o700)
            if uid is not None:
                os.chown(d, uid, uid)
        pkg = self.root / "pkg"
        shutil.copytree(kernel_package(self.package_dir, self.replace, self.leave_out), pkg / self.package_dir.name)
        for path in [pkg, *pkg.rglob("*")]:  # read-only for everyone, also for a same-uid kernel
            os.chmod(path, 0o555 if path.is_dir() else 0o444)
        self.io, self.ipc = io, ipc
        from jupyter_client.connect import write_connection_file
        conn = str(self.root / "kernel.json")
        write_connection_file(conn, transport="ipc", ip=str(ipc / "k"), key=secrets.token_hex(16).encode(),
                              shell_port=1, iopub_port=2, stdin_port=3, control_port=4, hb_port=5)
        os.chmod(conn, 0o644)
        tmp = "/tmp" if self.sandboxed else str(scratch[0])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
               "TMPDIR": tmp, "IPYTHONDIR": str(home / ".ipython"),
               "JUPYTER_CONFIG_DIR": str(home / ".jupyter"), "JUPYTER_DATA_DIR": str(home / ".jupyter-data"),
               "JUPYTER_RUNTIME_DIR": str(home / ".jupyter-runtime"), "MPLCONFIGDIR": str(home / ".matplotlib"),
               "MPLBACKEND": "Agg", "PYTHONPATH": str(pkg), "PYTHONNOUSERSITE": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "BAYESATTN_PROGRESS": "0"}
        rlimits = {"RLIMIT_AS": self.memory_mb * MiB, "RLIMIT_CORE": 0, "RLIMIT_FSIZE": self.scratch_mb * MiB}
        if uid is not None:
            rlimits["RLIMIT_NPROC"] = _cgroup.PIDS_MAX  # per uid: this kernel's own, threads included
        config = {"pid_namespace": self.sandboxed, "rlimits": rlimits, "log": str(log / "kernel.log"),
                  "cwd": str(home), "env": env,
                  "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", conn,
                           "--HistoryManager.enabled=False"]}
        command = [sys.executable, "-I", "-S", "-c", SUPERVISOR, json.dumps(config)]
        if self.sandboxed:
            command, self.stage_dir, covered = sandboxed_command(command, self.root, [home, io, ipc, log], scratch,
                                                                  self.hide, uid, chdir=home,
                                                                  cgroup=self.group.procs_files)
            self.info.update(sandbox=bubblewrap_version(), hidden=covered,
                             kernel_user="an unprivileged user" + (" id of its own" if uid is not None else ""),
                             namespaces="user, mount, pid, network, ipc, uts",
                             bounds=f"cgroup {self.group.kind}: {self.memory_mb + self.scratch_mb} MiB of memory and "
                                    f"files, {_cgroup.PIDS_MAX} processes and threads, {_cpus():g} CPU core(s) for "
                                    "the whole sandbox; " + (f"a {self.scratch_mb} MiB file system of its own"
                                                             if self.mounted else "its files on a tmpfs"))
        else:
            self.info.update(sandbox="none (--no-sandbox)", kernel_user="the grader's user", namespaces="none")
        with open(self.root / "sandbox.err", "wb") as err:  # what bubblewrap says if it cannot start
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True, cwd=str(self.root), env=launcher_environment())
        os.set_blocking(self.proc.stdin.fileno(), False)  # a stopped supervisor never blocks the grader
        try:
            self._read_line("ready", 30)
        except RuntimeError as exc:
            said = (self.root / "sandbox.err").read_text(errors="replace").strip()[-300:]
            raise RuntimeError(f"{exc}" + (f": {said}" if said else "")) from None
        self.kernel_pid = int(self._read_line("pid", 30))  # in the sandbox's PID namespace when sandboxed
        self._connect(conn)

    def _read_line(self, word, timeout):
        """The rest of the supervisor's next line starting with ``word``."""
        import select
        end = time.monotonic() + timeout
        while True:
            while b"\n" in self._lines:
                line, self._lines = self._lines.split(b"\n", 1)
                head, _, rest = line.decode().partition(" ")
                if head == word:
                    return rest
                if head == "exit":
                    self.dead = "the kernel exited while starting"
            left = end - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the sandbox did not start (no {word!r} from the supervisor)")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    raise RuntimeError("the sandbox's supervisor exited while starting")
                self._lines += chunk

    def _connect(self, conn):
        from jupyter_client.blocking import BlockingKernelClient
        end = time.monotonic() + min(KERNEL_START, max(1.0, self.deadline - time.monotonic()))
        self._sockets_ready(end)
        import zmq
        self.kc = BlockingKernelClient(context=_zmq_context())
        self.kc.load_connection_file(conn)
        self.kc.start_channels(hb=False)  # no heartbeat: the supervisor says when the kernel exits
        self.iopub, self.shell = self.kc.iopub_channel.socket, self.kc.shell_channel.socket
        self.monitor = self.iopub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        asked = set()
        while True:  # kernel_info until it answers (a busy machine may take a while). A reply to any request
            # counts: on a loaded machine a reply can take longer than one wait, and waiting only for the
            # newest request's reply, while discarding the others', never ended (each reply came too late)
            try:
                asked.add(self.kc.kernel_info())
            except zmq.Again:
                pass
            if asked and self._reply_to(asked, min(2.0, max(0.1, end - time.monotonic()))):
                break
            if not asked:
                time.sleep(0.05)   # no request could be sent yet: wait a little, do not spin
            self._read_supervisor()
            if self.dead or time.monotonic() >= end:
                raise self._not_started()
        time.sleep(0.1)  # let the iopub subscription settle, then drop the start-up messages
        while self.kc.iopub_channel.msg_ready():
            self.kc.iopub_channel.get_msg(timeout=0)

    def _not_started(self):
        log = self._log_tail()
        return RuntimeError("the kernel did not start" + (" (it exited)" if self.dead else " in time")
                            + (f": {log}" if log else ""))

    def _sockets_ready(self, end):
        """Wait until the kernel has bound its five sockets, then make sure the grader connects to them
        and nothing else: as root the ``ipc`` folder becomes the grader's (the kernel can no longer
        replace an entry), and each entry must be a socket of the kernel's user, not a link or a file
        the kernel planted to point the grader at another socket of the machine."""
        names = [f"k-{n}" for n in range(1, 6)]
        while not all(os.path.lexists(self.ipc / n) for n in names):
            self._read_supervisor()
            if self.dead or time.monotonic() >= end:
                raise self._not_started()
            time.sleep(0.02)
        if self.uid is not None:
            os.chown(self.ipc, 0, 0)
            os.chmod(self.ipc, 0o755)
        for name in names:
            info = os.lstat(self.ipc / name)
            if not stat.S_ISSOCK(info.st_mode) or (self.uid is not None and info.st_uid != self.uid):
                raise RuntimeError(f"the kernel's ipc/{name} is not a socket of its own: not connected to")

    def _reply_to(self, msg_ids, timeout):
        """Wait up to ``timeout`` s for the shell reply to one of ``msg_ids``; True if one came."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.kc.shell_channel.msg_ready() or self.shell.poll(int(1000 * max(0.01, end - time.monotonic()))):
                msg = self.kc.shell_channel.get_msg(timeout=0)
                if msg.get("parent_header", {}).get("msg_id") in msg_ids:
                    return True
        return False

    def _read_supervisor(self):
        """Read what the supervisor said, without waiting; an "exit" line means the kernel is gone."""
        import select
        while select.select([self.proc.stdout], [], [], 0)[0]:
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            self._lines += chunk
            if not chunk:
                break
        if self._kernel_exited() or self.proc.poll() is not None:
            self.dead = self.dead or "the kernel exited"

    def _exits_within(self, seconds):
        """Whether the supervisor says, within ``seconds``, that the kernel exited."""
        import select
        end = time.monotonic() + seconds
        while not self._kernel_exited() and time.monotonic() < end:
            if select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))[0]:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    return True
                self._lines += chunk
        return self._kernel_exited()

    def _death(self):
        """Why the kernel died, as far as the grader can tell."""
        if self.group is not None and self.group.out_of_memory():
            return f"the kernel died: the sandbox ran out of its {self.memory_mb + self.scratch_mb} MiB of memory and files"
        return "the kernel died (it exited or was killed, e.g. out of memory)"

    def _kernel_exited(self):
        """True when the supervisor has said ``exit <status>`` (its lines are words, never paths)."""
        return any(line.startswith(b"exit ") for line in self._lines.split(b"\n"))

    def _log_tail(self):
        """The end of the kernel's log, read as untrusted: never through a link, never from a pipe."""
        try:
            fd = os.open(self.root / "log" / "kernel.log", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                return ""
            f.seek(max(0, info.st_size - 300))
            return f.read(300).decode(errors="replace").strip()

    def kill(self, reason):
        """Stop the kernel and everything it started; later requests answer "dead" with ``reason``."""
        if self.dead is None:
            self.dead = reason
        if self.proc is not None and self.proc.poll() is None:
            self._tell_supervisor(b"stop\n")
            try:  # the supervisor kills the kernel's processes; one the kernel stopped does not answer
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.group is not None:  # every process of the sandbox, wherever it hid
            self.group.kill()
        # Without a sandbox, the supervisor may have been killed (same uid): end the kernel's group here.
        if self.kernel_pid is not None and not self.sandboxed:
            try:
                os.killpg(self.kernel_pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _tell_supervisor(self, words):
        """Write to the supervisor's pipe without ever blocking: past WRITE_DEADLINE (a supervisor the
        kernel stopped, a full pipe) the sandbox is ended from outside."""
        end = time.monotonic() + WRITE_DEADLINE
        while words:
            try:
                words = words[os.write(self.proc.stdin.fileno(), words):]
            except BlockingIOError:
                if time.monotonic() >= end:
                    break
                time.sleep(0.01)
            except (OSError, ValueError):
                return
        if words and self.dead is None:
            self.dead = "the sandbox's supervisor stopped listening: the sandbox was ended"
        if words:
            if self.group is not None:
                self.group.kill()
            if self.proc.poll() is None:
                self.proc.kill()

    def close(self):
        self.kill(self.dead or "closed")
        if self.kc is not None:
            try:
                self.monitor.close(0)
                self.kc.stop_channels()
            except Exception:  # noqa: BLE001 - best effort
                pass
        if self.root is not None:
            if self.mounted:  # everything the kernel wrote goes with the file system, however deep
                _unmount(self.root)
            remove_tree(self.root)
        if self.group is not None:
            self.group.remove()
        if self.stage_dir is not None:  # empty folders here: the binds lived in the launcher's namespace
            shutil.rmtree(self.stage_dir, ignore_errors=True)

    # --------------------------------------------------------------------- executing

    def execute(self, code, timeout, silent=False):
        """Run ``code``; at most ``timeout`` s (and never past the notebook's deadline), then SIGINT,
        then after ``grace`` s everything is killed."""
        import zmq
        if self.dead:
            return ExecResult("dead", self.dead)
        start = time.monotonic()
        try:
            msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False,
                                     stop_on_error=False)
        except zmq.Again:  # the kernel stopped reading its requests (SNDTIMEO of the shared context)
            self.kill("the kernel stopped taking requests: it was killed")
            return ExecResult("dead", self.dead)
        end = min(start + timeout, self.deadline)
        interrupted, replied, idle, error, outputs = False, False, False, None, []
        poller = zmq.Poller()
        for sock in (self.iopub, self.shell, self.kc.stdin_channel.socket, self.monitor):
            poller.register(sock, zmq.POLLIN)
        poller.register(self.proc.stdout, zmq.POLLIN)
        while not (replied and idle):
            now = time.monotonic()
            if now >= end:
                if interrupted or now >= self.deadline:
                    why = ("the notebook ran past its time limit" if now >= self.deadline else
                           f"a cell ran longer than {timeout:g} s and did not stop on an interrupt (SIGINT)")
                    self.kill(why + ": the kernel and its processes were killed")
                    return ExecResult("dead", self.dead, time.monotonic() - start)
                interrupted = True
                self._tell_supervisor(b"int\n")  # it sends the kernel SIGINT
                end = min(now + self.grace, self.deadline)
            events = dict(poller.poll(max(1, int(1000 * min(0.5, end - now)))))
            if self.monitor in events:  # the connection broke: the kernel died, or ZeroMQ dropped a large frame
                self.monitor.recv_multipart()
                self.kill(self._death() if self._exits_within(0.5) else
                          f"the kernel sent a message over {MAX_MESSAGE // MiB} MiB (output too large): it was killed")
                return ExecResult("dead", self.dead, time.monotonic() - start)
            if self.proc.stdout.fileno() in events or self.proc.stdout in events:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                self._lines += chunk
                if self._kernel_exited() or not chunk:
                    self.kill(self._death())
                    return ExecResult("dead", self.dead, time.monotonic() - start)
            # Every message is the kernel's and may be hostile: read while the clock and the output cap allow
            # (a flood of costly messages cannot hold the grader past its deadline), and one the grader cannot
            # read (a bad signature, a missing field) ends the kernel as a crash would.
            try:
                while self.kc.iopub_channel.msg_ready() and self._may_read(end):
                    msg = self.kc.iopub_channel.get_msg(timeout=0)
                    self.output_bytes += _message_bytes(msg)
                    if msg.get("parent_header", {}).get("msg_id") != msg_id:
                        continue
                    kind, content = msg["msg_type"], msg["content"]
                    self._keep(msg, outputs)
                    if kind == "status" and content.get("execution_state") == "idle":
                        idle = True
                    elif kind == "error" and error is None:
                        error = _error_words(content)
                while self.kc.stdin_channel.msg_ready() and self._may_read(end):   # never asked for, counted
                    self.output_bytes += _message_bytes(self.kc.stdin_channel.get_msg(timeout=0))
                while self.kc.shell_channel.msg_ready() and self._may_read(end):
                    msg = self.kc.shell_channel.get_msg(timeout=0)
                    self.output_bytes += _message_bytes(msg)
                    if msg.get("parent_header", {}).get("msg_id") == msg_id:
                        replied = True
                        if msg["content"].get("status") == "error" and error is None:
                            error = _error_words(msg["content"])
            except Exception as exc:  # noqa: BLE001 - any message the grader cannot process ends the kernel, never the grader
                self.kill(f"the kernel sent a message the grader cannot read ({type(exc).__name__}: "
                          f"{str(exc)[:120]}): it was killed")
                return ExecResult("dead", self.dead, time.monotonic() - start)
            if self.output_bytes > self.max_output:
                self.kill(f"the notebook printed more than {self.max_output / MiB:g} MiB: the kernel was killed "
                          "(print less, e.g. shapes or a few values)")
                return ExecResult("dead", self.dead, time.monotonic() - start)
        seconds = time.monotonic() - start
        if interrupted:
            return ExecResult("interrupted", error, seconds, outputs)
        return ExecResult("error" if error else "ok", error, seconds, outputs)

    def _may_read(self, end):
        """Another message may be read now: the cell's time and the output cap are not yet used up."""
        return time.monotonic() < end and self.output_bytes <= self.max_output

    def _keep(self, msg, outputs):
        """Add a cell's output to ``outputs`` while the notebook's kept outputs stay under MAX_KEPT_OUTPUT
        (the rest is counted against --max-output all the same, but not kept)."""
        if msg["msg_type"] not in ("stream", "display_data", "execute_result", "error"):
            return
        size = _size(msg.get("content", {}))
        if self.kept_bytes + size > MAX_KEPT_OUTPUT:
            return
        try:
            from nbformat.v4 import output_from_msg
            outputs.append(output_from_msg(msg))
            self.kept_bytes += size
        except Exception:  # noqa: BLE001 - a message nbformat cannot read or validate is not kept (its bytes are counted)
            pass

    # --------------------------------------------------------------------- data

    def _request(self, op, name, payload, timeout):
        """Ask the kernel's helper; the decoded JSON answer, or raise RemoteError."""
        out = self.io / f"{secrets.token_hex(12)}.json"
        helper = f"_{secrets.token_hex(8)}"   # a fresh name each time: no fixed name to look for on the stack
        code = (HELPER.replace("def _bal_answer(", f"def {helper}(", 1)
                + f"\n{helper}({op!r}, {name!r}, {payload!r}, {str(out)!r}, {CODEC!r})\ndel {helper}\n")
        result = self.execute(code, timeout, silent=True)
        if result.status == "dead":
            raise RemoteError(f"the kernel is no longer running ({self.dead})")
        if result.status == "interrupted":
            raise TimeoutError(f"it ran longer than {timeout:g} s and was interrupted")
        try:
            fd = os.open(out, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            raise RemoteError("no answer came back from the kernel"
                              + (f" ({result.error})" if result.error else "")) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ANSWER:
                raise RemoteError(f"the answer is larger than {MAX_ANSWER // MiB} MiB or not a file")
            with os.fdopen(fd, "rb") as f:
                fd = None
                raw = f.read(MAX_ANSWER + 1)
        finally:
            if fd is not None:
                os.close(fd)
            try:
                os.unlink(out)
            except OSError:
                pass
        try:
            answer = json.loads(raw.decode("utf-8"), parse_constant=_reject)
        except (ValueError, UnicodeDecodeError):
            raise RemoteError("the kernel's answer is not valid data") from None
        if not isinstance(answer, list) or not answer or not isinstance(answer[0], str):
            raise RemoteError("the kernel's answer is not valid data")
        return answer

    def describe(self, name, timeout):
        """"callable", "value" or "missing"."""
        answer = self._request("describe", name, "", timeout)
        if answer[0] == "raised":
            raise remote_exception(*_raised(answer))
        if answer[0] not in ("callable", "value", "missing"):
            raise RemoteError("the kernel's answer is not valid data")
        return answer[0]

    def fetch(self, name, timeout):
        """The value of ``name`` in the learner's namespace, rebuilt from data."""
        return self._value(self._request("fetch", name, "", timeout))

    def call(self, name, args, timeout):
        """``name(*args)`` in the kernel; arguments and result cross as data."""
        return self._value(self._request("call", name, json.dumps(encode(tuple(args))), timeout))

    @staticmethod
    def _value(answer):
        if answer[0] == "raised":
            raise remote_exception(*_raised(answer))
        if answer[0] == "missing":
            raise NameError("it is not defined")
        if answer[0] != "ok" or len(answer) != 2:
            raise RemoteError("the kernel's answer is not valid data")
        try:
            return decode(answer[1])
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise RemoteError(f"the kernel's answer is not valid data ({exc})") from None


def _raised(answer):
    if len(answer) != 3 or not all(isinstance(a, str) for a in answer[1:]):
        raise RemoteError("the kernel's answer is not valid data")
    return answer[1][:100], answer[2][:2000]


def _reject(constant):
    raise ValueError(f"{constant} is not allowed")


def _error_words(content):
    """An error message's name and value, cut short (the kernel writes both)."""
    return f"{str(content.get('ename'))[:80]}: {str(content.get('evalue', ''))[:200]}"


def _message_bytes(msg):
    """What a message from the kernel counts against --max-output: every part of it (the header it claims
    to answer too) and its binary buffers (extra frames), not its content alone."""
    return (sum(_size(msg.get(part, {})) for part in ("header", "parent_header", "metadata", "content"))
            + sum(memoryview(b).nbytes for b in msg.get("buffers", []) or []))


_CONTROL_CHARACTERS = dict.fromkeys(set(range(32)) - {9, 10, 13})   # str.translate drops them (not \t, \n, \r: 2 each)


def _size(obj):
    """Bytes of text in a message's content (what the learner printed or displayed): keys count as values do
    (a 3.8 MB key in each message had carried 570 MB past the caps), an int by its digits."""
    if isinstance(obj, str):   # a control character is written as 6 (\u0000) in the notebook's JSON
        return len(obj) + 5 * (len(obj) - len(obj.translate(_CONTROL_CHARACTERS)))
    if isinstance(obj, dict):
        return sum(_size(k) + _size(v) for k, v in obj.items())
    if isinstance(obj, int) and not isinstance(obj, bool):
        return max(8, obj.bit_length() // 3)
    if isinstance(obj, (list, tuple)):
        return sum(_size(v) for v in obj)
    return 8

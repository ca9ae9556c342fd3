"""Bounds for a whole sandbox, not for each of its processes: one control group per sandbox.

Private to the grader. Per-process limits (RLIMIT_AS, RLIMIT_NPROC) are not a bound on a sandbox: ten
processes each under the memory limit hold ten times it, and the process count of a user id is shared
with everything else that user runs. A control group counts every process and thread the sandbox
starts, and the files it writes on a tmpfs (their pages are charged to the group of the writer), and
its processes cannot leave it (moving a process needs write access to the group's files, which
belong to the grader).

Two kinds of machine have them:
- **cgroup v1, as root**: one folder per controller (memory, pids, cpu) below the grader's own group.
- **cgroup v2 with a delegated subtree** (root, or a user given one: ``systemd-run --user --scope -p
  Delegate=yes ...``): a folder below the grader's own group. v2 allows processes only in leaves, so
  the grader first moves itself into a leaf of its own (``bal-grader``).
Where neither is writable, ``unavailable()`` says why and the grader refuses to run a sandbox.
"""

import os
import secrets
import signal
import time
from pathlib import Path

V1_CONTROLLERS = ("memory", "pids", "cpu")
PIDS_MAX = 512  # processes and threads of one sandbox (a kernel with torch uses a few dozen)


def _mounts():
    """{controller or "v2": (mount point, the mount's root in its hierarchy)} from /proc/self/mountinfo."""
    found = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        dash = fields.index("-")
        kind, options = fields[dash + 1], fields[dash + 3].split(",")
        if kind == "cgroup2":
            found.setdefault("v2", (fields[4], fields[3]))
        elif kind == "cgroup":
            for name in V1_CONTROLLERS:
                if name in options:
                    found.setdefault(name, (fields[4], fields[3]))
    return found


def _own_groups():
    """{controller or "v2": this process's group path} from /proc/self/cgroup."""
    groups = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else ["v2"]:
            groups[name] = path
    return groups


def _folder(mount, group):
    point, root = mount
    relative = group[len(root):] if root != "/" and group.startswith(root) else group
    return Path(point + relative)


def _v1_bases():
    mounts, groups = _mounts(), _own_groups()
    if not all(c in mounts and c in groups for c in V1_CONTROLLERS):
        return None
    bases = {c: _folder(mounts[c], groups[c]) for c in V1_CONTROLLERS}
    return bases if all(os.access(b, os.W_OK) for b in bases.values()) else None


def _v2_base():
    """The grader's own v2 group, once it is ready for children (controllers on for its subtree)."""
    mounts, groups = _mounts(), _own_groups()
    if "v2" not in mounts or "v2" not in groups:
        return None
    base = _folder(mounts["v2"], groups["v2"])
    try:
        offered = (base / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if not {"memory", "pids"} <= set(offered) or not os.access(base, os.W_OK):
        return None
    wanted = " ".join("+" + c for c in ("memory", "pids", "cpu") if c in offered)
    try:
        (base / "cgroup.subtree_control").write_text(wanted)
    except OSError:  # processes live in the group itself (v2 allows them in leaves only): move ours out
        try:
            leaf = base / "bal-grader"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
            (base / "cgroup.subtree_control").write_text(wanted)
        except OSError:
            return None
    return base


_KIND = {}


def kind():
    """("v1", {controller: folder}) or ("v2", folder) where the grader can make groups; None if it cannot."""
    if "kind" not in _KIND:
        v1 = _v1_bases()
        v2 = None if v1 else _v2_base()
        _KIND["kind"] = ("v1", v1) if v1 else ("v2", v2) if v2 else None
    return _KIND["kind"]


def unavailable():
    """Why the grader cannot bound a whole sandbox here ("" when it can)."""
    if kind() is not None:
        return ""
    who = "as root" if os.geteuid() == 0 else "as an ordinary user"
    return (f"{who}, the grader cannot make a control group here, so it cannot bound a sandbox's memory, "
            "processes and CPU as a whole (per-process limits do not: several processes each under the limit "
            "hold more). Run the grader as root on a machine with cgroup v1 or v2 mounted writable, or as a "
            "user with a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes python -m "
            "bayesattn_lite.instructor.grading ...); in Docker, give the container a writable cgroup "
            "(--cgroupns=private with a cgroup v2 host); or pass --no-sandbox to grade notebooks you trust without one")


class Group:
    """One sandbox's control group: ``memory_bytes`` for all its processes and the tmpfs pages they
    write, at most PIDS_MAX processes and threads, ``cpus`` cores of time. The launcher writes its own
    pid into ``procs_files`` before it starts bubblewrap, so everything the sandbox runs is inside."""

    def __init__(self, memory_bytes, cpus):
        self.kind, base = kind()
        memory_bytes = int(memory_bytes)
        name = f"bal-{os.getpid()}-{secrets.token_hex(6)}"
        period = 100_000
        quota = int(cpus * period)
        if self.kind == "v1":
            self.folders = [base[c] / name for c in V1_CONTROLLERS]
            settings = {"memory": [("memory.limit_in_bytes", memory_bytes), ("memory.memsw.limit_in_bytes", memory_bytes)],
                        "pids": [("pids.max", PIDS_MAX)],
                        "cpu": [("cpu.cfs_period_us", period), ("cpu.cfs_quota_us", quota)]}
            writes = [(base[c] / name, settings[c]) for c in V1_CONTROLLERS]
        else:
            self.folders = [base / name]
            writes = [(base / name, [("memory.max", memory_bytes), ("memory.swap.max", 0), ("pids.max", PIDS_MAX),
                                     ("cpu.max", f"{quota} {period}")])]
        self.procs_files = [str(f / "cgroup.procs") for f in self.folders]
        try:
            for folder, pairs in writes:
                folder.mkdir()
                for file, value in pairs:
                    if (folder / file).exists():  # memsw and swap exist only where swap accounting does
                        (folder / file).write_text(str(value))
        except OSError:
            self.remove()
            raise

    def add(self, pid):
        """Put the running process ``pid`` (a grading worker) into the group."""
        for file in self.procs_files:
            Path(file).write_text(str(pid))

    def pids(self):
        found = set()
        for file in self.procs_files:
            try:
                found.update(int(p) for p in Path(file).read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def kill(self):
        """SIGKILL every process of the group until none is left (a fork in flight is caught next round)."""
        kill_file = self.folders[0] / "cgroup.kill"
        if self.kind == "v2" and kill_file.exists():
            try:
                kill_file.write_text("1")
            except OSError:
                pass
        for _ in range(500):
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        return not self.pids()

    def out_of_memory(self):
        """Whether the group hit its memory bound (the kernel then died of it, not of the learner's bug)."""
        folder = self.folders[0]
        try:
            file = "memory.oom_control" if self.kind == "v1" else "memory.events"
            events = dict(line.split() for line in (folder / file).read_text().splitlines())
            return int(events.get("oom_kill", 0)) > 0
        except (OSError, ValueError):
            return False

    def remove(self):
        """Kill what is left and remove the group's folders."""
        self.kill()
        for folder in getattr(self, "folders", []):
            for _ in range(50):  # the kernel removes a group a moment after its last process is reaped
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def remove_leftovers(pid):
    """Remove the groups a process ``pid`` made and left behind (it was killed before it could)."""
    found = kind()
    if found is None:
        return
    bases = found[1].values() if found[0] == "v1" else [found[1]]
    for base in bases:
        for folder in base.glob(f"bal-{pid}-*"):
            group = Group.__new__(Group)
            group.kind, group.folders = found[0], [folder]
            group.procs_files = [str(folder / "cgroup.procs")]
            group.remove()

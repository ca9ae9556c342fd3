"""A grading worker's process, started by ``grading._Worker``: ``python -m bayesattn_lite.instructor._worker FD FOLDER``.

It imports only the sandbox first, so that its first kernel starts while the grader's modules import
(torch alone takes about two seconds); then submissions come in over the connection ``FD`` and reports
go out, until the grader says stop. Its temporary files live in ``FOLDER`` (the grader removes it).
"""

import concurrent.futures
import sys
import tempfile
from multiprocessing.connection import Connection

from . import _sandbox


def main(fd, folder):
    conn = Connection(int(fd))
    tempfile.tempdir = folder
    jobs, options, first, groups = conn.recv()
    _sandbox._PROBED["error"] = ""  # the grader probed the sandbox before it started this worker
    # the sandboxes' control groups beside this worker's own, not inside it: its memory bound is the
    # grader's side alone, and the grader finds what a worker it had to kill left behind
    _sandbox._cgroup._KIND["kind"] = groups
    starting = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    early = starting.submit(lambda: _sandbox.Sandbox(**first).start())
    from . import grading  # the first kernel starts meanwhile
    grading.serve(conn, options, jobs, early)
    starting.shutdown()


if __name__ == "__main__":
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # as the grader's: where a worker that seems stuck is
    main(*sys.argv[1:3])

"""nbclient's NotebookClient, with a shell channel that looks for the kernel's reply again every second.

The stall this avoids (jupyter/nbclient#312, nbconvert#1921 and #2029, issue 36): after a cell,
often a widget cell, the kernel has run it, replied and gone idle, and the client still waits, up
to the whole per-cell timeout. Reproduced here on 2026-12-05 in chapter 4 (cell 76, a slider) and
chapter 6: a second client on the same kernel showed the cell had run and the kernel answered at
once, while nbclient sat in one ``shell_channel.get_msg(timeout=<cell timeout>)``, a single
asyncio poll of the ZMQ socket that was never woken. Polling in slices of ``POLL`` seconds asks
the socket again each time, so a reply that is already there is read within a second. Nothing
else changes: the same messages, the same cell timeout.

    from steady_client import SteadyNotebookClient     # scripts/ on sys.path, as when run from there
    SteadyNotebookClient(nb, timeout=600, kernel_name="python3").execute()
"""

import queue
import time

from nbclient import NotebookClient

POLL = 1.0  # seconds per look at the shell socket


def poll_in_slices(channel, poll=POLL):
    """Make ``channel.get_msg(timeout)`` (an async ZMQ channel) wait in slices of ``poll`` seconds."""
    wait_once = channel.get_msg

    async def get_msg(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            try:
                return await wait_once(timeout=left)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg
    return channel


class SteadyNotebookClient(NotebookClient):
    """A NotebookClient whose shell channel polls in slices (see the module notes)."""

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        poll_in_slices(kc.shell_channel)
        return kc

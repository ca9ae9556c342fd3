"""nbclient's NotebookClient without the widget stall: the shell socket re-armed after every send.

The stall (jupyter/nbclient#312, nbconvert#1921 and #2029, issue 36): after a cell, often a widget
cell, the kernel has run it, replied and gone idle, and the client still waits, up to the whole
per-cell timeout, then carries on as if nothing happened. Its root cause, found on 2026-12-05 (a
reproducer stalled in 44 of 123 widget cells, and chapter 2's ``advantage_explorer`` in 19 of 180
under load):

1. nbclient waits for the cell's reply in one ``await shell_channel.get_msg(timeout)``: an asyncio
   poll of the shell socket, woken by libzmq's ``ZMQ_FD``, which signals once per change (edge).
2. While it waits, a cell with an ipywidgets ``Output`` (every ``interact``, so every panel of
   ``bayesattn_lite.widgets``) makes nbclient *send* on that same socket: its stand-in for the
   Output widget syncs each new output to the kernel (``nbclient/output_widget.py``, ``sync_state``).
3. jupyter_client sends through a synchronous shadow of the asyncio socket (``Session.send``,
   since jupyter_client 7.4.2), so pyzmq's asyncio layer never learns of the send. A libzmq send
   processes the socket's pending commands, and with them the signal of a reply that has just
   arrived: the poll is never woken, and reads the reply only at its timeout. (pyzmq's own sends
   re-check waiting polls afterwards, pyzmq PR #1208; the shadow send skips that.)

The fix, at that root: after each send on the shell channel, read the socket's EVENTS through the
asyncio wrapper (``socket.get(zmq.EVENTS)``, not ``getsockopt``, which bypasses it), which is what
pyzmq does after its own sends: a reply already there is then handled at once. The reproducer: 0 of
123 cells stalled with it, 0 of 180 ``advantage_explorer`` cells under load. The newest
jupyter_client (8.10), nbclient (0.11) and pyzmq (27.3) all still have the bug; jupyter_client 7.4.1
does not. ``tests/test_scripts.py`` reproduces the lost wake-up with two sockets and checks the fix.

A second guard stays: the shell channel is also polled in slices of ``POLL`` seconds, so any other
missed wake-up costs a second, not a timeout. (A different failure, seen once in chapter 6: the
kernel could not send its reply, "Socket operation on non-socket"; no client can read a reply
that was never sent, and ``execute_notebooks.py`` runs such a notebook once more.)

    from steady_client import SteadyNotebookClient     # scripts/ on sys.path, as when run from there
    SteadyNotebookClient(nb, timeout=600, kernel_name="python3").execute()
"""

import queue
import time

import zmq
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


def rearm_after_send(channel):
    """Make ``channel.send`` (a synchronous send on an asyncio socket) re-check the socket's events,
    so that a reply whose wake-up the send consumed is still seen (see the module notes)."""
    send = channel.send

    def send_and_rearm(msg):
        send(msg)
        channel.socket.get(zmq.EVENTS)   # through pyzmq's asyncio wrapper: wakes a waiting poll

    channel.send = send_and_rearm
    return channel


class SteadyNotebookClient(NotebookClient):
    """A NotebookClient whose shell channel is re-armed after each send and polls in slices."""

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        poll_in_slices(rearm_after_send(kc.shell_channel))
        return kc

"""How many CPU threads a training loop uses, chosen by timing its own steps.

torch starts one thread per core. On a quiet 2-core machine two threads make a step of chapter 6's
small run faster than one (0.47 s against 0.69 s for 60 steps); with another CPU-bound job beside
them the two threads wait on each other at every operation and one thread is four times faster
(0.6 s against 2.7 s). Which is faster cannot be known before the loop runs, and it changes when
the other job starts or stops. So a loop wrapped in ``tuned`` times its own steps:

1. *Probe*: a few steps at each thread count (all of them, then one), the first step after a
   switch not counted (it pays for starting the threads); the faster median is kept.
2. *Hold* the choice, and ask again after ``every`` seconds (longer where a probe of the slower
   count would cost more than 5% of the hold), or sooner when the kept count's steps become 1.5
   times as slow as when it was chosen (another job has started).

Only a loop whose numbers do not depend on the thread count may be tuned, or a run would depend on
the machine's load. ``batched.train`` is one: its products split the work over models and rows, not
along a sum, and the tests check that a run is the same, bit for bit, at one thread and at two.
``train.train`` is not: torch's layers split some sums by thread (a transformer's weights differ
by up to 3e-4 after 40 Adam steps at one thread and at two), so it keeps torch's count.
``BAYESATTN_TUNE_THREADS=0`` keeps torch's count in every loop (to time one count against another).
"""

import os
import statistics
import time
from collections import deque

import torch

from . import _validate
from ._types import Positive, Whole, checked

PROBE_STEPS = 3       # steps timed at each count; the median is robust to one slow step
EVERY_SECONDS = 30.0  # how long a choice holds before it is checked again
SLOWER = 1.5          # the kept count's steps this much slower than when chosen: check again now


@checked
def tuned(steps, device, probe: Whole(1) = PROBE_STEPS, every: Positive = EVERY_SECONDS):
    """Yield from ``steps`` (a loop's iterable, e.g. its tqdm bar), each step on the thread count
    that is faster now. On a GPU, with one thread, or with BAYESATTN_TUNE_THREADS=0, the steps are
    yielded untouched. Use it as ``with contextlib.closing(tuned(bar, device)) as steps:``, so that
    torch's own count is restored however the loop ends."""
    if not hasattr(steps, "__iter__"):
        _validate.fail("steps", "an iterable (the loop's range or tqdm bar)", steps)
    device = _validate.device("device", "cpu" if device is None else device)
    if device.type != "cpu" or torch.get_num_threads() == 1 or os.environ.get("BAYESATTN_TUNE_THREADS") == "0":
        return (item for item in steps)   # a generator all the same: closing() closes it
    return _tuned(steps, probe, every)


def _tuned(steps, probe, every):
    """``tuned``'s loop: probe, hold, probe again (the module's notes)."""
    most = torch.get_num_threads()
    plan = [most] * (probe + 1) + [1] * (probe + 1)   # the counts the next steps run on
    latest = {most: deque(maxlen=probe), 1: deque(maxlen=probe)}   # each count's last step times
    chosen, skip = None, True                          # the loop's first step is not counted
    try:
        for item in steps:
            count = plan.pop(0) if plan else chosen
            if count != torch.get_num_threads():
                torch.set_num_threads(count)
                latest[count].clear()
                skip = True                            # the first step after a switch starts the threads
            began = time.perf_counter()
            yield item
            if not skip:
                latest[count].append(time.perf_counter() - began)
            skip = False
            if plan:
                continue
            if chosen is None or count != chosen:      # a probe has just ended: keep the faster count
                chosen = min(latest, key=lambda n: statistics.median(latest[n]))
                loser = statistics.median(latest[_other(chosen, most)])
                chosen_median, decided = statistics.median(latest[chosen]), time.perf_counter()
                hold = max(every, 20 * (probe + 1) * loser)   # probing the slower count costs <= 5%
            elif len(latest[chosen]) == probe and (time.perf_counter() - decided > hold
                                                   or statistics.median(latest[chosen]) > SLOWER * chosen_median):
                plan = [_other(chosen, most)] * (probe + 1)
    finally:
        torch.set_num_threads(most)


def _other(count, most):
    """The thread count that is not ``count``: one, or all of them."""
    return 1 if count == most else most

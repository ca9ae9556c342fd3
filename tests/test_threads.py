"""bayesattn_lite.threads: a loop's thread count chosen by timing its steps, torch's count restored after;
and the reason it may be used in batched.train, a run that is the same at one thread and at two."""

import contextlib
import time

import numpy as np
import pytest
import torch

from bayesattn_lite import threads
from bayesattn_lite.experiments import em_vs_sgd


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.delenv("BAYESATTN_TUNE_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def run_loop(n_steps, seconds_at, **kwargs):
    """A loop whose step takes seconds_at(thread count) seconds; the count each step ran on."""
    counts = []
    with contextlib.closing(threads.tuned(range(n_steps), "cpu", **kwargs)) as steps:
        for _ in steps:
            counts.append(torch.get_num_threads())
            time.sleep(seconds_at(counts[-1]))
    return counts


def test_the_faster_count_is_kept_after_a_probe_of_both(two_threads):
    # (a busy machine's late wake-ups may start a second probe later on; the first choice is the test)
    one_faster = run_loop(20, lambda n: 0.002 if n == 1 else 0.02)
    assert one_faster[:9] == [2] * 4 + [1] * 4 + [1]
    two_faster = run_loop(20, lambda n: 0.02 if n == 1 else 0.002)
    assert two_faster[:9] == [2] * 4 + [1] * 4 + [2]
    assert torch.get_num_threads() == 2   # torch's count is back


def test_the_other_count_is_probed_again_after_the_hold(two_threads):
    counts = run_loop(400, lambda n: 0.001 if n == 1 else 0.004, every=0.05)   # holds 20 x 4 x 4 ms
    later = counts[8:]
    assert later[0] == 1 and 2 in later   # chose one thread, then tried two again ...
    assert later[-1] == 1                 # ... and came back to one


def test_a_slowdown_of_the_kept_count_starts_a_probe_at_once(two_threads):
    began = time.perf_counter()

    def other_job_starts(n):   # two threads are faster until a second job arrives after 0.1 s
        loaded = time.perf_counter() - began > 0.1
        return (0.03 if loaded else 0.002) if n == 2 else 0.01
    counts = run_loop(80, other_job_starts)
    assert counts[8] == 2 and counts[-1] == 1


def test_torch_count_restored_when_the_loop_stops_early(two_threads):
    with pytest.raises(RuntimeError), contextlib.closing(threads.tuned(range(50), "cpu")) as steps:
        for step in steps:
            if step == 5:   # inside the probe at one thread
                assert torch.get_num_threads() == 1
                raise RuntimeError("stopped")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("device, env", [("cuda", None), ("cpu", "0")])
def test_untouched_on_a_gpu_or_when_switched_off(two_threads, monkeypatch, device, env):
    if env is not None:
        monkeypatch.setenv("BAYESATTN_TUNE_THREADS", env)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # a GPU machine, as far as the check goes
    seen = [torch.get_num_threads() for _ in threads.tuned(range(12), device)]
    assert seen == [2] * 12


def test_a_batched_run_is_the_same_at_one_thread_and_at_two_and_tuned(two_threads, monkeypatch):
    """Why batched.train may be tuned: its numbers do not depend on the thread count."""
    runs = {}
    for name, count, tune in [("two", 2, "0"), ("one", 1, "0"), ("tuned", 2, "1")]:
        monkeypatch.setenv("BAYESATTN_TUNE_THREADS", tune)
        torch.set_num_threads(count)
        runs[name] = em_vs_sgd(seeds=(0, 1), steps=30, T=200, progress=False)
    for name in ("one", "tuned"):
        for field in ("loss_sgd", "loss_em", "values_sgd", "values_em"):
            assert np.array_equal(getattr(runs[name], field), getattr(runs["two"], field)), (name, field)


@pytest.mark.parametrize("args, named", [((5, "cpu"), "steps"), ((range(3), "gpu"), "device"),
                                         ((range(3), "cpu", 0), "probe"), ((range(3), "cpu", 3, "30"), "every")])
def test_bad_arguments_are_named_at_the_call(two_threads, args, named):
    with pytest.raises(ValueError, match=f"^{named}: expected"):
        threads.tuned(*args)

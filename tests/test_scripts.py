"""The maintenance scripts: the time budget check and the GPU check (its CPU side)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def load(name, folder="scripts"):
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


time_notebooks = load("time_notebooks")
gpu_check = load("gpu_check")
execute_notebooks = load("execute_notebooks")


def test_the_build_command_executes_every_chapter_but_no_student_version():
    # The re-execution command (README) runs execute_notebooks.py with no argument: a student version's
    # stubs raise NotImplementedError, so executing one would stop the build.
    found = [p.relative_to(ROOT).as_posix() for p in execute_notebooks.book_notebooks()]
    assert set(time_notebooks.toc_notebooks()) <= set(found)
    assert "book/assignments/ps1_derivations.ipynb" in found
    assert not [name for name in found if name.endswith("_student.ipynb")]


def test_budget_lists_the_toc_notebooks_in_order():
    order = time_notebooks.toc_notebooks()
    assert order and all((ROOT / name).exists() for name in order)
    assert order == sorted(order, key=order.index)  # no duplicates, toc order kept
    assert "book/01_attention_block.ipynb" in order
    # the problem sets' student versions are stubs that pytest never collects (book/assignments/conftest.py);
    # the book lists only them, and the budget counts the instructor versions nbval executes in their place
    assert not [name for name in order if name.endswith("_student.ipynb")]
    assert "book/assignments/ps1_derivations.ipynb" in order


def test_budget_flags_a_slow_notebook_the_total_and_a_missing_one(capsys):
    order = ["a.ipynb", "b.ipynb", "c.ipynb"]
    assert time_notebooks.report({"a.ipynb": 10, "b.ipynb": 20, "c.ipynb": 30}, order, 300, 900) == []
    problems = time_notebooks.report({"a.ipynb": 301, "b.ipynb": 300, "c.ipynb": 300}, order, 300, 900)
    assert problems == ["a.ipynb: 301 s > 300 s", "the book: 901 s > 900 s"]
    assert time_notebooks.report({"a.ipynb": 1, "b.ipynb": 1}, order, 300, 900) == ["c.ipynb: not measured"]
    assert "in all (3 notebooks" in capsys.readouterr().out


def test_budget_check_reads_the_times_nbval_recorded(tmp_path):
    times = {name: 1.0 for name in time_notebooks.toc_notebooks()}
    path = tmp_path / "times.json"
    path.write_text(json.dumps({"seconds": times}))
    assert time_notebooks.main(["--from-json", str(path)]) == 0
    times[next(iter(times))] = 400.0
    path.write_text(json.dumps({"seconds": times}))
    assert time_notebooks.main(["--from-json", str(path)]) == 1
    assert time_notebooks.main(["--from-json", str(tmp_path / "missing.json")]) == 1
    machine = tmp_path / "machine.json"   # on a machine twice as slow, 400 s is within 2 x 300 s
    machine.write_text(json.dumps({"slowdown": 2.0}))
    assert time_notebooks.main(["--from-json", str(path), "--machine", str(machine)]) == 0
    times[next(iter(times))] = 601.0
    path.write_text(json.dumps({"seconds": times}))
    assert time_notebooks.main(["--from-json", str(path), "--machine", str(machine)]) == 1


def test_budget_check_names_the_longest_cell(tmp_path, capsys):
    times = {name: 1.0 for name in time_notebooks.toc_notebooks()}
    longest = {"book/02_score_gradient.ipynb": {"seconds": 0.7, "cell": "Cell 9"},
               "book/06_sticky_markov.ipynb": {"seconds": 0.9, "cell": "Cell 31"}}
    path = tmp_path / "times.json"
    path.write_text(json.dumps({"seconds": times, "longest_cell": longest}))
    assert time_notebooks.main(["--from-json", str(path)]) == 0
    assert "longest cell: 0.9 s, book/06_sticky_markov.ipynb Cell 31" in capsys.readouterr().out


def test_device_guard_sees_a_tensor_on_the_wrong_device_inside_hot_functions():
    class Hot:
        @staticmethod
        def step(n):
            return torch.ones(n, n) @ torch.ones(n, n)

    with gpu_check.guarding([(Hot, "step")], gpu_check.DeviceGuard("meta")) as guard:
        torch.ones(100, 100).sum()   # outside the hot function: not looked at
        Hot.step(2)                  # a small constant: allowed
        assert not guard.offenders
        Hot.step(100)                # data-sized, on the CPU instead of the device: reported
    assert guard.offenders and all(dev == "cpu" for _, dev in guard.offenders.values())
    assert Hot.step.__name__ == "step"  # restored


def test_gpu_check_runs_its_cpu_side_without_cuda():
    row = gpu_check.check("ch6 sticky Markov", lambda: gpu_check.sticky_markov(steps=2, T=50))
    assert row["status"] == "ok (cpu only)", row
    assert row["steps"] == 2 and row["cpu"] > 0
    assert "ch6 sticky Markov" in gpu_check.table([row], cuda=False)


def test_gpu_check_compares_two_devices():
    """The CUDA path, with the CPU standing in for the accelerator: same numbers, no offenders."""
    row = gpu_check.check("ch4 head", lambda: gpu_check.head_on_sources(1.0, steps=2), accelerator="cpu")
    assert row["status"] == "ok", row
    assert row["rel_diff"] == 0.0 and row["gpu"] > 0


def test_train_wind_tunnels_writes_records_resumes_and_skips(tmp_path, capsys):
    """The script on one small configuration (a few hundred steps): weights and a record that
    load_pretrained reads back, and a second call that skips the finished run."""
    train_wind_tunnels = load("train_wind_tunnels")
    from bayesattn_lite import comparison, converged
    args = ["--steps", "200", "--archs", "transformer", "--tasks", "recall", "--seeds", "0", "--workers", "1",
            "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt"), "--no-progress"]
    [record] = train_wind_tunnels.main(args)
    assert record["steps"] == 200 and record["arch"] == "transformer" and record["seconds"] > 0
    assert record["recipe"] == converged.RECIPE
    curve = record["curve"]["eval_kl_bits"]
    assert curve[-1] < 0.7 * curve[0]  # 200 steps already learn part of the task
    model = converged.load_pretrained("transformer", "recall", 0, directory=tmp_path / "out")
    again = comparison.evaluate(model, "recall", n_seqs=record["n_eval"])
    assert again["kl_bits"] == pytest.approx(record["final"]["trained"]["kl_bits"], rel=1e-6)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["runs"] == 1 and summary["total_seconds"] > 0
    assert train_wind_tunnels.main(args) == []
    assert "up to date, skipped: transformer-recall-seed0" in capsys.readouterr().out


def test_sticky_long_runs_writes_a_record_that_loads_and_skips_it_next_time(tmp_path, capsys):
    sticky_long_runs = load("sticky_long_runs")
    from bayesattn_lite import experiments
    args = ["--only", "pool64-std0.1", "--steps", "50", "--seeds", "42", "--out", str(tmp_path / "out"),
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--no-progress"]
    [record] = sticky_long_runs.main(args)
    assert record["config"]["steps"] == 50 and list(record["config"]["seeds"]) == [42] and record["seconds"] > 0
    loaded = experiments.load_long_run("pool64-std0.1", directory=tmp_path / "out")
    fp = experiments.frame_precision_of_record(loaded, "em")
    assert fp.frame_rate.shape == (1, 2) and np.isfinite(fp.first_order).all()
    assert sticky_long_runs.main(args) == []
    assert "pool64-std0.1: up to date, skipped" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        sticky_long_runs.main(["--only", "no-such-run"])


def test_train_wind_tunnels_trains_a_variant_then_measures_it(tmp_path, capsys):
    """--variants trains a ladder rung with its own sizes into its folder; --measure adds the
    measurements that the rungs without shipped weights are read from."""
    train_wind_tunnels = load("train_wind_tunnels")
    from bayesattn_lite import converged
    args = ["--variants", "d48", "--tasks", "recall", "--seeds", "0", "--steps", "20", "--workers", "1",
            "--out", str(tmp_path / "out"), "--checkpoint-dir", str(tmp_path / "ckpt"), "--no-progress"]
    [record] = train_wind_tunnels.main(args)
    assert record["variant"] == "d48" and record["model_sizes"]["d_model"] == 48 and record["steps"] == 20
    [path] = train_wind_tunnels.main(args + ["--measure"])
    measured = json.loads(path.read_text())["measured"]
    assert measured["geometry"]["d_head"] == 24 and "entropy_bias_bits" in measured
    row = converged.ladder_row("transformer", "recall", 0, "d48", directory=tmp_path / "out")
    assert row["source"] == "weights" and row["kl_bits"] == pytest.approx(measured["kl_bits"], rel=1e-6)
    path.with_suffix(".pt").unlink()  # a rung that ships its record only
    row = converged.ladder_row("transformer", "recall", 0, "d48", directory=tmp_path / "out")
    assert row["source"] == "record" and row["geometry"] == measured["geometry"]


def test_train_wind_tunnels_prints_the_paper_cost_before_it_starts(capsys):
    train_wind_tunnels = load("train_wind_tunnels")
    job = {"arch": "transformer", "task": "hmm", "seed": 0, "size": "paper", "steps": 100_000, "variant": None}
    train_wind_tunnels.print_cost_estimate([job])
    out = capsys.readouterr().out
    assert "GPU-hours" in out and "3,220,741" in out and "estimated total" in out


def test_executing_goes_on_past_a_failing_notebook_names_a_slow_cell_and_says_what_failed(tmp_path, monkeypatch, capsys):
    import nbformat
    broken, slow = tmp_path / "a_broken.ipynb", tmp_path / "b_slow.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('my bug')")]), broken)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(2.5)\n1 + 1")]), slow)
    before = broken.read_bytes()
    monkeypatch.setattr(execute_notebooks, "SLOW", 1)
    assert execute_notebooks.main([str(broken), str(slow)]) == 1
    out, err = capsys.readouterr()
    assert broken.read_bytes() == before  # a failed notebook is left as it was
    assert nbformat.read(slow, as_version=4).cells[0].outputs[0]["data"]["text/plain"] == "2"  # the next one ran
    assert "FAILED" in out and "b_slow.ipynb cell 0 still running after 1 s: import time" in out
    assert "a_broken.ipynb" in err and "my bug" in err


def test_sticky_benchmark_prints_its_figure_of_merit(capsys):
    """benchmarks/sticky_markov.py (issue 37): a tiny run prints the speed-up and the rate of one pass
    against a square matmul and torch's fused attention, measured in the same process."""
    bench = load("sticky_markov", "benchmarks")
    # the count: P (6 d_k + 6 d_v + 5) over P = N (N + 1) / 2 causal pairs
    assert bench.causal_flops(3, 10, 15) == 6 * 155
    bench.main(["--steps", "3", "--T", "40", "--seeds", "0", "1", "--profile-steps", "0", "--interleaved-rounds", "1"])
    out = capsys.readouterr().out
    assert "SPEED-UP (whole runs)" in out and "torch's fused attention kernel" in out
    # T = 40: every block size from 64 up is the whole sequence, so the table has 32 and 39 (= N) only
    table = out.split("query-block sizes")[1].split("\n\n")[0]
    assert "block   32:" in table and "block   39:" in table and "1.00x the default's speed" in table
    assert table.count("block ") == 2
    merit = float(out.split("FIGURE OF MERIT (pass rate / square matmul rate): ")[1].split()[0])
    assert 0 < merit < 10


def test_steady_client_polls_the_shell_channel_in_slices():
    """scripts/steady_client.py: one long wait becomes many short ones (a reply that one poll missed
    is read at the next), and a deadline still ends in queue.Empty, as nbclient expects."""
    import asyncio
    import queue
    steady = load("steady_client")

    class Channel:
        def __init__(self, empty_polls):
            self.timeouts, self.empty_polls = [], empty_polls

        async def get_msg(self, timeout=None):
            self.timeouts.append(timeout)
            if len(self.timeouts) <= self.empty_polls:
                await asyncio.sleep(timeout)
                raise queue.Empty
            return {"reply": len(self.timeouts)}

    late = steady.poll_in_slices(Channel(empty_polls=3), poll=0.01)
    assert asyncio.run(late.get_msg(timeout=None)) == {"reply": 4}
    assert late.timeouts[0] == 0.01 and len(late.timeouts) == 4
    never = steady.poll_in_slices(Channel(empty_polls=10**6), poll=0.01)
    with pytest.raises(queue.Empty):
        asyncio.run(never.get_msg(timeout=0.05))
    assert 3 <= len(never.timeouts) <= 8
    from nbclient import NotebookClient
    assert issubclass(steady.SteadyNotebookClient, NotebookClient)
    assert execute_notebooks.SteadyNotebookClient.__name__ == "SteadyNotebookClient"   # the README's build uses it


@pytest.mark.parametrize("rearm", [False, True])
def test_a_shadow_send_loses_the_wake_up_of_a_reply_unless_rearmed(rearm):
    """The widget stall's root cause, with two sockets and no Jupyter: a client waits on its asyncio
    DEALER (``await poll``, as jupyter_client's get_msg); the "kernel" replies while the client's
    loop is busy; the client then sends on the same socket through a synchronous shadow (as
    jupyter_client's Session.send does when nbclient syncs an Output widget). Without the re-arm the
    poll sleeps to its timeout with the reply in the socket; with steady_client's re-arm it wakes."""
    import asyncio
    import time

    import zmq
    import zmq.asyncio
    steady = load("steady_client")

    async def one_wait():
        actx, ctx = zmq.asyncio.Context(), zmq.Context()
        kernel, client = ctx.socket(zmq.ROUTER), actx.socket(zmq.DEALER)
        client.connect(f"tcp://127.0.0.1:{kernel.bind_to_random_port('tcp://127.0.0.1')}")
        shadow = zmq.Socket.shadow(client.underlying)

        class Channel:   # what the re-arm wraps: a channel whose send is the shadow's
            socket = client

            def send(self, msg):
                shadow.send(msg)

        channel = steady.rearm_after_send(Channel()) if rearm else Channel()
        try:
            await client.send(b"execute_request")
            identity, _ = kernel.recv_multipart()
            waiting = asyncio.ensure_future(client.poll(2000))
            await asyncio.sleep(0.02)                       # the poll is registered
            kernel.send_multipart([identity, b"execute_reply"])
            time.sleep(0.3)                                 # the loop is busy; the reply lands
            channel.send(b"comm_msg")                       # an Output widget's sync, on the shell
            start = time.monotonic()
            await waiting
            return time.monotonic() - start
        finally:
            client.close(0), kernel.close(0), actx.term(), ctx.term()

    waited = asyncio.run(one_wait())
    if rearm:
        assert waited < 0.5, f"the re-armed poll waited {waited:.2f} s for a reply already there"
    else:   # the bug itself, still in pyzmq/jupyter_client: if this fails, upstream has fixed it
        assert waited > 1.5, f"the shadow send did not lose the wake-up ({waited:.2f} s): the bug may be fixed upstream"


def test_machine_prints_its_yardsticks_and_how_much_slower_it_is(tmp_path, capsys):
    """scripts/machine.py, which CI runs before nbval: the budget is scaled by its slowdown."""
    machine = load("machine")
    machine.main(["--json", str(tmp_path / "machine.json")])
    line = capsys.readouterr().out
    assert line.startswith("machine: ") and "usable" in line and "as slow as the budget's reference" in line
    measured = json.loads((tmp_path / "machine.json").read_text())
    assert measured["matmul_gflops"] > 0 and measured["python_loop_ms"] > 0 and measured["slowdown"] >= 1
    ref = machine.REFERENCE
    assert machine.slowdown(ref) == 1.0
    assert machine.slowdown({"matmul_gflops": ref["matmul_gflops"] / 3, "python_loop_ms": 3 * ref["python_loop_ms"]}) == 3
    assert machine.slowdown({"matmul_gflops": 4 * ref["matmul_gflops"], "python_loop_ms": ref["python_loop_ms"]}) == 1

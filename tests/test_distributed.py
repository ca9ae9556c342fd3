"""bayesattn_lite.distributed: two CPU processes under torchrun (gloo) train one model with DDP."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from bayesattn_lite import comparison, distributed, models, wind_tunnels
from bayesattn_lite.train import seed_everything


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(out, *args, nproc=2):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}",
           "--master_addr=127.0.0.1", f"--master_port={free_port()}",
           "-m", "bayesattn_lite.distributed", "--out", str(out), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", BAYESATTN_PROGRESS="0")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)


def weights(path):
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    args = ("--arch", "transformer", "--task", "hmm", "--steps", "6", "--sizes", "d_model=8,n_heads=2",
            "--n-eval", "16", "--horizon", "K=20", "--checkpoint-every", "3")
    result = torchrun(out, *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result, args


def test_both_ranks_end_with_identical_parameters(run):
    out, _, _ = run
    rank0, rank1 = weights(out / "transformer-hmm-seed0.pt"), weights(out / ".rank1" / "transformer-hmm-seed0.pt")
    assert list(rank0) == list(rank1) and all(k.startswith("module.") for k in rank0)
    for key in rank0:
        torch.testing.assert_close(rank0[key], rank1[key], rtol=0, atol=0)
    seed_everything(0)  # the initialisation both ranks started from: they did train
    task = wind_tunnels.wind_tunnel("hmm")
    start = models.build("transformer", task.vocab_size, task.n_classes, d_model=8, n_heads=2)
    assert not torch.equal(rank0["module.embed.weight"], start.embed.weight.detach())


def test_rank_0_writes_the_evaluation_and_prints_it(run):
    out, result, _ = run
    rows = json.loads((out / "transformer-hmm-seed0.json").read_text())
    assert [r["horizon"] for r in rows] == ["trained", "K=20"]
    assert rows[0]["world_size"] == 2 and rows[0]["steps"] == 6
    model = distributed.load_model(out / "transformer-hmm-seed0.pt", "transformer", "hmm", d_model=8, n_heads=2)
    assert rows[0]["n_params"] == models.count_parameters(model)
    again = comparison.evaluate(model, "hmm", n_seqs=16)
    assert again["kl_bits"] == pytest.approx(rows[0]["kl_bits"], rel=1e-6)
    assert result.stdout.count("entropy error") == 2  # rank 0 only, one line per horizon


def test_rerun_resumes_from_the_checkpoints(run):
    out, _, args = run
    before = weights(out / "transformer-hmm-seed0.pt")
    result = torchrun(out, *args)  # already at 6 steps: loads, trains nothing, evaluates again
    assert result.returncode == 0, result.stderr[-3000:]
    after = weights(out / "transformer-hmm-seed0.pt")
    for key in before:
        torch.testing.assert_close(before[key], after[key], rtol=0, atol=0)


def test_bad_arguments_are_rejected():
    with pytest.raises(SystemExit):
        distributed.parser().parse_args(["--arch", "gru", "--task", "hmm", "--steps", "1"])
    with pytest.raises(SystemExit):
        distributed.parser().parse_args(["--arch", "lstm", "--task", "hmm", "--steps", "1", "--sizes", "d_model"])
    assert distributed.parser().parse_args(
        ["--arch", "lstm", "--task", "hmm", "--steps", "1", "--sizes", "d_model=8,n_layers=2"]).sizes == \
        {"d_model": 8, "n_layers": 2}


def test_refuses_to_run_outside_torchrun(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit, match="torchrun"):
        distributed.main(["--arch", "lstm", "--task", "hmm", "--steps", "1"])


def test_a_misspelt_option_is_named_before_the_missing_ones(capsys):
    with pytest.raises(SystemExit):
        distributed.main(["--stepz", "3"])
    assert "unrecognized arguments: --stepz" in capsys.readouterr().err

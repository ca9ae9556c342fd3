"""The frame/precision dynamics of the wind-tunnel Transformer (dynamics.py): the shipped records are
what the function computes (a rerun of a prefix matches them), the parameter groups cover the model
once, and the first-order attribution accounts for the realised loss decrease."""

import json

import numpy as np
import pytest
import torch

from bayesattn_lite import converged, diagnostics, dynamics, models, wind_tunnels

PREFIX = 150  # steps of the rerun: a few seconds


@pytest.fixture(scope="module")
def prefix():
    return dynamics.run("bijection", 0, stop=PREFIX)


def test_a_rerun_prefix_matches_the_shipped_record(prefix):
    shipped = dynamics.load_record("bijection", 0)
    n = len(prefix["steps"])
    assert prefix["steps"] == shipped["steps"][:n] == list(range(0, PREFIX + 1, dynamics.SNAPSHOT_EVERY))
    assert prefix["stopped_at"] == PREFIX and shipped["stopped_at"] == shipped["steps_total"] == 3000
    for key in ("loss", "kl_bits"):
        assert prefix[key] == pytest.approx(shipped[key][:n], rel=1e-4, abs=1e-6), key
    for ours, theirs in zip(prefix["layers"], shipped["layers"]):
        assert ours["frame_rate"] == pytest.approx(theirs["frame_rate"][:n - 1], rel=1e-4, abs=1e-7)
        assert ours["value_norm"] == pytest.approx(theirs["value_norm"][:n], rel=1e-4)
        # the precision rate is relative to the last snapshot: compare the absolute moves
        moved = np.asarray(ours["precision_rate"]) * ours["value_norm"][-1]
        moved_shipped = np.asarray(theirs["precision_rate"][:n - 1]) * theirs["value_norm"][-1]
        assert moved == pytest.approx(moved_shipped, rel=1e-4)
    for group, values in prefix["attribution"].items():
        assert values == pytest.approx(shipped["attribution"][group][:n - 1], rel=1e-3, abs=1e-6), group


def test_the_shipped_runs_are_the_shipped_models_runs():
    """Same seed, data and recipe as scripts/train_wind_tunnels.py: the same final KL as the shipped
    converged models' records. It also shows that the attribution, which moves the weights along a
    line and back at every snapshot, leaves the training as it was."""
    for task in dynamics.TASKS:
        for seed in dynamics.SEEDS:
            ours = dynamics.load_record(task, seed)["final"]["kl_bits"]
            theirs = converged.load_record("transformer", task, seed)["final"]["trained"]["kl_bits"]
            assert ours == pytest.approx(theirs, rel=1e-4), (task, seed)


def test_the_records_are_small():
    sizes = [p.stat().st_size for p in dynamics.DYNAMICS_DIR.glob("*.json")]
    assert len(sizes) >= len(dynamics.TASKS) * (len(dynamics.SEEDS) + len(dynamics.OPTIMIZERS) - 1) and sum(sizes) < 300_000


def test_the_controls_change_only_what_they_name():
    shipped = dynamics.recipe()
    assert shipped == converged.RECIPE and dynamics.SHIPPED == "adamw-cosine"
    assert {k for k in shipped if dynamics.recipe("adamw-constant")[k] != shipped[k]} == {"schedule"}
    sgd = dynamics.recipe("sgd-constant")
    assert (sgd["optimizer"], sgd["lr"], sgd["schedule"]) == ("sgd", dynamics.SGD_LR, "constant")
    assert (sgd["warmup_fraction"], sgd["clip_grad_norm"], sgd["weight_decay"]) == (0.0, None, 0.0)
    assert sgd["batch_size"] == shipped["batch_size"]
    record = dynamics.load_record("recall", 0)
    assert dynamics.rate_factor(record, record["steps_total"]) == pytest.approx(0.0, abs=1e-12)
    assert dynamics.rate_factor(dynamics.load_record("recall", 0, optimizer="adamw-constant"), 4000) == 1.0


@pytest.mark.parametrize("optimizer", ["adamw-constant", "sgd-constant"])
def test_the_controls_records_are_comparable_with_the_shipped_runs(optimizer):
    """Same model, task, seed, probe batch, step count and snapshot grid: the first snapshot (the
    initial model on the probe batch) is the same in all three; only the training differs. Every task
    ships seed 0 at least."""
    shipped_seeds = {task: [s for s in dynamics.SEEDS if dynamics.record_path(task, s, optimizer=optimizer).exists()]
                     for task in dynamics.TASKS}
    assert all(0 in seeds for seeds in shipped_seeds.values()), shipped_seeds
    for task, seeds in shipped_seeds.items():
        for seed in seeds:
            shipped = dynamics.load_record(task, seed)
            control = dynamics.load_record(task, seed, optimizer=optimizer)
            assert control["optimizer"] == optimizer and control["recipe"] == dynamics.recipe(optimizer)
            for key in ("task", "seed", "steps_total", "stopped_at", "steps", "model_sizes", "n_params", "probe"):
                assert control[key] == shipped[key], (task, seed, key)
            assert control["loss"][0] == shipped["loss"][0] and control["kl_bits"][0] == shipped["kl_bits"][0]
            assert control["kl_bits"][-1] < 0.1 * control["kl_bits"][0]  # it learned the task


def test_a_rerun_prefix_of_a_control_matches_its_record():
    prefix = dynamics.run("recall", 0, stop=100, optimizer="sgd-constant")
    shipped = dynamics.load_record("recall", 0, optimizer="sgd-constant")
    assert prefix["optimizer"] == "sgd-constant" and prefix["steps"] == shipped["steps"][:3]
    for key in ("loss", "kl_bits"):
        assert prefix[key] == pytest.approx(shipped[key][:3], rel=1e-4, abs=1e-6), key


def test_parameter_groups_cover_every_scalar_once():
    task = wind_tunnels.wind_tunnel("bijection")
    model = models.build("transformer", task.vocab_size, task.n_classes)
    groups = dynamics.parameter_groups(model)
    assert list(groups) == ["layer 0 routing", "layer 0 values", "layer 1 routing", "layer 1 values", "rest"]
    params = dict(model.named_parameters())
    counts = {n: torch.zeros_like(p, dtype=torch.long) for n, p in params.items()}
    for entries in groups.values():
        for name, rows in entries:
            (counts[name] if rows is None else counts[name][rows]).add_(1)
    assert all((c == 1).all() for c in counts.values())
    d = model.d_model
    assert ("blocks.0.mixer.qkv.weight", slice(0, 2 * d)) in groups["layer 0 routing"]
    assert ("blocks.1.mixer.qkv.bias", slice(2 * d, 3 * d)) in groups["layer 1 values"]


def test_group_dots_add_up_to_the_whole_dot_product():
    torch.manual_seed(0)
    task = wind_tunnels.wind_tunnel("recall")
    model = models.build("transformer", task.vocab_size, task.n_classes)
    a = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    b = {n: torch.randn_like(p) for n, p in model.named_parameters()}
    dots = dynamics._group_dots(dynamics.parameter_groups(model), a, b)
    whole = sum(float((a[n].double() * b[n].double()).sum()) for n in a)
    assert sum(dots.values()) == pytest.approx(whole, rel=1e-10)


def test_attribution_accounts_for_the_realised_decrease(prefix):
    """The groups' shares add up to the realised change of the probe loss in every interval."""
    assert prefix["realised_decrease"] > 0.1
    for record in (prefix, dynamics.load_record("bijection", 0), dynamics.load_record("recall", 2)):
        total = np.sum([np.asarray(a) for a in record["attribution"].values()], axis=0)
        realised = -np.diff(record["loss"])
        assert total.sum() == pytest.approx(record["realised_decrease"], rel=2e-3)
        assert total == pytest.approx(realised, rel=1e-2, abs=2e-4)  # per interval (losses kept to 6 digits)


def test_bought_after_splits_a_fixed_window_without_a_settle_step():
    record = dynamics.load_record("recall", 0)
    out = dynamics.bought_after(record, 2000)
    groups = [g for g in record["attribution"]]
    assert sum(out[g] for g in groups) == pytest.approx(out["realised"], rel=2e-3)  # attributed = realised
    assert out["values"] == pytest.approx(out["layer 0 values"] + out["layer 1 values"])
    assert out["routing"] == pytest.approx(out["layer 0 routing"] + out["layer 1 routing"])
    k = record["steps"].index(2000)
    assert out["realised"] == pytest.approx(record["loss"][k] - record["loss"][-1])
    with pytest.raises(ValueError, match="step"):
        dynamics.bought_after(record, 4000)  # the last snapshot: an empty window
    with pytest.raises(ValueError, match="step"):
        dynamics.bought_after(record, 2010)  # not a snapshot


def test_summarise_reads_the_settle_measure(prefix):
    rows = dynamics.summarise(dynamics.load_record("bijection", 0))
    assert [r["layer"] for r in rows] == [0, 1]
    for r in rows:
        steps = dynamics.load_record("bijection", 0)["steps"][1:]
        rates = dynamics.load_record("bijection", 0)["layers"][r["layer"]]["frame_rate"]
        assert r["frame"] == diagnostics.settle(steps, rates)
        if r["t_frame"] is not None:
            assert 0 <= r["loss_share_after_t_frame"] <= 1
            assert sum(r["attribution_after_t_frame"].values()) == pytest.approx(1.0)
    assert dynamics.order({"settled": {0.2: 100}}, {"settled": {0.2: None}}, 0.2) == "frame first (values not settled)"
    assert dynamics.order({"settled": {0.2: None}}, {"settled": {0.2: 100}}, 0.2) == "values first (frame not settled)"
    assert dynamics.order({"settled": {0.2: 300}}, {"settled": {0.2: 100}}, 0.2) == "values first"


def test_bad_arguments_and_a_missing_record(tmp_path):
    with pytest.raises(ValueError, match="task_name"):
        dynamics.run("hmm", 0)
    with pytest.raises(ValueError, match="stop"):
        dynamics.run("bijection", 0, stop=75)
    with pytest.raises(FileNotFoundError, match="wind_tunnel_dynamics.py"):
        dynamics.load_record("bijection", 0, directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="--optimizer sgd-constant"):
        dynamics.load_record("bijection", 0, directory=tmp_path, optimizer="sgd-constant")
    assert dynamics.record_path("recall", 2, tmp_path, "sgd-constant").name == "transformer-recall-seed2-sgd-constant.json"
    assert dynamics.record_path("recall", 2, tmp_path).name == "transformer-recall-seed2.json"
    path = dynamics.save_record({"task": "bijection", "seed": 7, "x": 1}, tmp_path)
    assert json.loads(path.read_text())["x"] == 1


def test_the_script_writes_records_and_skips_them_next_time(tmp_path, monkeypatch, capsys):
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "wind_tunnel_dynamics", Path(__file__).resolve().parent.parent / "scripts" / "wind_tunnel_dynamics.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(wind_tunnels.BijectionTask, "converged_steps", {"small": 100, "paper": 50_000})
    args = ["--tasks", "bijection", "--seeds", "0", "--workers", "1", "--out", str(tmp_path), "--no-progress"]
    [record] = script.main(args)
    assert record["stopped_at"] == 100 and (tmp_path / "transformer-bijection-seed0.json").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["runs"] == 1
    assert script.main(args) == []
    assert "up to date, skipped: transformer-bijection-seed0.json" in capsys.readouterr().out
    [control] = script.main(args + ["--optimizer", "sgd-constant"])
    assert control["optimizer"] == "sgd-constant" and control["recipe"] == dynamics.recipe("sgd-constant")
    assert (tmp_path / "transformer-bijection-seed0-sgd-constant.json").exists()
    assert json.loads((tmp_path / "summary-sgd-constant.json").read_text())["optimizer"] == "sgd-constant"
    assert script.main(args + ["--optimizer", "sgd-constant"]) == []  # its own record, up to date


@pytest.mark.parametrize("call, name", [
    (lambda: dynamics.load_record("nope", 0), "task_name"),               # before the file lookup
    (lambda: dynamics.load_record("bijection", -1), "seed"),
    (lambda: dynamics.load_record("bijection", 0, directory="/nonexistent"), "directory"),
    (lambda: dynamics.record_path("nope", 0), "task_name"),
    (lambda: dynamics.record_path("bijection", "a"), "seed"),
    (lambda: dynamics.record_path("bijection", 0, optimizer="sgd"), "optimizer"),
    (lambda: dynamics.load_record("bijection", 0, optimizer="adam"), "optimizer"),
    (lambda: dynamics.run("bijection", 0, optimizer="rmsprop"), "optimizer"),
    (lambda: dynamics.recipe("sgd"), "optimizer"),
    (lambda: dynamics.rate_factor({}, 0), "record"),
    (lambda: dynamics.rate_factor(dynamics.load_record("bijection", 0), 3001), "step"),
    (lambda: dynamics.save_record("record"), "record"),
    (lambda: dynamics.save_record({"task": "bijection", "seed": 0}, directory="/proc/x"), "directory"),
    (lambda: dynamics.summarise("record"), "record"),
    (lambda: dynamics.summarise({}), "record"),
    (lambda: dynamics.parameter_groups(models.build("lstm", 16, 8, d_model=4)), "model"),
    (lambda: dynamics.parameter_groups("model"), "model"),
    (lambda: dynamics.order("a", "b", 0.2), "frame"),
    (lambda: dynamics.order({"settled": {0.2: 1}}, None, 0.2), "values"),
    (lambda: dynamics.order({"settled": {0.2: 1}}, {"settled": {0.2: 1}}, 0.3), "fraction"),
])
def test_bad_inputs_get_clear_errors(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("record, match", [
    ({"task": "hmm", "seed": 0}, r"^record\['task'\]: expected one of \['bijection', 'recall'\], got 'hmm'"),
    ({"task": "bijection", "seed": 2**16}, r"^record\['seed'\]: expected an int in \[0, 65536\)"),
    ({"task": "bijection", "seed": 0, "optimizer": "adam"}, r"^record\['optimizer'\]: expected one of"),
])
def test_save_record_names_the_records_entry(tmp_path, record, match):
    with pytest.raises(ValueError, match=match):
        dynamics.save_record(record, tmp_path)

"""bayesattn_lite.converged: the converged, shipped wind-tunnel models of chapters 7-9 (their
recipe, weights and records, the size ladder and variants, verdicts and the paper-size cost)."""

import json

import matplotlib.colors
import pytest
import torch

from bayesattn_lite import checkpoints, comparison, converged, models, plots, wind_tunnels
from bayesattn_lite.comparison import evaluate


def assert_same_weights(a, b):
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb
        torch.testing.assert_close(va, vb, rtol=0, atol=0)


COMMITTED = sorted(converged.folder().glob("*-seed*.json"))  # the shipped size (small/)


def test_the_committed_records_are_found():
    """The records test below is parametrised by a glob: an empty glob (a renamed folder) must fail, not skip."""
    assert len(COMMITTED) >= len(models.ARCHITECTURES) * len(wind_tunnels.WIND_TUNNELS) * 3, converged.folder()


@pytest.mark.parametrize("arch", models.ARCHITECTURES)
def test_every_registered_architecture_is_complete(arch):
    """What a new entry of models.REGISTRY needs: a colour, sizes at both scales that build, and
    shipped weights and a record for every wind tunnel and seed 0-2 (the failure names the command)."""
    entry = models.REGISTRY[arch]
    assert matplotlib.colors.is_color_like(entry.colour) and plots.COLORS[arch] == entry.colour
    for scale in ("small", "paper"):
        task = wind_tunnels.wind_tunnel("hmm", scale)
        with torch.device("meta"):  # builds without allocating the paper size
            models.build(arch, task.vocab_size, task.n_classes, **models.sizes(arch, scale))
    missing = [converged.train_command(arch, t, s) for t in wind_tunnels.WIND_TUNNELS for s in (0, 1, 2)
               if not converged.has_weights(arch, t, s)
               or not (converged.folder() / f"{comparison.run_name(arch, t, s)}.json").exists()]
    if missing:
        pytest.fail(f"{arch}: {len(missing)} shipped runs missing; train them with `python {converged.TRAIN_SCRIPT} "
                    f"--archs {arch}` (one: `{missing[0]}`)")
    for t in wind_tunnels.WIND_TUNNELS:  # small enough to ship
        for s in (0, 1, 2):
            assert (converged.folder() / f"{comparison.run_name(arch, t, s)}.pt").stat().st_size < 200_000


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_a_committed_record_is_reproduced_by_its_weights(path):
    """The record's final KL is what the shipped weights give on the same held-out sequences."""
    record = json.loads(path.read_text())
    model = converged.load_pretrained(record["arch"], record["task"], record["seed"])
    assert not model.training and next(model.parameters()).device.type == "cpu"
    task = wind_tunnels.wind_tunnel(record["task"])
    assert record["task_settings"] == repr(task) and record["n_params"] == models.count_parameters(model)
    for label, metrics in record["final"].items():
        horizon = {} if label == "trained" else {k: int(v) for k, v in [label.split("=")]}
        again = evaluate(model, task, n_seqs=record["n_eval"], seed=record["eval_seed"], **horizon)
        # the same numbers up to float32 summation order (another CPU may sum in another order)
        assert again["kl_bits"] == pytest.approx(metrics["kl_bits"], rel=1e-3, abs=1e-6), label
        assert again["accuracy"] == pytest.approx(metrics["accuracy"], abs=2e-3), label
    curve = record["curve"]
    assert len(curve["steps"]) == len(curve["eval_kl_bits"]) >= 20 and curve["steps"][0] == 0
    assert record["steps"] == task.converged_steps["small"]


def test_load_pretrained_names_the_script_when_files_are_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_wind_tunnels.py --size small --archs lstm --tasks hmm --seeds 7"):
        converged.load_pretrained("lstm", "hmm", 7)
    with pytest.raises(FileNotFoundError, match="RETRAIN"):
        converged.load_record("mlp", "recall", 0, directory=tmp_path)


def test_train_converged_records_its_learning_curve_and_reloads(tmp_path):
    model, record = converged.train_converged("lstm", "hmm", 1, steps=80, progress=False)
    assert record["recipe"]["schedule"] == "cosine" and record["steps"] == 80
    assert set(record["final"]) == {"trained", "K=18", "K=30"}       # Paper I's 1.5K and 2.5K
    assert record["curve"]["steps"][:2] == [0, 2] and len(record["curve"]["loss"]) == 80
    assert record["curve"]["eval_kl_bits"][-1] < record["curve"]["eval_kl_bits"][0]
    converged.save_pretrained(model, record, tmp_path)
    again = converged.load_pretrained("lstm", "hmm", 1, directory=tmp_path)
    assert_same_weights(model, again)


# ----------------------------------------------------------------------------- variants: the size ladder

def test_every_variant_names_real_runs_and_sizes():
    for name, v in converged.VARIANTS.items():
        assert v.about and v.runs, name
        for arch, task in v.runs:
            assert arch in models.ARCHITECTURES and task in wind_tunnels.WIND_TUNNELS, name
            assert converged.variant_seeds(name, arch), name
            for key in v.sizes.get(arch, {}):
                assert key in models.sizes(arch) or key == "stream_start", (name, key)
        assert set(v.sizes) <= {a for a, _ in v.runs}, name


def test_variant_task_steps_and_recipe():
    recall = converged.variant_task("recall", "recall20")
    assert (recall.n_keys, recall.n_values, recall.n_pairs, recall.noise) == (20, 20, 40, 0.0)
    assert converged.variant_task("recall") .n_keys == 6
    assert converged.variant_steps("bijection", "no-wd-2x") == 2 * wind_tunnels.BijectionTask.converged_steps["small"]
    assert converged.variant_steps("hmm", "long") == 30_000
    assert converged.variant_recipe("no-wd-2x")["weight_decay"] == 0.0
    assert converged.variant_recipe(None) == converged.RECIPE
    assert converged.VARIANTS["stream"].sizes["transformer"]["stream_start"] == wind_tunnels.HMMTask().prefix_len
    with pytest.raises(ValueError, match="variant"):
        converged.load_record("transformer", "hmm", 0, variant="d1000")


def test_a_variant_trains_saves_into_its_folder_and_reloads(tmp_path):
    model, record = converged.train_converged("transformer", "hmm", 0, steps=30, progress=False, variant="stream")
    assert record["variant"] == "stream" and record["model_sizes"]["stream_start"] == 18
    weights, meta = converged.save_pretrained(model, record, tmp_path)
    again = converged.load_pretrained("transformer", "hmm", 0, variant="stream", directory=tmp_path)
    assert_same_weights(model, again)
    (tmp_path / "none").mkdir()
    with pytest.raises(FileNotFoundError, match="--variants d48"):
        converged.load_pretrained("transformer", "hmm", 0, variant="d48", directory=tmp_path / "none")


def test_measure_run_reports_errors_their_sign_and_the_geometry():
    task = wind_tunnels.wind_tunnel("recall")
    model = models.build("transformer", task.vocab_size, task.n_classes, **comparison.model_sizes_for("transformer", task))
    m = converged.measure_run(model, task, n_seqs=64)
    assert m["entropy_error_bits"] >= abs(m["entropy_bias_bits"]) and m["kl_bits"] > 0
    g = m["geometry"]
    assert g["d_head"] == 12 and len(g["attention_entropy_bits"]) == 2 and len(g["pc1_share_heads"]) == 2
    assert set(g["key_groups"]) == {"keys", "values"} and g["key_groups"]["keys"]["n"] == task.n_keys
    assert 0 < g["pc1_share_residual"] <= 1
    assert "geometry" not in converged.measure_run(models.build("lstm", task.vocab_size, task.n_classes), task, n_seqs=8)


def test_cost_estimate_counts_the_parameters_it_would_train():
    c = converged.cost_estimate("transformer", "bijection", "small")
    task = wind_tunnels.wind_tunnel("bijection")
    real = models.build("transformer", task.vocab_size, task.n_classes, **comparison.model_sizes_for("transformer", task))
    assert c["n_params"] == models.count_parameters(real) and c["steps"] == 3000
    assert c["tflop"] == pytest.approx(6 * c["n_params"] * c["tokens"] / 1e12)
    paper = converged.cost_estimate("transformer", "hmm", "paper", seeds=3)
    assert paper["n_params"] > 2_000_000 and paper["gpu_hours"] > 3 * converged.cost_estimate("transformer", "hmm")["gpu_hours"] - 1e-9


SHIPPED_VARIANTS = [(v, a, t, s) for v, runs in converged.pretrained_variants().items() for a, t, s, w in runs if w]


def test_the_ladder_ships_and_stays_small():
    shipped = converged.pretrained_variants()
    for name in ("d48", "d96", "d96-l4", "d88", "d176", "long", "stream", "no-wd-2x", "recall20"):
        assert name in shipped, f"variant {name} has no record; run scripts/train_wind_tunnels.py --variants {name}"
    total = sum(p.stat().st_size for p in converged.PRETRAINED_DIR.rglob("*") if p.is_file())
    assert total < 15e6, f"package data {total / 1e6:.1f} MB"
    for name, runs in shipped.items():  # what does not ship its weights has its measurements
        for arch, task, seed, has in runs:
            assert has or "measured" in converged.load_record(arch, task, seed, name), (name, arch, task, seed)


@pytest.mark.parametrize("variant,arch,task,seed", SHIPPED_VARIANTS, ids=lambda x: str(x))
def test_a_shipped_variant_reproduces_its_record_on_sequences_the_course_never_uses(variant, arch, task, seed):
    """A held-out evaluation (seed 777, used nowhere else) gives the record's KL within 20%, and
    the weights give the record's measurements exactly where the record has them."""
    record = converged.load_record(arch, task, seed, variant)
    model = converged.load_pretrained(arch, task, seed, variant)
    tunnel = converged.variant_task(task, variant)
    fresh = evaluate(model, tunnel, n_seqs=record["n_eval"], seed=777)["kl_bits"]
    assert fresh == pytest.approx(record["final"]["trained"]["kl_bits"], rel=0.2)
    if "measured" in record:
        again = converged.measure_run(model, tunnel)
        assert again["kl_bits"] == pytest.approx(record["measured"]["kl_bits"], rel=1e-3)


def test_verdict_and_the_baseline():
    assert converged.verdict([0.01, 0.05], 1.0) == "learned"
    assert converged.verdict([0.01, 0.3], 1.0) == "partly"
    assert converged.verdict([0.6], 1.0) == "not learned"
    task = wind_tunnels.wind_tunnel("recall")
    batch = task.sample(64, seed=0)
    assert converged.baseline_kl(task, batch) > 0.1  # the primitive is worth bits
    with pytest.raises(ValueError, match="kl_per_seed"):
        converged.verdict([], 1.0)
    with pytest.raises(ValueError, match="baseline_kl"):
        converged.verdict([0.1], 0.0)


def test_the_errors_name_the_training_command(tmp_path):
    assert converged.train_command("lstm", "hmm", 7) == \
        "python scripts/train_wind_tunnels.py --size small --archs lstm --tasks hmm --seeds 7"
    with pytest.raises(FileNotFoundError, match="train_wind_tunnels.py --size small"):
        converged.training_summary(directory=tmp_path)
    assert converged.training_summary()["runs"] >= 36


def test_folder_and_has_weights():
    assert converged.folder() == converged.PRETRAINED_DIR / "small"
    assert converged.folder("small", None, "d48") == converged.PRETRAINED_DIR / "small" / "variants" / "d48"
    assert converged.has_weights("transformer", "hmm", 0) and not converged.has_weights("transformer", "hmm", 0, "d96")


_TASK = wind_tunnels.BijectionTask(V=3, L=2)
_MODEL = models.build("lstm", _TASK.vocab_size, _TASK.n_classes, d_model=4)


@pytest.mark.parametrize("call, name", [
    (lambda: converged.load_pretrained("gpt", "bijection", 0), "arch"),          # before the file lookup
    (lambda: converged.load_pretrained(None, "bijection", 0), "arch"),
    (lambda: converged.load_pretrained("lstm", "sorting", 0), "task_name"),
    (lambda: converged.load_pretrained("lstm", "bijection", -1), "seed"),
    (lambda: converged.load_pretrained("lstm", "bijection", "0"), "seed"),
    (lambda: converged.load_pretrained("lstm", "bijection", 0, size="huge"), "size"),
    (lambda: converged.load_pretrained("lstm", "bijection", 0, directory="/nonexistent"), "directory"),
    (lambda: converged.load_record("lstm", "nope", 0), "task_name"),
    (lambda: converged.ladder_row("gpt", "bijection", 0), "arch"),
    (lambda: converged.ladder_rows("gpt"), "arch"),
    (lambda: converged.ladder_rows("lstm", tasks=("nope",)), "tasks"),
    (lambda: converged.ladder_rows("lstm", variants=("nope",)), "variants"),
    (lambda: converged.has_weights("lstm", "bijection", 0, size="tiny"), "size"),
    (lambda: converged.train_command("gpt", "hmm", 0), "arch"),
    (lambda: converged.training_summary(size="tiny"), "size"),
    (lambda: converged.pretrained_variants(directory="/nonexistent"), "directory"),
    (lambda: converged.folder(size="tiny"), "size"),
    (lambda: converged.variant_steps("nope"), "task_name"),
    (lambda: converged.variant_steps("hmm", size="tiny"), "size"),
    (lambda: converged.variant_recipe(size="tiny"), "size"),
    (lambda: converged.variant_seeds("d48", "gpt"), "arch"),
    (lambda: converged.cost_estimate("transformer", "nope"), "task_name"),
    (lambda: converged.train_converged("transformer", "nope", 0, steps=1, progress=False), "task_name"),
    (lambda: converged.save_pretrained("m", {}), "model"),
    (lambda: converged.save_pretrained(_MODEL, {"arch": "lstm"}), "record"),
    (lambda: converged.save_pretrained(_MODEL, {"arch": "lstm", "task": "bijection", "seed": 0, "size": "small"},
                                       directory="/proc/x"), "directory"),
    (lambda: converged.baseline_kl(_TASK, "batch"), "batch"),
    (lambda: converged.baseline_kl("bijection", _TASK.sample(2, seed=0)), "task"),
    (lambda: converged.baseline_kl(wind_tunnels.HMMTask(), _TASK.sample(2, seed=0)), "batch"),  # another task's
    (lambda: converged.measure_run("m", _TASK, n_seqs=2), "model"),
])
def test_bad_inputs_get_clear_errors(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_a_valid_run_without_files_keeps_the_training_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="--seeds 99"):
        converged.load_pretrained("lstm", "bijection", 99)


@pytest.mark.parametrize("damage, words", [
    (lambda r: {**r, "model_sizes": {"d_modle": 8}}, "its model_sizes do not build one"),
    (lambda r: {k: v for k, v in r.items() if k != "n_params"}, "without ['n_params']"),
])
def test_a_damaged_record_is_named_with_its_file(tmp_path, damage, words):
    """A record edited by hand (a misspelt size, a key removed) is a DamagedFile naming the file, not an
    error about the caller's arguments or a bare KeyError."""
    shipped = converged.folder() / "lstm-hmm-seed0"
    record = json.loads(shipped.with_suffix(".json").read_text())
    (tmp_path / "lstm-hmm-seed0.json").write_text(json.dumps(damage(record)))
    (tmp_path / "lstm-hmm-seed0.pt").write_bytes(shipped.with_suffix(".pt").read_bytes())
    for call in (converged.load_pretrained, converged.ladder_row):
        with pytest.raises(checkpoints.DamagedFile, match="lstm-hmm-seed0.json") as error:
            call("lstm", "hmm", 0, directory=tmp_path)
        assert words in str(error.value)

"""bayesattn_lite.checkpoints: the checkpoint, progress and Ctrl-C helpers both training loops share."""

import pytest
import torch

from bayesattn_lite import attention, batched, checkpoints, train


def test_fingerprint_is_equal_for_equal_runs_and_differs_otherwise():
    a = checkpoints.fingerprint(torch.ones(3), {"lr": 0.1})
    assert a == checkpoints.fingerprint(torch.ones(3), {"lr": 0.1})
    assert a != checkpoints.fingerprint(torch.ones(3), {"lr": 0.2})
    assert a != checkpoints.fingerprint(torch.zeros(3), {"lr": 0.1})


def test_a_damaged_file_is_refused_with_its_name(tmp_path):
    path = tmp_path / "run.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(checkpoints.CheckpointMismatch, match=r"run\.pt.*cannot be read.*damaged"):
        checkpoints.load(path, "train.train")


def test_a_checkpoint_of_the_other_loop_is_refused(tmp_path):
    path = tmp_path / "run.pt"
    checkpoints.save(path, {"kind": "batched.train", "step": 3})
    with pytest.raises(checkpoints.CheckpointMismatch, match="expected a checkpoint of train.train.*batched.train"):
        checkpoints.load(path, "train.train", required=("step",))


def test_a_train_checkpoint_is_not_resumed_by_the_batched_loop(tmp_path):
    path = tmp_path / "run.pt"
    head = attention.AttentionHead(4, 3, 3, 2)
    x, y = torch.randn(1, 5, 4), torch.randint(0, 2, (1, 5))
    train.train(head, lambda m, step: torch.nn.functional.cross_entropy(m(x)[0], y[0]), train.Recipe(2), checkpoint_path=path, progress=False)
    params = batched.stack([{n: W.detach() for n, W in head.params().items()}])
    with pytest.raises(checkpoints.CheckpointMismatch, match="batched.train"):
        batched.train(x, y, params, {n: 0.1 for n in attention.PARAM_NAMES}, 2, checkpoint_path=path, progress=False)


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "sub" / "run.pt"
    checkpoints.save(path, {"kind": "x", "step": 1})
    checkpoints.save(path, {"kind": "x", "step": 2})
    assert checkpoints.load(path, "x")["step"] == 2
    assert [p.name for p in path.parent.iterdir()] == ["run.pt"]


def test_interrupt_saves_and_reraises(tmp_path, capsys):
    saved = []
    with pytest.raises(KeyboardInterrupt):
        with checkpoints.saved_on_interrupt(tmp_path / "run.pt", lambda: saved.append(7), lambda: 7):
            raise KeyboardInterrupt
    assert saved == [7] and "saved step 7" in capsys.readouterr().out


@pytest.mark.parametrize("call, name", [
    (lambda tmp: checkpoints.save("", {"a": 1}), "path"),
    (lambda tmp: checkpoints.save(tmp / "s.pt", {"f": lambda: 1}), "state"),
    (lambda tmp: checkpoints.save(tmp / "s.pt", [1, 2]), "state"),
    (lambda tmp: checkpoints.load(tmp / "ok.pt", "train.train", device="tpu"), "device"),
    (lambda tmp: checkpoints.fingerprint(object()), "parts"),
])
def test_bad_inputs_name_the_argument(tmp_path, call, name):
    checkpoints.save(tmp_path / "ok.pt", {"kind": "train.train"})
    with pytest.raises(ValueError, match=rf"{name}.*expected"):
        call(tmp_path)
    assert not list(tmp_path.glob(".tmp-*"))  # refused before any file was written


def test_states_of_the_training_loops_are_accepted(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(1, 2)).sum().backward()
    opt.step()
    state = {"kind": "train.train", "model": model.state_dict(), "optimizer": opt.state_dict(),
             "rng": train._rng_state(), "shape": torch.Size([2]), "dtype": torch.float64, "none": None}
    checkpoints.save(tmp_path / "c.pt", state)
    assert checkpoints.load(tmp_path / "c.pt", "train.train", device=torch.device("cpu"))["shape"] == (2,)


def test_a_record_is_refused_for_a_nan_and_a_missing_file_is_said_to_be_missing(tmp_path):
    path = tmp_path / "record.json"
    path.write_text('{"loss": NaN}')
    with pytest.raises(checkpoints.DamagedFile, match=r"record\.json: expected a record.*NaN is not a number JSON allows"):
        checkpoints.read_json(path, "a record", keys=("loss",))
    with pytest.raises(checkpoints.DamagedFile, match=r"gone\.json: expected the file of a record, got no file there"):
        checkpoints.read_json(tmp_path / "gone.json", "a record")


@pytest.mark.parametrize("call, match", [
    (lambda: checkpoints.load(42, "k"), r"^path: expected a file path \(str or os.PathLike\), got 42"),
    (lambda: checkpoints.refuse("p", "abc", {"kind": "k"}, "lr differs"),
     r"^differences: expected a list of what differs, .* got 'lr differs'"),
    (lambda: checkpoints.saved_on_interrupt("p.pt", "save", lambda: 0).__enter__(), "^save_now: expected a function"),
    (lambda: checkpoints.saved_on_interrupt("p.pt", lambda: None, "done").__enter__(), "^done: expected a function"),
])
def test_a_path_a_list_of_differences_and_functions_are_checked(call, match):
    with pytest.raises(ValueError, match=match):
        call()

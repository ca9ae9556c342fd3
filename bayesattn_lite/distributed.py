"""Train a wind-tunnel model on several processes with PyTorch's DistributedDataParallel.

The paper-size runs (millions of parameters, 50k+ steps) are GPU work. With N GPUs on one machine::

    torchrun --nproc_per_node=N -m bayesattn_lite.distributed \\
        --arch transformer --task bijection --size paper --steps 50000 --out runs/

Each process (rank) trains a replica on its own batches (``wind_tunnels.data_seed`` with its rank;
with one process, the stream of ``comparison.train_on_task``); DDP averages the gradients, so every
replica takes the same step (an effective batch of N x --batch-size). The engine is PyTorch's
(NCCL on GPUs, gloo on CPUs), not ours; the loop is the course's ``train.train``, so the
divergence guard, tqdm bar (rank 0 only) and checkpoints/resume work as in the chapters.

Files under ``--out``: ``<arch>-<task>-seed<seed>.pt`` (rank 0's checkpoint, the one to load),
``<arch>-<task>-seed<seed>.json`` (rank 0's evaluation), and ``.rank<r>/`` with the other ranks'
checkpoints, so that a resumed run restores every replica. Rerunning the same command resumes.
``load_model(path, arch, task, size)`` loads the trained model back, e.g. in a notebook.
"""

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from . import _validate, checkpoints, comparison, models, wind_tunnels
from ._types import unchecked
from .train import Recipe, seed_everything, train


def _sizes(text):
    """'d_model=8,n_layers=1' -> {'d_model': 8, 'n_layers': 1} (integers only)."""
    sizes = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(f"--sizes: expected name=int pairs like d_model=64, got {item!r}")
        sizes[key.strip()] = int(value)
    return sizes


def _horizon(text):
    """'K=30' -> {'K': 30}."""
    try:
        sizes = _sizes(text)
    except argparse.ArgumentTypeError:   # said below as --horizon's, not as --sizes'
        sizes = {}
    if len(sizes) != 1:
        raise argparse.ArgumentTypeError(f"--horizon: expected one name=int such as K=30, got {text!r}")
    return sizes


def _count(text):
    """An int >= 1 from the command line (argparse puts the option's name before the message)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def parser():
    p = argparse.ArgumentParser(prog="torchrun --nproc_per_node=N -m bayesattn_lite.distributed",
                                description="Train one architecture on one wind tunnel with DDP.")
    p.add_argument("--arch", required=True, choices=models.ARCHITECTURES)
    p.add_argument("--task", required=True, choices=sorted(wind_tunnels.WIND_TUNNELS))
    p.add_argument("--size", default="small", choices=("small", "paper"),
                   help="task and model sizes: the course's CPU sizes or Paper I's (default small)")
    p.add_argument("--steps", type=_count, required=True)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=_count, default=32, help="sequences per rank and step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sizes", type=_sizes, default={}, help="model size overrides, e.g. d_model=64,n_layers=2")
    p.add_argument("--horizon", type=_horizon, action="append", default=[],
                   help="extra evaluation horizon, e.g. --horizon K=30 --horizon K=50 (HMM)")
    p.add_argument("--n-eval", type=_count, default=1024, help="held-out sequences for the evaluation")
    p.add_argument("--checkpoint-every", type=_count, default=1000)
    p.add_argument("--out", default="runs", help="folder for checkpoints and the evaluation (default runs/)")
    return p


def load_model(path, arch, task, size="small", **sizes):
    """The trained model from a checkpoint this script wrote (DDP's "module." prefix removed)."""
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        _validate.fail("path", "a checkpoint file this script wrote (its --out folder's .pt)", path)
    task = wind_tunnels.as_wind_tunnel(task, size)
    model = models.build(arch, task.vocab_size, task.n_classes, **models.sizes(arch, size, **sizes))

    def state(saved):   # the checkpoint holds the model's weights under "model", with DDP's prefix
        if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
            raise ValueError("no 'model' entry (a shipped converged model loads with converged.load_pretrained)")
        return {k.removeprefix("module."): v for k, v in saved["model"].items()}

    return checkpoints.load_weights(model, path, f"a checkpoint of bayesattn_lite.distributed for a {arch} on "
                                    f"{task.name!r}, sizes {models.sizes(arch, size, **sizes)}",
                                    advice="pass the arch, task and sizes it was trained with", transform=state)


def _unknown_options(p, argv):
    """The --options ``p`` has none of (nor one they abbreviate): argparse names them only after a missing
    required option, so a misspelt --step would be reported as --steps missing."""
    options = [o for action in p._actions for o in action.option_strings]
    return [t for t in argv if t.startswith("--") and t != "--" and
            not any(o.startswith(t.split("=")[0]) for o in options)]


def main(argv=None):
    p = parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    unknown = _unknown_options(p, argv)
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    args = p.parse_args(argv)
    if "RANK" not in os.environ:
        raise SystemExit("run me under torchrun, e.g. torchrun --nproc_per_node=2 -m bayesattn_lite.distributed ...")
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    try:
        task = wind_tunnels.wind_tunnel(args.task, args.size)
        sizes = models.sizes(args.arch, args.size, **args.sizes)
        seed_everything(args.seed)  # the same initialisation on every rank (DDP also broadcasts rank 0's)
        model = models.build(args.arch, task.vocab_size, task.n_classes, **sizes).to(device)
        replica = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)

        @unchecked()   # a step's model and batch are made here: their types are not checked again each step
        def loss_fn(replica, step):
            batch = task.sample(args.batch_size, seed=wind_tunnels.data_seed(args.seed, step, rank, world)).to(device)
            return comparison.task_loss(replica, batch)

        name = comparison.run_name(args.arch, args.task, args.seed)
        folder = args.out if rank == 0 else os.path.join(args.out, f".rank{rank}")
        train(replica, loss_fn, Recipe(args.steps, optimizer="adam", lr=args.lr), device=device, log_every=10,
              progress=rank == 0, checkpoint_path=os.path.join(folder, f"{name}.pt"),
              checkpoint_every=args.checkpoint_every, desc=f"{name} x{world}")
        if rank == 0:
            rows = []
            for horizon in [{}] + args.horizon:
                metrics = comparison.evaluate(model, task, n_seqs=args.n_eval, **horizon)
                for key in ("per_position_error_bits", "per_position_kl_bits"):  # arrays -> JSON lists
                    metrics[key] = [None if v != v else float(v) for v in metrics[key]]  # nan -> null
                rows.append({"arch": args.arch, "task": args.task, "size": args.size, "seed": args.seed,
                             "steps": args.steps, "world_size": world,
                             "n_params": models.count_parameters(model),
                             "horizon": comparison.horizon_label(horizon), **metrics})
            with open(os.path.join(args.out, f"{name}.json"), "w") as f:
                json.dump(rows, f, indent=1)
            for row in rows:
                print(f"{name} [{row['horizon']}]: entropy error {row['entropy_error_bits']:.4f} bits, "
                      f"KL {row['kl_bits']:.4f} bits, accuracy {row['accuracy']:.3f} "
                      f"(Bayes {row['bayes_accuracy']:.3f})", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

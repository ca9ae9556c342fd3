"""Train every architecture x wind tunnel x seed to convergence, for chapters 7 and 8.

    python scripts/train_wind_tunnels.py                      # CPU sizes, 4 x 3 x 3 runs, 2 workers
    python scripts/train_wind_tunnels.py --size paper --archs transformer --seeds 0 --workers 1

Each run is ``comparison.train_converged`` (AdamW, warm-up + cosine, clipping, ``CONVERGED_STEPS``);
it writes ``<arch>-<task>-seed<seed>.pt`` (weights) and ``.json`` (configuration, recipe, seconds,
learning curve, final metrics on held-out sequences) into ``bayesattn_lite/pretrained/<size>/``,
where ``comparison.load_pretrained`` finds them, and ``summary.json`` with the script's total time.

Resumable at two levels: a run whose record is already there with the same steps and recipe is
skipped (``--force`` retrains it), and a run that was interrupted continues from its checkpoint in
``--checkpoint-dir`` (every 200 steps and on Ctrl-C). Each run shows a progress bar; runs go to
``--workers`` processes of one thread each, longest first.
"""

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, also when it is not installed

from bayesattn_lite import comparison, models, wind_tunnels  # noqa: E402

# Relative cost of one step (ms per step of batch 64 on one thread, measured): longest runs first,
# so that two workers finish together.
COST = {"mamba": 4.0, "transformer": 1.0, "lstm": 0.6, "mlp": 0.6}


def _init_worker(counter):
    """Give each worker process its own line for its progress bars (tqdm reads TQDM_POSITION)."""
    with counter.get_lock():
        os.environ["TQDM_POSITION"] = str(counter.value)
        counter.value += 1
    import torch
    torch.set_num_threads(1)


def run_one(job):
    """One run: train, save, return its record (module level, so worker processes can import it)."""
    model, record = comparison.train_converged(
        job["arch"], job["task"], job["seed"], size=job["size"], steps=job["steps"], device=job["device"],
        checkpoint_path=job["checkpoint_path"], progress=job["progress"])
    comparison.save_pretrained(model, record, job["out"])
    return record


def _up_to_date(path, steps, size):
    """A record that a rerun would reproduce: same steps and recipe."""
    if not path.exists():
        return False
    record = json.loads(path.read_text())
    lr = comparison.PAPER_LR if size == "paper" else comparison.RECIPE["lr"]
    return record["steps"] == steps and record["recipe"] == dict(comparison.RECIPE, lr=lr)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("cpu", "paper"), default="cpu")
    parser.add_argument("--archs", nargs="+", choices=models.ARCHITECTURES, default=list(models.ARCHITECTURES))
    parser.add_argument("--tasks", nargs="+", choices=sorted(wind_tunnels.WIND_TUNNELS), default=["bijection", "hmm", "recall"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="override CONVERGED_STEPS (for tests)")
    parser.add_argument("--workers", type=int, default=2, help="CPU processes (1 on a GPU)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--out", default=None, help="default: bayesattn_lite/pretrained/<size>")
    parser.add_argument("--checkpoint-dir", default=str(ROOT / "runs" / "wind_tunnels"))
    parser.add_argument("--force", action="store_true", help="retrain runs whose record is up to date")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    out = Path(args.out) if args.out else comparison.PRETRAINED_DIR / args.size
    jobs = []
    for task in args.tasks:
        steps = args.steps or comparison.CONVERGED_STEPS[args.size][task]
        for arch in args.archs:
            for seed in args.seeds:
                name = f"{arch}-{task}-seed{seed}"
                if not args.force and _up_to_date(out / f"{name}.json", steps, args.size):
                    print(f"up to date, skipped: {name}")
                    continue
                ckpt = Path(args.checkpoint_dir) / args.size / f"{name}-{steps}.pt"
                if args.force and ckpt.exists():
                    ckpt.unlink()
                jobs.append({"arch": arch, "task": task, "seed": seed, "size": args.size, "steps": steps,
                             "device": args.device, "checkpoint_path": str(ckpt), "out": str(out),
                             "progress": not args.no_progress})
    jobs.sort(key=lambda j: -COST[j["arch"]] * j["steps"] * wind_tunnels.wind_tunnel(j["task"], j["size"]).seq_len)
    print(f"{len(jobs)} runs to train into {out}, {args.workers} worker(s)", flush=True)

    start = time.perf_counter()
    records = []
    if args.workers == 1:
        _init_worker(multiprocessing.Value("i", 0))
        records = [run_one(job) for job in jobs]
    else:  # spawn, not fork: a forked torch can deadlock
        context = multiprocessing.get_context("spawn")
        counter = context.Value("i", 0)
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context, initializer=_init_worker,
                                                    initargs=(counter,)) as pool:
            futures = [pool.submit(run_one, job) for job in jobs]
            for future in concurrent.futures.as_completed(futures):
                records.append(future.result())
    total = time.perf_counter() - start
    for r in sorted(records, key=lambda r: (r["task"], r["arch"], r["seed"])):
        print(f"{r['arch']:12s} {r['task']:10s} seed {r['seed']}  {r['steps']:6d} steps  {r['seconds']:7.1f} s  "
              f"KL {r['final']['trained']['kl_bits']:.4f} bits")
    print(f"total {total / 60:.1f} min for {len(records)} runs ({args.workers} workers)")
    if records:
        summary = {"size": args.size, "runs": len(records), "workers": args.workers,
                   "total_seconds": round(total, 1), "cpu_count": os.cpu_count(),
                   "run_seconds": round(sum(r["seconds"] for r in records), 1)}
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return records


if __name__ == "__main__":
    main()

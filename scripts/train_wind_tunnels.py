"""Train every architecture x wind tunnel x seed to convergence, for chapters 7 and 8.

    python scripts/train_wind_tunnels.py                      # CPU sizes, 4 x 3 x 3 runs, 2 workers
    python scripts/train_wind_tunnels.py --size paper --archs transformer --seeds 0 --workers 1
    python scripts/train_wind_tunnels.py --variants d48 d96 stream   # the size ladder and variants
    python scripts/train_wind_tunnels.py --variants d96 --measure    # then their measurements

``--size paper`` prints the cost estimate (parameters, steps, GPU-hours) before it starts.
``--variants`` trains entries of ``converged.VARIANTS`` (wider or deeper transformers, wider
LSTMs and SSMs, longer runs, stream positions, no weight decay, the paper's recall) into
``pretrained/<size>/variants/<name>/``; ``--measure`` then adds ``converged.measure_run``'s
figures to their records and moves the weights of the rungs that do not ship out of the package.

Each run is ``converged.train_converged`` (AdamW, warm-up + cosine, clipping, the wind tunnel's
``converged_steps``);
it writes ``<arch>-<task>-seed<seed>.pt`` (weights) and ``.json`` (configuration, recipe, seconds,
learning curve, final metrics on held-out sequences) into ``bayesattn_lite/pretrained/<size>/``,
where ``converged.load_pretrained`` finds them, and ``summary.json`` with the script's total time.

Resumable at two levels: a run whose record is already there with the same steps and recipe is
skipped (``--force`` retrains it), and a run that was interrupted continues from its checkpoint in
``--checkpoint-dir`` (every 200 steps and on Ctrl-C). Each run shows a progress bar; runs go to
``--workers`` processes of one thread each, longest first (the architecture's ``cost`` in
``models.REGISTRY``).
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

from bayesattn_lite import comparison, converged, models, wind_tunnels  # noqa: E402


def _init_worker(counter):
    """Give each worker process its own line for its progress bars (tqdm reads TQDM_POSITION)."""
    with counter.get_lock():
        os.environ["TQDM_POSITION"] = str(counter.value)
        counter.value += 1
    import torch
    torch.set_num_threads(1)


def run_one(job):
    """One run: train, save, return its record (module level, so worker processes can import it)."""
    model, record = converged.train_converged(
        job["arch"], job["task"], job["seed"], size=job["size"], steps=job["steps"], device=job["device"],
        checkpoint_path=job["checkpoint_path"], progress=job["progress"], variant=job["variant"])
    converged.save_pretrained(model, record, job["out"])
    return record


def _up_to_date(path, steps, size, variant):
    """A record that a rerun would reproduce: same steps and recipe."""
    if not path.exists():
        return False
    record = json.loads(path.read_text())
    return record["steps"] == steps and record["recipe"] == converged.variant_recipe(variant, size)


def _cost(job):
    """Relative cost of a job, to start the longest first: the architecture's cost per step
    (``models.REGISTRY``) x steps x length x width x depth."""
    sizes = dict(models.sizes(job["arch"], job["size"]))
    if job["variant"]:
        sizes.update(converged.VARIANTS[job["variant"]].sizes.get(job["arch"], {}))
    base = models.sizes(job["arch"], job["size"])
    task = converged.variant_task(job["task"], job["variant"], job["size"])
    return (models.REGISTRY[job["arch"]].cost * job["steps"] * task.seq_len * sizes["d_model"] / base["d_model"]
            * sizes.get("n_layers", 1) / base.get("n_layers", 1))


def _runs(args):
    """(arch, task, seed, variant) of every run the arguments ask for."""
    if not args.variants:
        return [(a, t, s, None) for t in args.tasks
                for a in args.archs or models.ARCHITECTURES for s in args.seeds or (0, 1, 2)]
    runs = []
    for name in args.variants:
        v = converged.VARIANTS[name]
        runs += [(a, t, s, name) for a, t in v.runs for s in converged.variant_seeds(name, a, t)
                 if (not args.archs or a in args.archs) and t in args.tasks
                 and (not args.seeds or s in args.seeds)]
    return runs


def print_cost_estimate(jobs):
    """The paper size's cost before it starts: parameters, steps, GPU-hours per run and in all
    (``converged.cost_estimate``: an estimate from stated assumptions, not a measurement)."""
    total = 0.0
    print(f"{'run':40s} {'parameters':>11s} {'steps':>8s} {'TFLOP':>8s} {'GPU-hours':>10s}")
    for j in jobs:
        c = converged.cost_estimate(j["arch"], j["task"], j["size"], variant=j["variant"])
        total += c["gpu_hours"]
        label = comparison.run_name(j["arch"], j["task"], j["seed"]) + (f" ({j['variant']})" if j["variant"] else "")
        print(f"{label:40s} {c['n_params']:11,d} {j['steps']:8,d} {c['tflop']:8.0f} {c['gpu_hours']:10.2f}")
    print(f"estimated total: {total:.1f} GPU-hours for {len(jobs)} runs (assumes "
          f"{converged.ASSUMED_GPU_FLOPS / 1e12:.0f} TFLOP/s and a floor per step, the architecture's "
          "gpu_step_seconds; "
          "scripts/gpu_check.py measures the real rate)", flush=True)


def measure(args):
    """Write ``measured`` into the record of every run asked for whose weights are there."""
    import torch
    torch.set_num_threads(1)
    done = []
    for arch, task, seed, variant in _runs(args):
        out = Path(args.out) if args.out else converged.folder(args.size, None, variant)
        path = out / f"{comparison.run_name(arch, task, seed)}.json"
        if not (path.exists() and path.with_suffix(".pt").exists()):
            print(f"no weights, not measured: {path}")
            continue
        record = json.loads(path.read_text())
        model = converged.load_pretrained(arch, task, seed, variant, args.size, directory=out)
        record["measured"] = converged.measure_run(model, converged.variant_task(task, variant, args.size))
        path.write_text(json.dumps(record, indent=1) + "\n")
        done.append(path)
        if variant and not converged.VARIANTS[variant].ship_weights and not args.out:
            # the largest rungs ship their records only: keep their weights outside the package
            keep = Path(args.checkpoint_dir) / args.size / "unshipped" / variant
            keep.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".pt").rename(keep / path.with_suffix(".pt").name)
            print(f"weights not shipped, moved to {keep}: {path.stem}")
    print(f"measured {len(done)} runs")
    return done


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("small", "paper"), default="small")
    parser.add_argument("--archs", nargs="+", choices=models.ARCHITECTURES, default=None, help="default: all")
    parser.add_argument("--tasks", nargs="+", choices=sorted(wind_tunnels.WIND_TUNNELS),
                        default=list(wind_tunnels.WIND_TUNNELS), help="default: every wind tunnel")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (a variant's own)")
    parser.add_argument("--variants", nargs="+", choices=sorted(converged.VARIANTS), default=None,
                        help="ladder rungs and training variants (converged.VARIANTS) instead of the base runs")
    parser.add_argument("--steps", type=int, default=None, help="override the wind tunnels' converged_steps (for tests)")
    parser.add_argument("--workers", type=int, default=2, help="CPU processes (1 on a GPU)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--out", default=None, help="default: bayesattn_lite/pretrained/<size>")
    parser.add_argument("--checkpoint-dir", default=str(ROOT / "runs" / "wind_tunnels"))
    parser.add_argument("--force", action="store_true", help="retrain runs whose record is up to date")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--measure", action="store_true",
                        help="train nothing: add converged.measure_run's figures to every finished record "
                             "(before the weights of the rungs that do not ship are removed)")
    args = parser.parse_args(argv)
    if args.measure:
        return measure(args)

    jobs = []
    for arch, task, seed, variant in _runs(args):
        steps = args.steps or converged.variant_steps(task, variant, args.size)
        out = Path(args.out) if args.out else converged.folder(args.size, None, variant)
        name = comparison.run_name(arch, task, seed)
        label = f"{name} ({variant})" if variant else name
        if not args.force and _up_to_date(out / f"{name}.json", steps, args.size, variant):
            print(f"up to date, skipped: {label}")
            continue
        ckpt = Path(args.checkpoint_dir) / args.size / f"{variant + '-' if variant else ''}{name}-{steps}.pt"
        if args.force and ckpt.exists():
            ckpt.unlink()
        jobs.append({"arch": arch, "task": task, "seed": seed, "size": args.size, "steps": steps,
                     "variant": variant, "device": args.device, "checkpoint_path": str(ckpt), "out": str(out),
                     "progress": not args.no_progress})
    jobs.sort(key=lambda j: -_cost(j))
    if args.size == "paper":
        print_cost_estimate(jobs)
    out = Path(args.out) if args.out else converged.PRETRAINED_DIR / args.size
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
        print(f"{r['arch']:12s} {r['task']:10s} seed {r['seed']}  {r.get('variant') or 'base':9s} {r['steps']:6d} steps  "
              f"{r['seconds']:7.1f} s  KL {r['final']['trained']['kl_bits']:.4f} bits")
    print(f"total {total / 60:.1f} min for {len(records)} runs ({args.workers} workers)")
    if records and not args.variants:
        summary = {"size": args.size, "runs": len(records), "workers": args.workers,
                   "total_seconds": round(total, 1), "cpu_count": os.cpu_count(),
                   "run_seconds": round(sum(r["seconds"] for r in records), 1)}
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return records


if __name__ == "__main__":
    main()

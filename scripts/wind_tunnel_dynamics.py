"""Measure frame and precision inside the wind-tunnel Transformer while it trains, for chapter 9.

    python scripts/wind_tunnel_dynamics.py                    # bijection and recall x seeds 0-2, 2 workers
    python scripts/wind_tunnel_dynamics.py --tasks bijection --seeds 0 --workers 1
    python scripts/wind_tunnel_dynamics.py --optimizer sgd-constant --workers 1   # a control of chapter 9

Each run is ``dynamics.run``: the Transformer of chapters 7-8 trained with the shipped recipe
(``converged.RECIPE``, the wind tunnel's ``converged_steps``, the same seed and data stream as
``scripts/train_wind_tunnels.py``), or with one of the controls ``--optimizer`` names
(``dynamics.OPTIMIZERS``: AdamW at a constant rate, plain SGD at a constant rate), with snapshots of every layer's attention maps and values on a
fixed probe batch every ``dynamics.SNAPSHOT_EVERY`` steps and the attribution of the loss decrease
to parameter groups. It writes one small JSON record per (task, seed),
``transformer-<task>-seed<seed>.json`` (a control's adds ``-<optimizer>``), into
``bayesattn_lite/pretrained/dynamics/`` (no weights), and ``summary.json`` (``summary-<optimizer>.json``
for a control) with the script's total time.

Resumable per run: a run whose record is there with the same settings is skipped (``--force``
reruns it). Each run shows a progress bar; runs go to ``--workers`` processes of one thread each,
longest first.
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

from bayesattn_lite import dynamics, wind_tunnels  # noqa: E402


def _init_worker(counter):
    """Give each worker process its own line for its progress bars (tqdm reads TQDM_POSITION)."""
    with counter.get_lock():
        os.environ["TQDM_POSITION"] = str(counter.value)
        counter.value += 1


def run_one(job):
    """One run: measure, save, return its record (module level, so worker processes can import it)."""
    record = dynamics.run(job["task"], job["seed"], progress=job["progress"], optimizer=job["optimizer"])
    dynamics.save_record(record, job["out"])
    return record


def _settings(optimizer):
    return {"recipe": dynamics.recipe(optimizer), "snapshot_every": dynamics.SNAPSHOT_EVERY,
            "attribution_nodes": dynamics.ATTRIBUTION_NODES,
            "probe": {"n": dynamics.N_PROBE, "seed": dynamics.PROBE_SEED}}


def _up_to_date(path, task, optimizer):
    """A record that a rerun would reproduce: the full run, with the same settings."""
    if not path.exists():
        return False
    record = json.loads(path.read_text())
    steps = wind_tunnels.WIND_TUNNELS[task].converged_steps["small"]
    return (record.get("stopped_at") == steps == record.get("steps_total")
            and all(record.get(k) == v for k, v in _settings(optimizer).items()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=dynamics.TASKS, default=list(dynamics.TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(dynamics.SEEDS))
    parser.add_argument("--optimizer", choices=list(dynamics.OPTIMIZERS), default=dynamics.SHIPPED,
                        help="the recipe: the shipped one (default) or a control of chapter 9")
    parser.add_argument("--workers", type=int, default=2, help="CPU processes")
    parser.add_argument("--out", default=None, help="default: bayesattn_lite/pretrained/dynamics")
    parser.add_argument("--force", action="store_true", help="rerun runs whose record is up to date")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    out = Path(args.out) if args.out else dynamics.DYNAMICS_DIR
    jobs = []
    for task in args.tasks:
        for seed in args.seeds:
            path = dynamics.record_path(task, seed, out, args.optimizer)
            if not args.force and _up_to_date(path, task, args.optimizer):
                print(f"up to date, skipped: {path.name}")
                continue
            jobs.append({"task": task, "seed": seed, "out": str(out), "progress": not args.no_progress,
                         "optimizer": args.optimizer})
    # longest first (steps x sequence length), so that two workers finish together
    jobs.sort(key=lambda j: -wind_tunnels.WIND_TUNNELS[j["task"]].converged_steps["small"]
              * wind_tunnels.wind_tunnel(j["task"]).seq_len)
    print(f"{len(jobs)} runs to measure into {out}, {args.workers} worker(s)", flush=True)

    start = time.perf_counter()
    if args.workers == 1:
        records = [run_one(job) for job in jobs]
    else:  # spawn, not fork: a forked torch can deadlock
        context = multiprocessing.get_context("spawn")
        counter = context.Value("i", 0)
        records = []
        with concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=context, initializer=_init_worker,
                                                    initargs=(counter,)) as pool:
            futures = [pool.submit(run_one, job) for job in jobs]
            for future in concurrent.futures.as_completed(futures):
                records.append(future.result())
    total = time.perf_counter() - start
    for r in sorted(records, key=lambda r: (r["task"], r["seed"])):
        check = sum(sum(a) for a in r["attribution"].values()) / r["realised_decrease"]
        print(f"{r['task']:10s} seed {r['seed']}  {r['stopped_at']:5d} steps  {r['seconds']:6.1f} s  "
              f"KL at the end {r['final']['kl_bits']:.4f} bits  first-order / realised decrease {check:.3f}")
    print(f"total {total / 60:.1f} min for {len(records)} runs ({args.workers} workers)")
    if records:
        summary = {"optimizer": args.optimizer, "runs": len(records), "workers": args.workers, "total_seconds": round(total, 1),
                   "cpu_count": os.cpu_count(), "run_seconds": round(sum(r["seconds"] for r in records), 1)}
        out.mkdir(parents=True, exist_ok=True)
        name = "summary.json" if args.optimizer == dynamics.SHIPPED else f"summary-{args.optimizer}.json"
        (out / name).write_text(json.dumps(summary, indent=1) + "\n")
    return records


if __name__ == "__main__":
    main()

"""Train the sticky chain to convergence, for chapter 6: the runs of ``experiments.LONG_RUNS``.

    python scripts/sticky_long_runs.py                 # every run, most important first
    python scripts/sticky_long_runs.py --only pool64-std0.1 --force
    python scripts/sticky_long_runs.py --only pool64-std0.1 --steps 200 --seeds 42 --out /tmp/try   # a quick try

The paper's design trains each seed for 1000 steps on one sequence, too short for attention or
values to settle, and a longer run memorises the sequence. The main run here (``pool64-std0.1``)
trains the paper's head, rates and seeds on a pool of 64 fresh sequences per seed, one per step, for
8000 steps, and scores it on a held-out sequence; ``paper-design-std0.1`` runs the paper's own
design for 3000 steps (to show where it memorises); the ``pool64-std*`` runs are the init-scale
sweep; ``paper-run-sgd-lr0.1`` is the third schedule of chapter 6's paper run (SGD at 0.1, 1000
steps), which the chapter loads instead of training it beside the race. Each writes
``bayesattn_lite/pretrained/sticky/long-<name>.json`` (``experiments.long_run``), where
``experiments.load_long_run`` finds it. ``controls`` trains chapter 6's controls (``experiments.CONTROLS``:
11 schedules x 5 seeds, 1000 steps at T = 1000) and saves the run as ``controls.npz``
(``experiments.save_schedule_run``), where ``experiments.load_controls`` finds it.

Resumable at two levels: a run whose record is there with the same configuration is skipped
(``--force`` retrains it), and an interrupted run continues from its checkpoint in
``--checkpoint-dir`` (every 500 steps and on Ctrl-C). Each run shows a progress bar and its time.
"""

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's package, also when it is not installed

from bayesattn_lite import experiments  # noqa: E402


def _up_to_date(path, cfg):
    if not path.exists():
        return False
    saved = {"fresh": False, "intervals": [], **json.loads(path.read_text())["config"]}  # fields added later: defaults
    return saved == json.loads(json.dumps(asdict(cfg)))


def controls(args, overrides):
    """Train and save chapter 6's controls, unless the saved run has the same configuration."""
    path = experiments.controls_path(args.out)
    kwargs = {"seeds": experiments.PAPER_SEEDS, "steps": 1000, **overrides}
    wanted = {"schedules": experiments.CONTROLS, "seeds": list(kwargs["seeds"]), "steps": kwargs["steps"],
              "T": experiments.CONTROLS_T}
    saved = experiments.saved_run_config(path) if path.exists() else None   # none saved yet: train them
    if not args.force and saved and all(saved[k] == json.loads(json.dumps(v)) for k, v in wanted.items()):
        print(f"{experiments.CONTROLS_NAME}: up to date, skipped ({path})")
        return
    print(f"{experiments.CONTROLS_NAME}: {len(experiments.CONTROLS) * len(kwargs['seeds'])} models x "
          f"{kwargs['steps']} steps, T = {experiments.CONTROLS_T}")
    run = experiments.controls_run(**kwargs, device=args.device, progress=not args.no_progress,
                                   checkpoint_path=args.checkpoint_dir / f"{experiments.CONTROLS_NAME}.pt")
    experiments.save_schedule_run(run, path)
    print(f"{experiments.CONTROLS_NAME}: {run.seconds:.0f} s on {run.device} -> {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="names of runs to train (default: all)")
    parser.add_argument("--out", type=Path, default=experiments.RECORDS, help="folder for the records")
    parser.add_argument("--checkpoint-dir", type=Path, default=ROOT / "runs" / "sticky")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--force", action="store_true", help="retrain runs whose record is up to date")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--steps", type=int, help="train this many steps instead (a quick try, not the record)")
    parser.add_argument("--seeds", type=int, nargs="*", help="these seeds instead of the paper's five")
    args = parser.parse_args(argv)
    overrides = {**({"steps": args.steps} if args.steps else {}), **({"seeds": tuple(args.seeds)} if args.seeds else {})}
    configs = [replace(c, **overrides) for c in experiments.LONG_RUNS if not args.only or c.name in args.only]
    # a quick try shorter than a run's extra snapshot intervals keeps those that fit in it
    configs = [replace(c, intervals=tuple(n for n in c.intervals if n <= c.steps)) for c in configs]
    names = [c.name for c in experiments.LONG_RUNS] + [experiments.CONTROLS_NAME]
    unknown = set(args.only or ()) - set(names)
    if unknown:
        parser.error(f"unknown run(s) {sorted(unknown)}: expected names from {names}")
    args.out.mkdir(parents=True, exist_ok=True)
    began, records = time.perf_counter(), []
    for cfg in configs:
        path = experiments.record_path(cfg.name, args.out)
        if not args.force and _up_to_date(path, cfg):
            print(f"{cfg.name}: up to date, skipped ({path})")
            continue
        models = len(cfg.schedules) * len(cfg.seeds)
        print(f"{cfg.name}: {models} models x {cfg.steps} steps, T = {cfg.T}, pool {cfg.pool}, init std {cfg.init_std}")
        record = experiments.long_run(cfg, device=args.device, progress=not args.no_progress,
                                      checkpoint_path=args.checkpoint_dir / f"{cfg.name}.pt")
        path.write_text(json.dumps(record) + "\n")
        records.append(record)
        print(f"{cfg.name}: {record['seconds']:.0f} s on {record['device']} -> {path}")
    if not args.only or experiments.CONTROLS_NAME in args.only:
        controls(args, overrides)  # a saved run, not a record: main returns the long runs' records
    print(f"total {time.perf_counter() - began:.0f} s")
    return records


if __name__ == "__main__":
    main()

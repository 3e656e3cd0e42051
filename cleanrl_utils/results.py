"""Published results: per-run records of the campaign (benchmark/campaign.py), and the tables and figures made
from them.

    python -m cleanrl_utils.results                     # benchmark/results -> docs/results (tables and PNGs)
    python -m cleanrl_utils.results --results-dir DIR --output-dir OUT

Each run's record (`benchmark/results/runs/<exp_name>/<env_id>__<seed>.json`) holds its summary (script, env,
seed, budget, final return, best test return, wall-clock, CPU, command) and two downsampled curves: training
episodes over steps and wall-clock, and the periodic test. `summary.csv` has one row per record.

The tables give, per script x env, mean +- std over seeds of the final return (the training episodes that ended
in the last 5% of the steps) and of Tianshou's metric (per seed, the best mean test return; Tianshou itself takes
the maximum of the seed-mean test curve, which is higher still), beside Tianshou's and CleanRL's published figures.
Aggregates over tasks use rliable: IQM and optimality gap of scores normalised by Tianshou's figure, with stratified
bootstrap 95% CIs, and a performance profile.
"""

import csv
import glob
import json
import os

import numpy as np

SUMMARY_COLUMNS = (
    "script",
    "exp_name",
    "env_id",
    "seed",
    "total_timesteps",
    "final_return",
    "best_test_return",
    "wall_seconds",
    "cpu_seconds",
    "cpu",
)
FINAL_FRACTION = 0.05  # final_return: the episodes that ended in the last 5% of the steps
CURVE_POINTS = 100  # bins of the stored training curve


def cpu_description() -> str:
    """lscpu's model name with the core count and the ISA that decides speed, e.g. "AMD EPYC (family 25 model 17),
    2 cores, AVX-512 + AVX512-BF16"."""
    info = {}
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        import platform

        return f"{platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores"
    flags = set(info.get("flags", "").split())
    isa = " + ".join(
        name
        for name, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX512-BF16", "avx512_bf16"), ("AMX", "amx_tile"))
        if flag in flags
    )
    model = info.get("model name", "unknown CPU")
    return f"{model} (family {info.get('cpu family', '?')} model {info.get('model', '?')}), {len(os.sched_getaffinity(0))} cores, {isa}"


def binned_curve(steps: np.ndarray, wall: np.ndarray, values: np.ndarray, total: int, points: int) -> dict:
    """The training curve downsampled to `points` bins of equal steps: per non-empty bin, the mean return of the
    episodes that ended in it, at the bin's last episode's step and wall-clock."""
    edges = np.linspace(0, total, points + 1)
    which = np.clip(np.searchsorted(edges, steps, side="left") - 1, 0, points - 1)
    curve = {"step": [], "wall_seconds": [], "return": []}
    for index in np.unique(which):
        chosen = which == index
        curve["step"].append(int(steps[chosen][-1]))
        curve["wall_seconds"].append(round(float(wall[chosen][-1]), 1))
        curve["return"].append(round(float(values[chosen].mean()), 3))
    return curve


def run_record(run_dir: str, *, script: str, wall_seconds: float, cpu: str, test: dict) -> dict:
    """A finished run's results record, from its tensorboard events and its periodic test curve."""
    from cleanrl_utils.plot import load_runs

    (run,) = [r for r in load_runs(os.path.dirname(run_dir), "charts/episodic_return") if r.name == os.path.basename(run_dir)]
    if not run.finished:
        raise RuntimeError(f"{run_dir} did not finish (last step {run.last_step:,} of {run.expected_steps:,})")
    total = run.expected_steps or run.last_step
    final = run.values[run.steps > (1 - FINAL_FRACTION) * total]
    return {
        "script": script,
        "exp_name": run.exp_name,
        "env_id": run.env_id,
        "seed": run.seed,
        "total_timesteps": int(total),
        "final_return": float(final.mean()) if len(final) else float(run.values[-1]),
        "final_episodes": int(len(final)),
        "best_test_return": max(test["return"]) if test["return"] else None,
        "wall_seconds": round(wall_seconds, 1),
        "cpu": cpu,
        "train_curve": binned_curve(run.steps, run.wall, run.values, int(total), CURVE_POINTS),
        "test_curve": test,
    }


def load_records(results_dir: str) -> list[dict]:
    records = []
    for path in sorted(glob.glob(os.path.join(results_dir, "runs", "*", "*.json"))):
        with open(path) as file:
            records.append(json.load(file))
    return records


def write_summary_csv(results_dir: str) -> str:
    """Rewrite `summary.csv`, one row per run record; returns its path."""
    path = os.path.join(results_dir, "summary.csv")
    rows = sorted(load_records(results_dir), key=lambda r: (r["exp_name"], r["env_id"], r["seed"]))
    with open(path + ".tmp", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(SUMMARY_COLUMNS)
        for record in rows:
            writer.writerow(["" if record.get(column) is None else record[column] for column in SUMMARY_COLUMNS])
    os.replace(path + ".tmp", path)
    return path

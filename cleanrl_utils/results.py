"""Published results: per-run records of the campaign (benchmark/campaign.py), and the tables and figures made
from them.

    python -m cleanrl_utils.results                     # benchmark/results -> docs/results, README.md, docs/*.md
    python -m cleanrl_utils.results --results-dir DIR --output-dir OUT   # tables.md; pages (and their PNGs) only with --docs

Each run's record (`benchmark/results/records/<exp_name>/<env_id>__<seed>.json`) holds its summary (script, env,
seed, budget, final return, best test return, wall-clock, CPU, command) and two downsampled curves: training
episodes over steps and wall-clock, and the periodic test. `summary.csv` has one row per record.

The tables give, per script x env, mean +- std over seeds of the final return (the training episodes that ended
in the last 5% of the steps) and of Tianshou's metric (the peak of the seed-mean test curve, with the std over seeds
at that test step; summary.csv's best_test_return is each seed's own best, higher), beside Tianshou's and CleanRL's
published figures. A published figure more than one std above our seeds' mean is marked ▼ (a shortfall to explain).
Aggregates over tasks use rliable: IQM and optimality gap of scores normalised by Tianshou's figure, with stratified
bootstrap 95% CIs, and a performance profile.
"""

from cleanrl_utils.stop import LEFT_BEHIND, exit_tool_on_signals, make_output_dir, map_blas_buffer_now, written_whole

if __name__ == "__main__":
    # Ctrl-C or SIGTERM, also while the libraries below load: one line, no traceback
    exit_tool_on_signals("cleanrl_utils.results")

import csv
import glob
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import tyro

from cleanrl_utils.checkpoint import write_atomically
from cleanrl_utils.checks import MAX_BUDGET
from cleanrl_utils.run import check_writable_dir

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


def run_record(run_dir: str, *, script: str, wall_seconds: float, cpu: str, test: dict, pauses=()) -> dict:
    """A finished run's results record, from its tensorboard events and its periodic test curve. `pauses`: the
    (from, to) wall times between the attempts of a run continued from a checkpoint, left out of its wall-clock."""
    from cleanrl_utils.plot import load_runs

    (run,) = [r for r in load_runs(os.path.dirname(run_dir), "charts/episodic_return") if r.name == os.path.basename(run_dir)]
    if not run.finished:
        raise RuntimeError(f"{run_dir} did not finish (last step {run.last_step:,} of {run.expected_steps:,})")
    total = run.expected_steps or run.last_step
    final = run.values[run.steps > (1 - FINAL_FRACTION) * total]
    when = run.start_time + run.wall
    wall = run.wall - sum((np.clip(when - start, 0, end - start) for start, end in pauses), np.zeros_like(run.wall))
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
        "train_curve": binned_curve(run.steps, wall, run.values, int(total), CURVE_POINTS),
        "test_curve": test,
    }


# The keys the tables and figures read: a record without one is refused by name, not met as a KeyError mid-page.
# MAX_BUDGET (env steps, checks.py): a record past it was edited (trial 14: 10^30 showed as "1e+24M")
MAX_RETURN = 1e12  # |returns|: past it a record was edited, and the std of 1e308s overflows
RECORD_KEYS = ("script", "exp_name", "env_id", "seed", "total_timesteps", "final_return", "best_test_return")
RECORD_KEYS += ("wall_seconds", "cpu", "train_curve", "test_curve")
TIME_TO_SCORE_KEYS = ("script", "env_id", "seed", "target", "window", "reached", "minutes_to_target", "steps_to_target")
TIME_TO_SCORE_KEYS += ("best_window_mean", "minutes_run", "steps_run", "cap_minutes", "cpu", "command", "games")


def read_record(path: str, keys: tuple[str, ...]) -> dict:
    """One JSON record with every one of `keys`; anything else (cut short, not JSON, another file) ends the tool with
    one line naming the file, before anything is written."""
    try:
        with open(path) as file:
            record = json.load(file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        sys.exit(f"error: the record {path!r} does not read as JSON ({type(error).__name__}: {error}); restore it from git")
    missing = [key for key in keys if key not in record] if isinstance(record, dict) else list(keys)
    if missing:
        sys.exit(f"error: the record {path!r} lacks {', '.join(missing)}; it is not a record this tool wrote (restore it)")
    if problem := bad_values(record):
        sys.exit(f"error: the record {path!r} has {problem}; it is not as this tool wrote it (restore it from git)")
    return record


def bad_values(record: dict) -> str | None:
    """What is wrong with a record's values, or None: returns must be finite numbers (a NaN would pass into the
    aggregates as [nan, nan] and exit 0), names non-empty strings, seed and budget integers, and each curve a mapping
    of equal-length lists of finite numbers with its fields, at increasing steps (trial 13: an empty, reversed or
    string-seeded record met the figures as a traceback, or exited 0 with a wrong band)."""

    def finite(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    for key in ("final_return", "wall_seconds", "total_timesteps", "target", "best_window_mean", "minutes_run"):
        if key in record and not finite(record[key]) and not (key == "best_window_mean" and record[key] is None):
            return f"{key} = {record[key]!r}, not a finite number"
    if "best_test_return" in record and record["best_test_return"] is not None and not finite(record["best_test_return"]):
        return f"best_test_return = {record['best_test_return']!r}, not a finite number or null"
    for key in ("script", "exp_name", "env_id", "cpu"):
        if key in record and not (isinstance(record[key], str) and record[key]):
            return f"{key} = {record[key]!r}, not a non-empty string"
    for key in ("seed", "total_timesteps", "final_episodes"):
        if key in record and not (isinstance(record[key], int) and not isinstance(record[key], bool)):
            return f"{key} = {record[key]!r}, not an integer"
    if record.get("final_episodes", 0) < 0:  # trial 15: -3 was accepted
        return f"final_episodes = {record['final_episodes']!r}, a negative count"
    if "total_timesteps" in record and not 0 < record["total_timesteps"] <= MAX_BUDGET:
        return f"total_timesteps = {record['total_timesteps']!r}, not in 1..{MAX_BUDGET:.0e}"
    # trial 14: a negative CPU time showed as "-207.0" minutes; a return of 1e308 overflowed the std, pages written
    for key in ("wall_seconds", "cpu_seconds"):
        if record.get(key) is not None and not (finite(record[key]) and record[key] >= 0):
            return f"{key} = {record[key]!r}, not a finite number >= 0"
    for key in ("final_return", "best_test_return", "best_window_mean"):
        if finite(record.get(key)) and abs(record[key]) > MAX_RETURN:
            return f"{key} = {record[key]!r}, past +-{MAX_RETURN:.0e}"
    for key, fields, least in (("train_curve", ("step", "wall_seconds", "return"), 1), ("test_curve", ("step", "return"), 0)):
        if key not in record:
            continue
        curve = record[key]
        if not isinstance(curve, dict) or not all(isinstance(v, list) for v in curve.values()):
            return f"{key} = {curve!r:.60}, not a mapping of lists"
        if missing := [field for field in fields if field not in curve]:
            return f"{key} without {', '.join(missing)}"
        if len({len(v) for v in curve.values()}) > 1:
            return f"{key} with lists of different lengths ({', '.join(f'{k}: {len(v)}' for k, v in curve.items())})"
        if len(curve["step"]) < least:
            return f"{key} with no points (a finished run records at least one)"
        if not all(finite(x) for v in curve.values() for x in v):
            return f"{key} holding a value that is not a finite number"
        steps = curve["step"]
        if any(later <= earlier for earlier, later in zip(steps, steps[1:])):  # the bands interpolate over steps
            return f"{key} whose steps do not increase"
        if steps and not 0 <= steps[0] <= steps[-1] <= record.get("total_timesteps", steps[-1]):
            return f"{key} with steps outside 0..total_timesteps ({steps[0]:,} to {steps[-1]:,})"
        if any(abs(x) > MAX_RETURN for x in curve["return"]):
            return f"{key} holding a return past +-{MAX_RETURN:.0e}"
        if any(later < earlier for earlier, later in zip(curve.get("wall_seconds", []), curve.get("wall_seconds", [])[1:])):
            return f"{key} whose wall_seconds go back"
    if "legs" in record:  # a time-to-score run resumed: each leg's command, minutes and cap
        legs = record["legs"]
        fields = ("command", "minutes_run", "cap_minutes")
        if not (isinstance(legs, list) and legs and all(isinstance(leg, dict) and set(fields) <= set(leg) for leg in legs)):
            return f"legs = {legs!r:.60}, not a list of legs with {', '.join(fields)}"
        if not all(finite(leg["minutes_run"]) and finite(leg["cap_minutes"]) and leg["cap_minutes"] > 0 for leg in legs):
            return "legs holding minutes that are not finite numbers (or a cap <= 0)"
    return None


SCRIPTS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cleanrl")


def load_records(results_dir: str) -> list[dict]:
    """Every run record; one whose exp_name, env_id or seed is not where it sits (records/<exp_name>/<env_id>__<seed>
    .json) is refused in one line (trial 14: an edited exp_name counted the run in another cell, with its figures),
    and so is an exp_name whose records name more than one script (its published figures are the script's)."""
    records = []
    for path in sorted(glob.glob(os.path.join(results_dir, "records", "*", "*.json"))):
        record = read_record(path, RECORD_KEYS)
        where = (os.path.basename(os.path.dirname(path)), os.path.basename(path))
        says = (record["exp_name"], f"{record['env_id']}__{record['seed']}.json")
        if where != says:
            sys.exit(
                f"error: the record {path!r} says it is {says[0]}/{says[1]}; a record sits at "
                "records/<exp_name>/<env_id>__<seed>.json (restore it from git)"
            )
        # its published figures are its script's (trial 16: a cell of records all naming PPO, or no script at all,
        # was read with PPO's figures or none, exit 0): the script exists, and is the one its own command ran
        script = record["script"]
        if not os.path.isfile(os.path.join(SCRIPTS_DIR, f"{script}.py")):
            sys.exit(f"error: the record {path!r} names the script {script!r}, which cleanrl/ does not hold (restore it)")
        if "command" in record and f"cleanrl/{script}.py" not in str(record["command"]):
            sys.exit(
                f"error: the record {path!r} names the script {script!r}, but its command ran another: "
                f"{str(record['command'])[:120]!r} (restore it from git)"
            )
        records.append(record)
    scripts = {}  # exp_name -> {script: [record paths]}: a campaign cell is one script's runs
    for record in records:
        scripts.setdefault(record["exp_name"], {}).setdefault(record["script"], []).append(
            f"{record['env_id']}__{record['seed']}"
        )
    for exp_name, by_script in scripts.items():
        if len(by_script) > 1:  # trial 15: a record saying dqn among a2c's took the cell's published figure away
            held = "; ".join(f"{script}: {', '.join(runs)}" for script, runs in sorted(by_script.items()))
            sys.exit(
                f"error: the records under {os.path.join(results_dir, 'records', exp_name)!r} name {len(by_script)} "
                f"scripts ({held}); one exp_name holds one script's runs (restore them from git, or give each its own "
                "--exp-name)"
            )
    return records


def write_summary_csv(results_dir: str) -> str:
    """Rewrite `summary.csv`, one row per run record; returns its path."""
    path = os.path.join(results_dir, "summary.csv")
    rows = sorted(load_records(results_dir), key=lambda r: (r["exp_name"], r["env_id"], r["seed"]))
    with written_whole(path, newline="") as file:
        writer = csv.writer(file)
        writer.writerow(SUMMARY_COLUMNS)
        for record in rows:
            writer.writerow(["" if record.get(column) is None else record[column] for column in SUMMARY_COLUMNS])
    return path


# ---- tables, aggregates and figures --------------------------------------------------------------------------------
def algorithm_of(script: str) -> str:
    """The algorithm a script's published figures are filed under: the first word of its name (ppo, a2c, sac...)."""
    return script.split("_")[0]


def load_published(path: str) -> dict[tuple[str, str, str], dict]:
    """(algorithm, env_id, source) -> {"value", "steps", "metric"} from `published.csv`; none if the results folder
    has no such file (its tables then show "-" in the published columns)."""
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as file:
        return {
            (row["algorithm"], row["env_id"], row["source"]): {
                "value": float(row["value"]),
                "steps": int(row["steps"]),
                "metric": row["metric"],
            }
            for row in csv.DictReader(file)
        }


def group_records(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(exp_name, env_id) -> its runs, by seed."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        groups.setdefault((record["exp_name"], record["env_id"]), []).append(record)
    return {key: sorted(runs, key=lambda r: r["seed"]) for key, runs in sorted(groups.items())}


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of the scores (rliable's aggregate_iqm, scipy's trim_mean 0.25)."""
    scores = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    cut = int(np.floor(0.25 * len(scores)))
    return float(scores[cut : len(scores) - cut].mean())


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """How far the scores fall short of `gamma` on average (scores above it count as gamma): rliable's definition."""
    return float(np.mean(gamma - np.minimum(np.asarray(scores, dtype=np.float64).ravel(), gamma)))


def stratified_bootstrap(per_task: list[np.ndarray], statistic, reps: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """`statistic` of all runs pooled, with a 95% percentile CI from a stratified bootstrap: the runs of each task are
    resampled with replacement, separately (rliable's StratifiedIndependentBootstrap, written out with numpy)."""
    rng = np.random.default_rng(seed)
    point = statistic(np.concatenate(per_task))
    samples = np.array(
        [statistic(np.concatenate([task[rng.integers(0, len(task), len(task))] for task in per_task])) for _ in range(reps)]
    )
    low, high = np.percentile(samples, [2.5, 97.5])
    return float(point), float(low), float(high)


def mean_std(values: list[float]) -> str:
    """Mean ± std over seeds. One seed has no spread to show: its value stands alone (never "± 0")."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    digits = 0 if abs(np.mean(values)) >= 100 else 1
    mean = f"{np.mean(values):,.{digits}f}"
    return mean if len(values) == 1 else f"{mean} ± {np.std(values):,.{digits}f}"


def tianshou_best(runs: list[dict], up_to: int | None = None) -> tuple[int, np.ndarray] | None:
    """Tianshou's figure for one cell: the step where the seed-mean test curve peaks, and each seed's test return
    there (their mean is that peak). Lower than the mean of each seed's own best, which picks a step per seed.
    `up_to`: only the tests at or before this step (Tianshou reads its 1M figures off 3M-step runs). None without
    test curves."""
    curves = [r["test_curve"] for r in runs if r.get("test_curve", {}).get("step")]
    if not curves or len(curves) < len(runs):
        return None
    steps = sorted(set.intersection(*(set(curve["step"]) for curve in curves)))
    steps = [step for step in steps if up_to is None or step <= up_to]
    if not steps:
        return None
    returns = np.array([[dict(zip(c["step"], c["return"]))[step] for step in steps] for c in curves])  # seeds x steps
    peak = int(np.argmax(returns.mean(axis=0)))
    return steps[peak], returns[:, peak]


def comparable_best(runs: list[dict], reference: dict) -> list[float]:
    """Each seed's test return at the peak Tianshou would report against its published `reference`. A run longer
    than that figure's budget is read as Tianshou reads its own 1M figures off 3M-step runs: the peak up to the
    budget, with the lr still high there (ours reaches 0 only at the run's end)."""
    longer = runs[0]["total_timesteps"] > 1.05 * reference["steps"]
    peak = tianshou_best(runs, up_to=reference["steps"] if longer else None)
    return [] if peak is None else list(peak[1])


def cell_table(groups: dict, exp_names: list[str], published: dict) -> str:
    """One row per exp_name x env: seeds, budget, our two returns, the published figures, time, and the shortfall mark."""
    lines = [
        "| run | env | seeds | steps | final return | best test return | Tianshou | CleanRL | wall-clock min | CPU min |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (exp_name, env_id), runs in sorted(
        groups.items(), key=lambda item: (exp_names.index(item[0][0]) if item[0][0] in exp_names else -1, item[0][1])
    ):
        if exp_name not in exp_names:
            continue
        algorithm = algorithm_of(runs[0]["script"])
        peak = tianshou_best(runs)
        best = [] if peak is None else list(peak[1])
        cells = []
        for source in ("Tianshou", "CleanRL"):
            entry = published.get((algorithm, env_id, source))
            if entry is None:
                cells.append("-")
                continue
            text = f"{entry['value']:,.0f}" if abs(entry["value"]) >= 100 else f"{entry['value']:.1f}"
            ours = comparable_best(runs, entry) if source == "Tianshou" else [r["final_return"] for r in runs]
            if source == "Tianshou" and runs[0]["total_timesteps"] > 1.05 * entry["steps"]:
                text += f" (ours to {entry['steps'] / 1e6:g}M: {mean_std(ours) if ours else 'no test'})"
            elif abs(entry["steps"] - runs[0]["total_timesteps"]) > 0.05 * entry["steps"]:  # another budget
                text += f" (at {entry['steps'] / 1e6:g}M)"
            # issue 27's shortfall rule: our seeds' mean more than one of their std below the published figure
            if ours and len(ours) > 1 and np.mean(ours) + np.std(ours) < entry["value"]:
                text += " ▼"
            cells.append(text)
        wall = np.mean([r["wall_seconds"] for r in runs]) / 60
        cpu_minutes = [r["cpu_seconds"] / 60 for r in runs if r.get("cpu_seconds") is not None]
        lines.append(
            f"| {exp_name} | {env_id} | {len(runs)} | {round(runs[0]['total_timesteps'] / 1e6, 2):g}M | "
            f"{mean_std([r['final_return'] for r in runs])} | {mean_std(best) if best else 'not run'} | {cells[0]} | "
            f"{cells[1]} | {wall:.1f} | {f'{np.mean(cpu_minutes):.1f}' if cpu_minutes else '-'} |"
        )
    return "\n".join(lines)


def normalised_scores(groups: dict, exp_name: str, published: dict, field: str) -> list[np.ndarray]:
    """Per task of `exp_name` with a Tianshou figure, each seed's `field` divided by that figure."""
    per_task = []
    for (name, env_id), runs in groups.items():
        reference = published.get((algorithm_of(runs[0]["script"]), env_id, "Tianshou"))
        if field == "best_test_return" and reference:  # each seed's test return at the cell's peak, as in the table
            values = comparable_best(runs, reference)
        elif field == "best_test_return":
            values = []
        else:
            values = [r[field] for r in runs if r[field] is not None]
        if name == exp_name and reference and values:
            per_task.append(np.array(values) / reference["value"])
    return per_task


def aggregate_table(groups: dict, exp_names: list[str], published: dict) -> str:
    """IQM and optimality gap over tasks of scores normalised by Tianshou's figure, with stratified-bootstrap CIs."""
    lines = [
        "| run | tasks | runs | IQM, final / Tianshou [95% CI] | IQM, best test / Tianshou [95% CI] | optimality gap, best test [95% CI] |",
        "|---|---|---|---|---|---|",
    ]
    for exp_name in exp_names:
        final = normalised_scores(groups, exp_name, published, "final_return")
        if not final:
            continue
        best = normalised_scores(groups, exp_name, published, "best_test_return")
        cells = []
        for per_task, statistic in ((final, iqm), (best, iqm), (best, optimality_gap)):
            if not per_task:
                cells.append("-")
                continue
            point, low, high = stratified_bootstrap(per_task, statistic)
            # a task with one run resamples to itself: its bootstrap spread is 0, not a confidence interval
            alone = sum(len(runs) == 1 for runs in per_task)
            cells.append(
                f"{point:.2f} [{low:.2f}, {high:.2f}]"
                if not alone
                else f"{point:.2f} (no CI: one run on {alone} of {len(per_task)} tasks)"
            )
        lines.append(f"| {exp_name} | {len(final)} | {sum(len(t) for t in final)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def curve_band(curves: list[dict], x_key: str, points: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std over seeds of the stored training curves, on a common grid up to where the shortest ends."""
    end = min(curve[x_key][-1] for curve in curves)
    grid = np.linspace(0, end, points)
    ys = np.array([np.interp(grid, curve[x_key], curve["return"]) for curve in curves])
    return grid, ys.mean(axis=0), ys.std(axis=0)


def plot_group(groups: dict, exp_names: list[str], path: str) -> None:
    """One row per env: mean training return ± std over seeds against steps (left) and wall-clock minutes (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({env_id for (name, env_id) in groups if name in exp_names})
    figure, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env_id in enumerate(envs):
        for exp_name in exp_names:
            runs = groups.get((exp_name, env_id))
            if not runs:
                continue
            for column, (x_key, scale, label) in enumerate(
                (("step", 1e6, "env steps (M)"), ("wall_seconds", 60, "wall-clock (min)"))
            ):
                grid, mean, std = curve_band([r["train_curve"] for r in runs], x_key)
                axis = axes[row][column]
                axis.plot(grid / scale, mean, label=f"{exp_name} ({len(runs)} seeds)")
                axis.fill_between(grid / scale, mean - std, mean + std, alpha=0.2)
                axis.set_xlabel(label)
                axis.set_title(env_id)
        axes[row][0].set_ylabel("training episodic return")
        axes[row][0].legend(fontsize=7)
    figure.tight_layout()
    with written_whole(path, "wb") as file:
        figure.savefig(file, format="png", dpi=80)
    plt.close(figure)


def plot_performance_profile(groups: dict, exp_names: list[str], published: dict, path: str) -> None:
    """Fraction of runs whose best test return is above tau x Tianshou's figure, per run name, with a bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = np.linspace(0, 2, 81)
    figure, axis = plt.subplots(figsize=(7, 4))
    for exp_name in exp_names:
        per_task = normalised_scores(groups, exp_name, published, "best_test_return")
        if not per_task:
            continue
        curves = [stratified_bootstrap(per_task, lambda s, t=tau: float(np.mean(s > t)), reps=500) for tau in taus]
        point, low, high = (np.array(part) for part in zip(*curves))
        axis.plot(taus, point, label=exp_name)
        axis.fill_between(taus, low, high, alpha=0.2)
    axis.set_xlabel("best test return / Tianshou's published figure (tau)")
    axis.set_ylabel("fraction of runs above tau")
    axis.legend(fontsize=7)
    figure.tight_layout()
    with written_whole(path, "wb") as file:
        figure.savefig(file, format="png", dpi=80)
    plt.close(figure)


def load_time_to_score(results_dir: str) -> list[dict]:
    """The records of benchmark/time_to_score.py: one Atari run each, until a score or a wall-clock cap."""
    paths = sorted(glob.glob(os.path.join(results_dir, "time_to_score", "*.json")))
    return [read_record(path, TIME_TO_SCORE_KEYS) for path in paths]


def machine_of(record: dict) -> str:
    """The CPU, and the GPU where the run trained on one (records before --cuda have no "gpu" key: CPU runs)."""
    return f"{record['gpu']} + {record['cpu']}" if record.get("gpu") else record["cpu"]


def settings_of(record: dict) -> str:
    """The arguments the run got beyond the driver's own (--env-id, --seed, --log-dir, --no-cuda), or "defaults"."""
    words = record["command"].split()
    words = words[words.index("--log-dir") + 2 :] if "--log-dir" in words else []
    words = [word for word in words if word != "--no-cuda"]
    return f"`{' '.join(words)}`" if words else "defaults"


def caps_of(record: dict) -> str:
    """The wall-clock cap, or each leg's where the run was resumed (`time_to_score.py --resume`): "caps 50 + 55 min"."""
    legs = record.get("legs") or [record]
    if len(legs) == 1:
        return f"cap {record['cap_minutes']:g} min"
    caps = " + ".join(f"{leg['cap_minutes']:g}" for leg in legs)
    return f"{len(legs)} legs, caps {caps} min"


def time_to_score_table(records: list[dict]) -> str:
    """One row per run: the target, whether and when it was reached, how far the run got, the machine."""
    lines = [
        "| script | settings | game | seed | target | reached at (min / steps) | best mean | ran (min / steps) | machine |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        reached = f"{r['minutes_to_target']:.1f} / {r['steps_to_target']:,}" if r["reached"] else "not reached"
        best = "-" if r["best_window_mean"] is None else f"{r['best_window_mean']:.1f}"
        lines.append(
            f"| {r['script']} | {settings_of(r)} | {r['env_id']} | {r['seed']} | {r['target']:g} (last {r['window']} games) | {reached} | "
            f"{best} | {r['minutes_run']:.1f} / {r['steps_run']:,} ({caps_of(r)}) | {machine_of(r)} |"
        )
    return "\n".join(lines)


def plot_time_to_score(records: list[dict], path: str) -> None:
    """Mean of the last `window` games against wall-clock minutes (left) and env steps (right), one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    legend_inches = 0.2 * ((len(records) + 1) // 2)  # two labels a row, below both plots
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.5 + legend_inches))
    for r in records:
        games = np.array(r["games"], dtype=float).reshape(-1, 3)  # step, seconds since launch, return
        if len(games) < r["window"]:
            continue
        means = np.convolve(games[:, 2], np.ones(r["window"]) / r["window"], mode="valid")
        machine = r.get("gpu") or r["cpu"].split(",")[0]  # the CPU's model: runs on two CPU kinds differ in speed
        label = f"{r['script']} {r['env_id']} seed {r['seed']} ({machine})"
        axes[0].plot(games[r["window"] - 1 :, 1] / 60, means, label=label)
        axes[1].plot(games[r["window"] - 1 :, 0] / 1e6, means, label=label)
    for axis, label in zip(axes, ("wall-clock from launch (min)", "env steps (M)")):
        for target in {r["target"] for r in records}:  # each game's own (Pong 18, Breakout 30 in one figure)
            axis.axhline(target, color="grey", linestyle="--", linewidth=1)
        axis.set_xlabel(label)
    axes[0].set_ylabel(f"mean of the last {records[0]['window']} games")
    figure.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False)
    figure.tight_layout(rect=(0, (legend_inches + 0.05) / (3.5 + legend_inches), 1, 1))
    with written_whole(path, "wb") as file:
        figure.savefig(file, format="png", dpi=80)
    plt.close(figure)


# A docs page asks for its results with a marker pair; everything between them is rewritten:
#   <!-- results NAME: EXP_NAME ... -->  per-env table, aggregate table, curves PNG (NAME.png)
#   <!-- results-headline NAME: EXP_NAME ... -->  aggregate table and performance profile (NAME.png)
#   <!-- results-time NAME: SCRIPT ... -->  time-to-score table and curves (NAME.png) of those scripts' runs
#   <!-- /results -->
# "EXP_NAME ... @ ENV_ID ..." (or "SCRIPT ... @ ENV_ID ...") keeps those envs only (a slice that runs a script on
# some of its envs; one game's time-to-score runs beside another's of the same script).
MARKER = re.compile(
    r"<!-- (?P<kind>results|results-headline|results-time) (?P<name>[\w-]+): (?P<exp_names>[^>]*?) -->\n.*?<!-- /results -->",
    re.S,
)


DEFAULT_OUTPUT_DIR = "docs/results"


def default_pages() -> list[str]:
    return ["README.md", *sorted(glob.glob("docs/*.md"))]


@dataclass
class ResultsArgs:
    results_dir: str = "benchmark/results"
    """the campaign's tracked results (records/*/*.json, published.csv)"""
    output_dir: str = DEFAULT_OUTPUT_DIR
    """where tables.md and the PNGs of the page sections filled go (a figure is drawn for a section it fills); anywhere
    but docs/results, the pages are left alone unless named with --docs (their image links would point there)"""
    docs: Annotated[list[str] | None, tyro.conf.arg(metavar="PAGE [PAGE ...]")] = None
    """the pages whose results markers are filled in (a named page without a marker gets a warning); unset: README.md
    and docs/*.md when --output-dir is docs/results, none otherwise"""


def section(
    kind: str,
    name: str,
    exp_names: list[str],
    groups: dict,
    published: dict,
    png_dir: str,
    page_dir: str,
    timed: list[dict] = (),
) -> tuple[str, bool]:
    """The text between one marker pair, and its PNG written under `png_dir` (whether one was: not without runs)."""
    png = os.path.join(png_dir, f"{name}.png")
    link = os.path.relpath(png, page_dir)
    if kind == "results-time":
        runs = [r for r in timed if r["script"] in exp_names]
        if not runs:
            return "No time-to-score runs yet (`python benchmark/time_to_score.py` writes them).\n", False
        plot_time_to_score(runs, png)
        return f"{time_to_score_table(runs)}\n\n![mean of the last games over wall-clock and steps]({link})\n", True
    if not any(key[0] in exp_names for key in groups):
        return "No finished runs yet (`python benchmark/campaign.py` writes them).\n", False
    aggregate = aggregate_table(groups, exp_names, published)
    if kind == "results-headline":
        plot_performance_profile(groups, exp_names, published, png)
        return f"{aggregate}\n\n![performance profile]({link})\n", True
    plot_group(groups, exp_names, png)
    text = cell_table(groups, exp_names, published) + "\n"
    if aggregate.count("\n") > 1:
        text += "\n" + aggregate + "\n"
    return text + f"\n![learning curves over steps and wall-clock]({link})\n", True


def check_docs_page(page: str) -> str | None:
    """Why `page` cannot be read and rewritten in place (missing, a folder, no permission), or None."""
    if not os.path.exists(page):
        return "does not exist"
    if not os.path.isfile(page):
        return "is not a file"
    if not os.access(page, os.R_OK | os.W_OK):
        return "is not readable and writable"
    try:  # trial 18, V4: a PNG among `--docs docs/*` was a UnicodeDecodeError traceback after six pages were filled
        with open(page, encoding="utf-8") as file:
            file.read()
    except UnicodeDecodeError:
        return "is not a UTF-8 text file (a Markdown page is)"
    return None


PAGES_LINE = "the docs pages rewritten, each whole (the last one possibly still as it was): "


def main() -> None:
    args = tyro.cli(ResultsArgs, prog="python -m cleanrl_utils.results")
    if not os.path.isdir(args.results_dir):  # trial 18: "holds no run records" for a folder that is not there
        problem = "does not exist" if not os.path.exists(args.results_dir) else "is not a folder"
        sys.exit(f"error: --results-dir {args.results_dir!r} {problem} (it holds records/<exp_name>/<env_id>__<seed>.json)")
    records = load_records(args.results_dir)
    timed = load_time_to_score(args.results_dir)
    if not records:
        sys.exit(f"error: --results-dir {args.results_dir!r} holds no run records (records/<exp_name>/<env_id>__<seed>.json)")
    for (exp_name, env_id), runs in group_records(records).items():  # one row is one budget (trial 14: the first
        budgets = sorted({r["total_timesteps"] for r in runs})  # seed's budget labelled the whole row)
        if len(budgets) > 1:
            seeds = "; ".join(
                f"{b:,}: seeds {', '.join(str(r['seed']) for r in runs if r['total_timesteps'] == b)}" for b in budgets
            )
            sys.exit(
                f"error: the records of {exp_name} on {env_id} hold different budgets ({seeds}); a table row is one "
                f"budget: give the other budget its own exp_name (e.g. {exp_name}_{budgets[-1] // 1_000_000}m)"
            )
    pages_left_alone = False
    if args.docs is not None:
        pages = list(dict.fromkeys(args.docs))  # a page named twice is filled, and counted, once (trial 18)
    elif os.path.realpath(args.output_dir) == os.path.realpath(DEFAULT_OUTPUT_DIR):
        pages = default_pages()
    else:  # the committed pages would get image links to wherever --output-dir is
        pages, pages_left_alone = [], True
    for page in pages:  # every page and folder checked before anything is written: one line, nothing half-done
        problem = check_docs_page(page)
        if problem:
            sys.exit(f"error: --docs page {page!r} {problem}")
    check_writable_dir(args.results_dir, "--results-dir")  # summary.csv goes there
    check_writable_dir(args.output_dir, "--output-dir", keep=False)  # made only when written: a refusal leaves none
    published = load_published(os.path.join(args.results_dir, "published.csv"))
    groups = group_records(records)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  loaded before anything is written: under a memory limit it is what fails

    map_blas_buffer_now()  # under a limit: OpenBLAS's buffer now, or one line with nothing written (its C exit(1))
    write_summary_csv(args.results_dir)
    make_output_dir(args.output_dir, holds="the tables and figures written so far")
    pages_filled: list[str] = []  # named in a stopping line: each was rewritten whole (trial 18, V1)
    machines = sorted({r["cpu"] for r in records})
    everything = sorted({r["exp_name"] for r in records})
    with written_whole(os.path.join(args.output_dir, "tables.md")) as file:
        file.write("# Results, every finished run\n\n")
        file.write(
            f"Generated by `python -m cleanrl_utils.results` from {len(records)} runs. Machines: {'; '.join(machines)}.\n\n"
        )
        file.write(cell_table(groups, everything, published) + "\n\n" + aggregate_table(groups, everything, published) + "\n")
        if timed:
            file.write("\n## Time to score (benchmark/time_to_score.py)\n\n" + time_to_score_table(timed) + "\n")
    pngs = sections = pages_changed = 0
    for page in pages:
        with open(page, encoding="utf-8") as file:
            text = file.read()
        if args.docs is not None and not MARKER.search(text):
            # a warning, not an error: a page is good input without markers (most of docs/*.md), so naming a batch
            # of pages must not fail; the line says why this one was left alone
            print(f"warning: --docs page {page!r} has no <!-- results ... --> marker pair; left alone", file=sys.stderr)
            continue

        def fill(match: re.Match) -> str:
            names, _, envs = match["exp_names"].partition(" @ ")  # "@ ENV_ID ...": those envs only
            chosen = {key: runs for key, runs in groups.items() if not envs or key[1] in envs.split()}
            chosen_timed = [record for record in timed if not envs or record["env_id"] in envs.split()]
            page_dir = os.path.dirname(page) or "."
            nonlocal pngs, sections
            body, drew = section(
                match["kind"], match["name"], names.split(), chosen, published, args.output_dir, page_dir, timed=chosen_timed
            )
            pngs, sections = pngs + drew, sections + 1
            return f"<!-- {match['kind']} {match['name']}: {match['exp_names']} -->\n{body}<!-- /results -->"

        filled = MARKER.sub(fill, text)
        if filled != text:  # whole or not at all: a Ctrl-C mid-write must not leave README.md cut short
            # named before the write: a stop inside it leaves the page whole, old or new (written atomically)
            if pages_filled:
                LEFT_BEHIND.remove(PAGES_LINE + ", ".join(pages_filled))
            pages_filled.append(page)
            LEFT_BEHIND.append(PAGES_LINE + ", ".join(pages_filled))
            write_atomically(page, lambda file, text=filled: file.write(text.encode()))
            pages_changed += 1
            print(f"filled {page}")
    line = (
        f"{len(records)} runs -> {args.output_dir}/tables.md, {pngs} PNG{'s' * (pngs != 1)}, "
        f"{args.results_dir}/summary.csv, {sections} page section{'s' * (sections != 1)} filled "
        f"({pages_changed} page{'s' * (pages_changed != 1)} changed)"
    )
    if pages_left_alone:
        line += f"; pages left alone: --output-dir is not {DEFAULT_OUTPUT_DIR}; name pages with --docs to fill them"
    print(line)


if __name__ == "__main__":
    main()

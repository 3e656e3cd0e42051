"""Learning curves and a summary table from a sweep's tensorboard runs.

    python -m cleanrl_utils.plot --log-dir runs --output-dir plots

Runs are folders named `<env_id>__<exp_name>__<seed>__<time>` (what every script writes). They are
grouped by script (exp_name) x env. For each env one PNG shows each script's mean episodic return
over seeds with a 95% confidence band (Student t over seeds), against env steps and against wall
time, up to where the shortest seed ends. `summary.md` lists per script x env: seeds, steps, final return (mean of each run's last 10%
of episodes, then mean +- std over seeds), best return (max of the mean curve) and SPS.
"""

import os
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass

import numpy as np


@dataclass
class PlotArgs:
    log_dir: str = "runs"
    """the folder holding the run folders"""
    output_dir: str = "plots"
    """where the PNGs and summary.md go"""
    tag: str = "charts/episodic_return"
    """the scalar to plot"""
    smoothing_window: int = 20
    """episodes in the moving average of each run's curve"""
    grid_points: int = 200
    """points of the common x grid the seeds are averaged on"""


@dataclass
class RunData:
    env_id: str
    exp_name: str
    seed: int
    steps: np.ndarray  # env steps of each episode
    wall: np.ndarray  # seconds since the run's first event
    values: np.ndarray
    sps: float


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    parts = name.split("__")
    if len(parts) < 4 or not parts[-2].lstrip("-").isdigit():
        return None
    return parts[0], "__".join(parts[1:-2]), int(parts[-2])


def load_runs(log_dir: str, tag: str) -> list[RunData]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runs = []
    for name in sorted(os.listdir(log_dir)):
        parsed = parse_run_name(name)
        path = os.path.join(log_dir, name)
        if parsed is None or not os.path.isdir(path):
            continue
        accumulator = EventAccumulator(path, size_guidance={"scalars": 0})
        accumulator.Reload()
        tags = accumulator.Tags()["scalars"]
        if tag not in tags:
            continue
        events = accumulator.Scalars(tag)
        first_wall = min(accumulator.Scalars(t)[0].wall_time for t in tags)
        sps = accumulator.Scalars("charts/SPS")[-1].value if "charts/SPS" in tags else float("nan")
        runs.append(
            RunData(
                *parsed,
                steps=np.array([e.step for e in events], dtype=np.float64),
                wall=np.array([e.wall_time - first_wall for e in events]),
                values=np.array([e.value for e in events]),
                sps=sps,
            )
        )
    return runs


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` episodes at each episode (fewer at the start)."""
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (cumulative[idx] - cumulative[lo]) / (idx - lo)


def mean_and_band(xs: list[np.ndarray], ys: list[np.ndarray], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs on `grid` and the half-width of a 95% Student-t interval. A run counts at a
    grid point only inside its own x range."""
    from scipy import stats

    curves = np.full((len(xs), len(grid)), np.nan)
    for i, (x, y) in enumerate(zip(xs, ys)):
        inside = (grid >= x[0]) & (grid <= x[-1])
        curves[i, inside] = np.interp(grid[inside], x, y)
    count = np.sum(~np.isnan(curves), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns outside every run's range
        mean = np.nanmean(curves, axis=0)
        std = np.nanstd(curves, axis=0, ddof=1)
    half_width = np.where(count > 1, stats.t.ppf(0.975, np.maximum(count - 1, 1)) * std / np.sqrt(count), 0.0)
    return mean, half_width, count


def summarise(runs: list[RunData], window: int) -> list[dict]:
    groups = defaultdict(list)
    for run in runs:
        groups[(run.exp_name, run.env_id)].append(run)
    rows = []
    for (exp_name, env_id), group in sorted(groups.items()):
        finals = [run.values[-max(1, len(run.values) // 10) :].mean() for run in group]
        grid = np.linspace(0, min(run.steps[-1] for run in group), 200)
        mean, _, _ = mean_and_band([r.steps for r in group], [moving_average(r.values, window) for r in group], grid)
        rows.append(
            {
                "script": exp_name,
                "env": env_id,
                "seeds": len(group),
                "steps": int(max(run.steps[-1] for run in group)),
                "final_mean": float(np.mean(finals)),
                "final_std": float(np.std(finals)),
                "best": float(np.nanmax(mean)),
                "sps": float(np.nanmean([run.sps for run in group])),
            }
        )
    return rows


def summary_markdown(rows: list[dict]) -> str:
    lines = ["| script | env | seeds | steps | final return | best return | SPS |", "|-|-|-|-|-|-|-|"]
    for r in rows:
        lines.append(
            f"| {r['script']} | {r['env']} | {r['seeds']} | {r['steps']:,} | {r['final_mean']:.2f} +- {r['final_std']:.2f} "
            f"| {r['best']:.2f} | {r['sps']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot_env(env_id: str, runs: list[RunData], path: str, window: int, grid_points: int, tag: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_steps, ax_wall) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    by_script = defaultdict(list)
    for run in runs:
        by_script[run.exp_name].append(run)
    for color, (exp_name, group) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4, sorted(by_script.items())):
        smoothed = [moving_average(r.values, window) for r in group]
        for ax, xs, scale in ((ax_steps, [r.steps for r in group], 1.0), (ax_wall, [r.wall for r in group], 60.0)):
            # only where every seed has data: past the shortest run the "mean" would be fewer seeds
            grid = np.linspace(0, min(x[-1] for x in xs), grid_points)
            mean, half_width, _ = mean_and_band(xs, smoothed, grid)
            label = f"{exp_name} ({len(group)} seed{'s' if len(group) > 1 else ''})"
            ax.plot(grid / scale, mean, color=color, label=label, linewidth=1.6)
            ax.fill_between(grid / scale, mean - half_width, mean + half_width, color=color, alpha=0.2, linewidth=0)
    ax_steps.set_xlabel("env steps")
    ax_wall.set_xlabel("wall time (minutes)")
    for ax in (ax_steps, ax_wall):
        ax.set_ylabel(tag.split("/")[-1].replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    ax_steps.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    fig.suptitle(f"{env_id}: mean over seeds, 95% CI band, {window}-episode moving average")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    import tyro

    args = tyro.cli(PlotArgs)
    if not os.path.isdir(args.log_dir):
        sys.exit(f"error: --log-dir {args.log_dir!r} is not a folder")
    if args.smoothing_window <= 0 or args.grid_points < 2:
        sys.exit(
            f"error: need --smoothing-window > 0 and --grid-points >= 2, got {args.smoothing_window} and {args.grid_points}"
        )
    runs = load_runs(args.log_dir, args.tag)
    if not runs:
        sys.exit(
            f"error: no run under {args.log_dir!r} logged {args.tag!r} (runs are folders <env>__<script>__<seed>__<time>)"
        )
    os.makedirs(args.output_dir, exist_ok=True)
    envs = sorted({run.env_id for run in runs})
    for env_id in envs:
        path = os.path.join(args.output_dir, f"{env_id}.png")
        plot_env(env_id, [r for r in runs if r.env_id == env_id], path, args.smoothing_window, args.grid_points, args.tag)
        print(f"wrote {path}")
    table = summary_markdown(summarise(runs, args.smoothing_window))
    with open(os.path.join(args.output_dir, "summary.md"), "w") as f:
        f.write(table)
    print(table, end="")


if __name__ == "__main__":
    main()

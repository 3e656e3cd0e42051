"""Learning curves and a summary table from a sweep's tensorboard runs.

    python -m cleanrl_utils.plot --log-dir runs/sweeps/ppo_atari_envpool-20250101-120000 --output-dir plots

A run is a folder under --log-dir holding tensorboard events. Who it is (script, env id, seed) and
how long it was meant to run come from the hyperparameters table every script writes into its
events (the folder name `<env_id>__<exp_name>__<seed>__<time>` is the fallback for runs without
one), so a namespaced env id such as `phys2d/CartPole-v1` (folder `phys2d-CartPole-v1__...`) is
grouped under its real id.

Seeds are the seeds in the runs' own hyperparameters, not folders: of two finished runs with the
same script, env and seed (a sweep run twice) the one written last is kept and the other is named as dropped.
A run that did not finish (the step it recorded at its end, `charts/end_global_step`, short of
num_iterations x num_envs [x num_steps]: stopped, diverged, or still running; a run written before that record
existed is judged by its last scalar's step) is left out and named, unless --include-unfinished. What was dropped
or left out is printed and written under the table in summary.md.

Runs are grouped by script (exp_name) x env; an exp_name that two script files ran under (each run records its
file) is split into `<exp_name> (<script file>)`, with a note. For each env one PNG shows each script's mean episodic
return over seeds with a 95% confidence band (Student t over seeds), against env steps and against
wall time, up to where the shortest seed ends. `summary.md` lists per script x env: seeds, steps
(the most any seed ran), final return (mean of each run's last 10% of episodes, then mean +- std
over seeds), best return (max of the mean curve) and SPS.
"""

from cleanrl_utils.stop import exit_tool_on_signals, make_output_dir, map_blas_buffer_now, written_whole

if __name__ == "__main__":
    # Ctrl-C or SIGTERM, also while the libraries below load: one line, no traceback
    exit_tool_on_signals("cleanrl_utils.plot")

import logging
import math
import os
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from cleanrl_utils.run import check_writable_dir


@dataclass
class PlotArgs:
    log_dir: str = "runs"
    """the folder holding the run folders, or one run's own folder"""
    output_dir: str = "plots"
    """where the PNGs and summary.md go"""
    tag: str = "charts/episodic_return"
    """the scalar to plot"""
    smoothing_window: int = 20
    """episodes in the moving average of each run's curve"""
    grid_points: int = 200
    """points of the common x grid the seeds are averaged on (2 to 100,000)"""
    include_unfinished: bool = False
    """also plot runs that did not reach their last iteration (flagged in the summary); by default they are left out"""


@dataclass
class RunData:
    env_id: str
    exp_name: str
    seed: int
    steps: np.ndarray  # env steps of each episode
    wall: np.ndarray  # seconds since the run's first event
    values: np.ndarray
    sps: float
    name: str = ""  # the run folder's name
    start_time: float = 0.0  # wall time of the run's first event
    end_time: float = 0.0  # wall time of the run's last event (a resumed run's is after its resume)
    last_step: int = 0  # the last step any scalar was logged at
    expected_steps: int | None = None  # where the run ends if it finishes (None: not known)
    script: str = ""  # the script file that wrote it ("": a run from before scripts recorded it)

    @property
    def finished(self) -> bool:
        """Reached its last iteration (a run without hyperparameters cannot be checked: counted as finished)."""
        return self.expected_steps is None or self.last_step >= self.expected_steps


def parse_run_name(name: str) -> tuple[str, str, int] | None:
    """(env id as in the folder name, exp_name, seed) of `<env_id>__<exp_name>__<seed>__<time>[-N]`."""
    parts = name.split("__")
    if len(parts) < 4 or not parts[-2].lstrip("-").isdigit():
        return None
    return parts[0], "__".join(parts[1:-2]), int(parts[-2])


def read_hyperparameters(accumulator) -> dict[str, str]:
    """The `|param|value|` table the scripts write as the "hyperparameters" text (the last one
    written: a resumed run writes it again, with a --total-timesteps it may have extended)."""
    from tensorboard.util import tensor_util

    tags = [tag for tag in accumulator.Tags().get("tensors", []) if tag.startswith("hyperparameters")]
    if not tags:
        return {}
    text = tensor_util.make_ndarray(accumulator.Tensors(tags[0])[-1].tensor_proto).flat[0]
    text = text.decode() if isinstance(text, bytes) else str(text)
    table = {}
    for line in text.splitlines()[2:]:  # past the header and the |-|-| row
        cells = line.strip().strip("|").split("|", 1)
        if len(cells) == 2:
            table[cells[0]] = cells[1]
    return table


def _int(value: str | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def load_runs(log_dir: str, tag: str, notes: list[str] | None = None, other_tags: set[str] | None = None) -> list[RunData]:
    """Every run folder directly under `log_dir` that logged `tag` (`log_dir` itself, where it is one run's folder).
    Folders that cannot be told apart (no hyperparameters and no run-name folder name) are skipped with a note. The
    scalar tags of the runs left out for not logging `tag` go into `other_tags` (a mistyped --tag names them)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # A resumed run rewrote its steps past the checkpoint (purge_step): tensorboard drops the old ones, as meant, and
    # would warn about "a TensorFlow restart" for each such run.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    notes = [] if notes is None else notes
    runs = []
    if any(f.startswith("events.out.tfevents") for f in os.listdir(log_dir)):  # one run's own folder: that run alone
        log_dir, names = os.path.split(os.path.abspath(log_dir))
        names = [names]
    else:
        names = sorted(os.listdir(log_dir))
    for name in names:
        path = os.path.join(log_dir, name)
        if not os.path.isdir(path) or not any(f.startswith("events.out.tfevents") for f in os.listdir(path)):
            continue
        accumulator = EventAccumulator(path, size_guidance={"scalars": 0, "tensors": 0})
        accumulator.Reload()
        tags = accumulator.Tags()["scalars"]
        if tag not in tags:
            if tags:  # a run that logged, but not this tag (no episode finished yet): named, not silently skipped
                why = "no episode finished" if tag.endswith("episodic_return") else "its script does not log it, or not yet"
                notes.append(f"left out {name}: it logged no {tag!r} ({why})")
                if other_tags is not None:
                    other_tags.update(tags)
            continue
        hyperparameters = read_hyperparameters(accumulator)
        parsed = parse_run_name(name)
        seed = _int(hyperparameters.get("seed"))
        if seed is not None and "env_id" in hyperparameters and "exp_name" in hyperparameters:
            identity = (hyperparameters["env_id"], hyperparameters["exp_name"], seed)
        elif parsed is not None:
            identity = parsed
        else:
            notes.append(f"skipped {name}: no hyperparameters table and not named <env>__<script>__<seed>__<time>")
            continue
        # An iteration is a rollout of num_envs x num_steps (on-policy scripts) or one step of every env (off-policy
        # scripts, which have no num_steps; their batch_size is the replay minibatch).
        num_iterations, num_envs = _int(hyperparameters.get("num_iterations")), _int(hyperparameters.get("num_envs"))
        num_steps = _int(hyperparameters.get("num_steps")) if "num_steps" in hyperparameters else 1
        if num_iterations and num_envs and num_steps:
            expected_steps = num_iterations * num_envs * num_steps
        else:
            expected_steps = _int(hyperparameters.get("total_timesteps"))
        events = accumulator.Scalars(tag)
        finite = [e for e in events if math.isfinite(e.value)]
        if len(finite) < len(events):  # a diverged run, or an edited events file (trial 24, B2): said, not averaged in
            bad = [e.step for e in events if not math.isfinite(e.value)]
            at = f"step {bad[0]:,}" + (f" and {len(bad) - 1:,} more" if len(bad) > 1 else "")
            if not finite:
                notes.append(f"left out {name}: every {tag!r} value it logged is NaN or inf ({at})")
                continue
            notes.append(f"{name}: left out its {len(bad):,} NaN or inf {tag!r} value{'s' * (len(bad) > 1)} ({at})")
            events = finite
        first_wall = min(accumulator.Scalars(t)[0].wall_time for t in tags)
        sps = accumulator.Scalars("charts/SPS")[-1].value if "charts/SPS" in tags else float("nan")
        runs.append(
            RunData(
                *identity,
                steps=np.array([e.step for e in events], dtype=np.float64),
                wall=np.array([e.wall_time - first_wall for e in events]),
                values=np.array([e.value for e in events]),
                sps=sps,
                name=name,
                start_time=first_wall,
                end_time=max(accumulator.Scalars(t)[-1].wall_time for t in tags),
                # the step the run recorded at its end (END_STEP_TAG, run.record_end_step) is one of these scalars;
                # older runs, without it, are judged by their last scalar; of the plotted tag, its last finite one
                # (trial 25, K13: the steps column counted the step of a dropped inf value past the run's end)
                last_step=max([accumulator.Scalars(t)[-1].step for t in tags if t != tag] + [events[-1].step]),
                expected_steps=expected_steps,
                script=hyperparameters.get("script", ""),
            )
        )
    return runs


def apart_by_script(runs: list[RunData], notes: list[str]) -> None:
    """An exp_name that more than one script ran under is plotted as one curve per script, `<exp_name> (<script>)`,
    with a note (trial 20: a dqn.py run and a ppo.py run under one --exp-name were averaged as seeds of one curve)."""
    scripts = defaultdict(set)
    for run in runs:
        if run.script:
            scripts[run.exp_name].add(run.script)
    for exp_name, names in sorted(scripts.items()):
        if len(names) > 1:
            notes.append(f"--exp-name {exp_name} was run by {len(names)} scripts ({', '.join(sorted(names))}): plotted apart")
            for run in runs:
                if run.exp_name == exp_name and run.script:
                    run.exp_name = f"{exp_name} ({run.script})"


def select_runs(runs: list[RunData], include_unfinished: bool = False) -> tuple[list[RunData], list[str]]:
    """The runs to plot, one per script x env x seed, and a line for each run left out.

    Unfinished runs (interrupted, diverged, still running) are left out unless `include_unfinished`.
    Of several runs with the same seed the finished one written last is kept (of all when none finished): by its
    last event, so a run resumed and extended after a later one was started counts as the newer (trial 19)."""
    notes = []
    candidates = []
    for run in runs:
        if run.finished or include_unfinished:
            candidates.append(run)
        else:
            notes.append(
                f"left out {run.name} ({run.exp_name}, {run.env_id}, seed {run.seed}): did not finish "
                f"(last step {run.last_step:,} of {run.expected_steps:,})"
            )
    by_seed = defaultdict(list)
    for run in candidates:
        by_seed[(run.exp_name, run.env_id, run.seed)].append(run)
    kept = []
    for (exp_name, env_id, seed), group in sorted(by_seed.items()):
        group.sort(key=lambda run: (run.finished, run.end_time, run.name))
        kept.append(group[-1])
        if len(group) > 1:
            dropped = ", ".join(run.name for run in group[:-1])
            notes.append(
                f"{exp_name}, {env_id}, seed {seed}: {len(group)} runs; kept the "
                f"{'finished one' if group[-1].finished else 'one (none finished)'} written last, "
                f"{group[-1].name}; dropped {dropped}"
            )
    for run in kept:
        if not run.finished:
            notes.append(
                f"included unfinished {run.name} ({run.exp_name}, {run.env_id}, seed {run.seed}): "
                f"last step {run.last_step:,} of {run.expected_steps:,}"
            )
    return kept, notes


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` episodes at each episode (fewer at the start)."""
    cumulative = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (cumulative[idx] - cumulative[lo]) / (idx - lo)


MAX_GRID_POINTS = 100_000
MAX_SMOOTHING_WINDOW = 10**9  # episodes: more than any run holds


# Student-t 0.975 quantiles for 1..30 degrees of freedom (scipy.stats.t.ppf, 6 decimals); past 30 the Cornish-Fisher
# expansion below is within 2e-8 of it. Not scipy itself: its OpenBLAS maps a buffer as it loads, and under a tight
# `ulimit -v` (280000) it retried that forever in C, deaf to Ctrl-C and SIGTERM.
T_975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.13145, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963, 2.079614,
         2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.04523, 2.042272)  # fmt: skip


def student_t_975(dof: np.ndarray) -> np.ndarray:
    """The 0.975 quantile of Student's t with `dof` (>= 1) degrees of freedom: a 95% two-sided interval's factor."""
    dof = np.asarray(dof)
    z = 1.959963984540054  # the normal's 0.975 quantile
    n = dof.astype(np.float64)
    expansion = (
        z
        + (z**3 + z) / 4 / n
        + (5 * z**5 + 16 * z**3 + 3 * z) / 96 / n**2
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384 / n**3
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160 / n**4
    )
    table = np.asarray(T_975)[np.clip(dof, 1, 30) - 1]
    return np.where(dof <= 30, table, expansion)


def mean_and_band(xs: list[np.ndarray], ys: list[np.ndarray], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs on `grid` and the half-width of a 95% Student-t interval. A run counts at a
    grid point only inside its own x range."""
    curves = np.full((len(xs), len(grid)), np.nan)
    for i, (x, y) in enumerate(zip(xs, ys)):
        inside = (grid >= x[0]) & (grid <= x[-1])
        curves[i, inside] = np.interp(grid[inside], x, y)
    count = np.sum(~np.isnan(curves), axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns outside every run's range
        mean = np.nanmean(curves, axis=0)
        std = np.nanstd(curves, axis=0, ddof=1)
    half_width = np.where(count > 1, student_t_975(np.maximum(count - 1, 1)) * std / np.sqrt(count), 0.0)
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
        sps = [run.sps for run in group if np.isfinite(run.sps)]  # a short off-policy run may log no SPS yet
        rows.append(
            {
                "script": exp_name,
                "env": env_id,
                "seeds": len(group),
                "unfinished": sum(not run.finished for run in group),
                "steps": int(max(run.last_step for run in group)),  # the steps run, not the last episode's end
                "final_mean": float(np.mean(finals)),
                "final_std": float(np.std(finals)),
                # the best stretch of training: the highest point of the seed-mean moving average, or the final
                # stretch if that is higher (the moving average lags, and a short run has few points)
                "best": max(float(np.nanmax(mean)), float(np.mean(finals))),
                "sps": float(np.mean(sps)) if sps else None,
            }
        )
    return rows


def summary_markdown(rows: list[dict], notes: list[str] = (), tag: str = "charts/episodic_return") -> str:
    """The table, then one line per run left out, dropped or included unfinished. Its columns are named for `tag`:
    a return's best is its highest point; another scalar's (a loss) is named highest, not best (trial 21)."""
    name = tag.split("/")[-1].replace("_", " ")
    final, best = ("final return", "best return") if tag == "charts/episodic_return" else (f"final {name}", f"highest {name}")
    lines = [f"| script | env | seeds | steps | {final} | {best} | SPS |", "|-|-|-|-|-|-|-|"]
    for r in rows:
        seeds = f"{r['seeds']} ({r['unfinished']} unfinished)" if r.get("unfinished") else f"{r['seeds']}"
        sps = "n/a" if r["sps"] is None else f"{r['sps']:,.0f}"
        lines.append(
            f"| {r['script']} | {r['env']} | {seeds} | {r['steps']:,} | {r['final_mean']:.2f} +- {r['final_std']:.2f} "
            f"| {r['best']:.2f} | {sps} |"
        )
    if notes:
        lines += ["", "Seeds are the runs' own `seed` hyperparameter, one run each:", ""] + [f"- {note}" for note in notes]
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
    with written_whole(path, "wb") as file:  # whole or not at all: a full disk leaves no cut PNG (trial 21)
        fig.savefig(file, format="png", dpi=110)
    plt.close(fig)


def main() -> None:
    import tyro

    args = tyro.cli(PlotArgs, prog="python -m cleanrl_utils.plot")
    if not os.path.isdir(args.log_dir):
        sys.exit(f"error: --log-dir {args.log_dir!r} is not a folder")
    if not 1 <= args.smoothing_window <= MAX_SMOOTHING_WINDOW:  # trial 18, V2: 2^63 overflowed numpy's int64
        sys.exit(f"error: --smoothing-window must be in [1, {MAX_SMOOTHING_WINDOW:,}] episodes, got {args.smoothing_window}")
    # the seeds' curves are held on the grid at once (trial 17, U3: 10^9 points grew to 26 GB and the kernel killed
    # the tool with no line); a PNG shows a few hundred
    if not 2 <= args.grid_points <= MAX_GRID_POINTS:
        sys.exit(f"error: --grid-points must be in [2, {MAX_GRID_POINTS:,}], got {args.grid_points}")
    # first: a bad folder is one line, not a report then a line; it is made only once there is something to plot
    check_writable_dir(args.output_dir, "--output-dir", keep=False)
    notes: list[str] = []
    other_tags: set[str] = set()
    runs = load_runs(args.log_dir, args.tag, notes, other_tags)
    if not runs:  # what was left out, and why, is the line (trial 25, B3: a run of NaN returns alone was not named)
        why = "; ".join(notes[:3]) if notes else "runs are folders <env>__<script>__<seed>__<time>"
        if len(notes) > 3:  # trial 28: a mistyped --tag over 29 runs was a 5,000-character line
            why += f"; and {len(notes) - 3} more like these"
        if other_tags:
            why += f"; the tags they logged: {', '.join(sorted(other_tags))}"
        sys.exit(f"error: no run under {args.log_dir!r} logged {args.tag!r} to plot ({why})")
    apart_by_script(runs, notes)
    runs, selection_notes = select_runs(runs, args.include_unfinished)
    notes += selection_notes
    for note in notes:
        print(note)
    if not runs:
        sys.exit(f"error: no run under {args.log_dir!r} finished (--include-unfinished plots unfinished ones too)")
    import matplotlib.pyplot  # noqa: F401  loaded before anything is written: under a memory limit it is what fails

    map_blas_buffer_now()  # before the folder is made: a refusal is then one line with nothing written

    make_output_dir(args.output_dir, holds="the plots drawn so far, if any (each one whole)")
    envs = sorted({run.env_id for run in runs})
    for env_id in envs:
        path = os.path.join(args.output_dir, f"{env_id.replace('/', '-')}.png")  # phys2d/CartPole-v1: one file
        plot_env(env_id, [r for r in runs if r.env_id == env_id], path, args.smoothing_window, args.grid_points, args.tag)
        print(f"wrote {path}")
    table = summary_markdown(summarise(runs, args.smoothing_window), notes, args.tag)
    with written_whole(os.path.join(args.output_dir, "summary.md")) as f:
        f.write(table)
    print(table, end="")


if __name__ == "__main__":
    main()

"""Time to score: one Atari training run until the mean of its last games reaches a target, or a wall-clock cap.

    python benchmark/time_to_score.py --script pqn_atari_envpool --env-id Pong-v5 --minutes 60 \
        --script-args="--total-timesteps 2000000"
    python benchmark/time_to_score.py --script ppo_atari_envpool --env-id Pong-v5 --minutes 90 \
        --script-args="$(grep -o -- '--num-envs.*' benchmark/ppo_atari_envpool.sh | head -1)"

The run trains in `runs/time_to_score/<script>__<env>__<seed>/`. Every 15 s (`--poll-seconds`) this reads the run's own
`charts/episodic_return` events (whole games, unclipped); when the mean of the last `--window` games reaches
`--target`, or the cap passes, the run gets a Ctrl-C (it saves a checkpoint and exits). Times count from the launch,
start-up included, as a user's stopwatch would. The record goes to
`benchmark/results/time_to_score/<script>__<env>__<seed>.json`: the command, the CPU, whether and when (minutes,
steps) the target was reached, the best window mean, and every game as (step, seconds since launch, return).
`python -m cleanrl_utils.results` puts these records in a table. Nothing else may run on the machine meanwhile: the
figure is the machine's, not the script's alone.

    python benchmark/time_to_score.py --script ppo_atari_lstm_envpool --env-id Pong-v5 --seed 2 --minutes 50 --resume

continues a run stopped at its cap from the checkpoint the Ctrl-C saved, for --minutes more, on the machine that ran
it (a partial curve extended in a later session). The record's minutes are the legs' sums, start-up and saving
included; its games are the earlier legs' and then this one's, each at the minutes and steps from the first launch.
EnvPool cannot snapshot its games: the games under way at the stop are not finished, and the resumed run plays new ones.
"""

import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np
import tyro

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run as `python benchmark/time_to_score.py` from anywhere
from cleanrl_utils.checks import check_envpool_id  # noqa: E402
from cleanrl_utils.plot import load_runs  # noqa: E402
from cleanrl_utils.results import TIME_TO_SCORE_KEYS, cpu_description, read_record  # noqa: E402
from cleanrl_utils.run import check_writable_dir  # noqa: E402
from cleanrl_utils.stop import CHILDREN, LEFT_BEHIND, exit_tool_on_signals  # noqa: E402


@dataclass
class TimeToScoreArgs:
    script: str
    """the script under cleanrl/, without .py (e.g. pqn_atari_envpool)"""
    env_id: str = "Pong-v5"
    """the game"""
    seed: int = 1
    """the run's seed"""
    target: float = 18.0
    """the score: the mean of the last --window games that stops the run"""
    window: int = 20
    """how many of the latest games the mean covers"""
    minutes: float = 60.0
    """the wall-clock cap, from the launch (with --resume: of this leg)"""
    script_args: str = ""
    """further arguments for the script, as one string (write --script-args="--total-timesteps 2000000": with the =)"""
    results_dir: str = os.path.join(REPO, "benchmark", "results")
    """where the record goes (under time_to_score/)"""
    runs_dir: str = os.path.join(REPO, "runs", "time_to_score")
    """where the run trains (a previous run of the same script, env and seed there is replaced, unless --resume)"""
    poll_seconds: float = 15.0
    """how often the run's events are read (the reported time is the game's own, not the poll's)"""
    cuda: bool = False
    """train on the GPU (else the run gets --no-cuda, as the CPU figures do); the record names the GPU and its file
    and run folder end in __cuda, so a CPU record of the same script, env and seed stays"""
    resume: bool = False
    """continue the capped run of this script, env and seed from its checkpoint, on the same machine, with the same
    --target and --window; the record gains this leg (--script-args: flags the script takes on resume)"""


def games(count: int) -> str:
    return f"{count:,} game" + ("" if count == 1 else "s")


def window_means(returns: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last `window` games after each game; NaN until `window` games have ended."""
    means = np.full(len(returns), np.nan)
    if len(returns) >= window:
        sums = np.cumsum(np.concatenate([[0.0], returns]))
        means[window - 1 :] = (sums[window:] - sums[:-window]) / window
    return means


def games_so_far(log_dir: str, launched: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, seconds since launch, returns) of every game the run has logged so far, in logging order."""
    runs = [run for run in load_runs(log_dir, "charts/episodic_return") if run.values.size]
    if not runs:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    (run,) = runs
    return run.steps, run.start_time + run.wall - launched, run.values


def earlier_legs(record_path: str, log_dir: str, args: TimeToScoreArgs, machine: dict) -> tuple[dict, str]:
    """The record a --resume continues and the checkpoint it continues from; one line and exit 1 where there is
    nothing to continue, or where this leg's minutes would not add to the record's (another machine, another target)."""
    if not os.path.isfile(record_path):
        sys.exit(f"error: --resume: no record {record_path} to continue; run once without --resume first")
    record = read_record(record_path, TIME_TO_SCORE_KEYS)  # one line if it is not a record this tool wrote
    if record["reached"]:
        sys.exit(
            f"error: --resume: the run reached {record['target']:g} at {record['minutes_to_target']} min; nothing to continue"
        )
    for key, value in machine.items():  # a record made on no GPU has no "gpu" key (before --cuda existed)
        if record.get(key) != value:
            sys.exit(
                f"error: --resume: the record's {key} is {record.get(key)!r}, this machine's {value!r}: minutes on two "
                "machines do not add up; start another seed without --resume"
            )
    for name in ("target", "window"):  # the earlier legs were judged by the record's: not reached
        if record[name] != getattr(args, name):
            given, saved = getattr(args, name), record[name]
            sys.exit(f"error: --resume: --{name} {given:g} differs from the record's {saved:g}; give --{name} {saved:g}")
    checkpoints = sorted(glob.glob(os.path.join(log_dir, "*", "checkpoint.pt")))
    if len(checkpoints) != 1:
        found = f"{len(checkpoints)} checkpoints" if checkpoints else "no checkpoint"
        sys.exit(f"error: --resume: {found} under {log_dir}/*/checkpoint.pt; the run to continue is its one checkpoint")
    saved = (record.get("legs") or [{}])[-1].get("checkpoint_mtime")
    if saved is not None and os.path.getmtime(checkpoints[0]) != saved:  # a leg stopped with no record moved it on
        sys.exit(
            f"error: --resume: {checkpoints[0]} was written after the record (a leg ended without one): its games and "
            "minutes are in no record; start another seed without --resume"
        )
    return record, checkpoints[0]


def main() -> None:
    exit_tool_on_signals("benchmark/time_to_score.py")  # a stop ends its run and writes no record: one line
    args = tyro.cli(TimeToScoreArgs)
    # the run starts in the repo's root: a relative folder is the user's, from here (trial 29: the run went to
    # <repo>/tts/runs while the tool read ./tts/runs, and recorded 0 steps and 0 games with exit 0)
    args.runs_dir, args.results_dir = os.path.abspath(args.runs_dir), os.path.abspath(args.results_dir)
    # both before the run (trial 29: a --results-dir that was a file, or under /proc, was a traceback after the whole
    # run, and the measure was lost)
    check_writable_dir(args.results_dir, "--results-dir", keep=False)
    check_writable_dir(args.runs_dir, "--runs-dir", keep=False)
    script_path = os.path.join(REPO, "cleanrl", f"{args.script}.py")
    if not os.path.isfile(script_path):
        sys.exit(f"error: --script {args.script!r} is not a script under cleanrl/ (cleanrl/{args.script}.py is missing)")
    # games and a target of 18 are Atari's (trial 31: Hopper-v4 "reached 18" in 9 s, and its record went to the table)
    check_envpool_id(args.env_id, "envpool.atari")
    for name, value in (("--minutes", args.minutes), ("--poll-seconds", args.poll_seconds)):
        if not (np.isfinite(value) and value > 0):
            sys.exit(f"error: {name} must be finite and > 0, got {value}")
    if not np.isfinite(args.target):
        sys.exit(f"error: --target must be finite, got {args.target}")
    if args.window < 1:
        sys.exit(f"error: --window must be >= 1, got {args.window}")
    gpu = None
    if args.cuda:
        import torch

        if not torch.cuda.is_available():
            sys.exit("error: --cuda needs a CUDA GPU, and torch sees none here; leave --cuda out to train on the CPU")
        gpu = torch.cuda.get_device_name(0)
    name = f"{args.script}__{args.env_id}__{args.seed}" + ("__cuda" if args.cuda else "")
    log_dir = os.path.join(args.runs_dir, name)
    path = os.path.join(args.results_dir, "time_to_score", f"{name}.json")
    if args.resume:  # the same script, env and seed: the checkpoint's saved args hold the rest
        record, checkpoint = earlier_legs(path, log_dir, args, dict(cpu=cpu_description(), gpu=gpu))
        command = [sys.executable, script_path, "--resume", checkpoint]
        earlier, earlier_seconds = np.array(record["games"], dtype=float).reshape(-1, 3), 60 * record["minutes_run"]
        first_leg = dict(command=record["command"], minutes_run=record["minutes_run"], cap_minutes=record["cap_minutes"])
        legs = record.get("legs") or [first_leg]  # records from before --resume are one leg
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
        os.makedirs(log_dir)
        command = [sys.executable, script_path, "--env-id", args.env_id, "--seed", str(args.seed), "--log-dir", log_dir]
        earlier, earlier_seconds, legs = np.zeros((0, 3)), 0.0, []
    command += ([] if args.cuda else ["--no-cuda"]) + shlex.split(args.script_args)
    print(f"time to {args.target:g} over the last {args.window} games, capped at {args.minutes:g} min: {' '.join(command)}")
    launched = time.time()

    def all_games() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, seconds from the first launch, returns): the earlier legs' games from the record, then this leg's
        (a resumed run's folder also holds the earlier legs' events: those are before this launch)."""
        steps, seconds, returns = games_so_far(log_dir, launched)
        leg = seconds >= 0
        return (
            np.concatenate([earlier[:, 0], steps[leg]]),
            np.concatenate([earlier[:, 1], seconds[leg] + earlier_seconds]),
            np.concatenate([earlier[:, 2], returns[leg]]),
        )

    with open(os.path.join(log_dir, "train.log"), "a" if args.resume else "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    # a Ctrl-C or SIGTERM to this tool ends the run too, where it went on alone (trial 23, A3): the measure is void
    CHILDREN.append(process)
    LEFT_BEHIND.append(f"no record written; the run's unfinished folder: {log_dir}")
    reached_at, stop_reason = None, None
    while process.poll() is None:
        # a poll never sleeps past the cap (trial 31: a 0.4-minute cap ran 0.53 minutes at the 15 s poll)
        time.sleep(min(args.poll_seconds, max(0.1, launched + 60 * args.minutes - time.time())))
        steps, seconds, returns = all_games()
        means = window_means(returns, args.window)
        hit = np.flatnonzero(means >= args.target)
        if hit.size and reached_at is None:
            reached_at, stop_reason = int(hit[0]), "target"
        elif time.time() - launched > 60 * args.minutes:
            stop_reason = "cap"
        latest = f"{means[-1]:.2f}" if returns.size >= args.window else "-"
        print(
            f"  {(earlier_seconds + time.time() - launched) / 60:5.1f} min, step {int(steps[-1]) if steps.size else 0:,}: "
            f"{games(returns.size)}, mean of the last {args.window} {latest}",
            flush=True,
        )
        if stop_reason:
            process.send_signal(signal.SIGINT)  # the script saves a checkpoint and exits
            break
    code = process.wait()
    CHILDREN.remove(process)
    LEFT_BEHIND.clear()
    steps, seconds, returns = all_games()
    means = window_means(returns, args.window)
    if stop_reason is None and code != 0:
        with open(os.path.join(log_dir, "train.log"), errors="replace") as log:  # the script's own last line says why
            said = ([line.strip() for line in log if line.strip()] or ["(nothing)"])[-1]
        sys.exit(
            f"error: the run exited {code} before the target or the cap, saying: {said[:500]}; its log: {log_dir}/train.log"
        )
    finite = means[np.isfinite(means)]
    leg_minutes = round((time.time() - launched) / 60, 2)
    shown_command = " ".join(os.path.relpath(part, REPO) if part.startswith(REPO) else part for part in command)
    checkpoints = glob.glob(os.path.join(log_dir, "*", "checkpoint.pt"))  # the stop's: a later --resume continues it
    checkpoint_mtime = os.path.getmtime(checkpoints[0]) if len(checkpoints) == 1 else None
    legs = legs + [
        dict(command=shown_command, minutes_run=leg_minutes, cap_minutes=args.minutes, checkpoint_mtime=checkpoint_mtime)
    ]
    record = {
        "script": args.script,
        "env_id": args.env_id,
        "seed": args.seed,
        "target": args.target,
        "window": args.window,
        "cap_minutes": sum(leg["cap_minutes"] for leg in legs),
        "reached": reached_at is not None,
        "minutes_to_target": round(float(seconds[reached_at]) / 60, 2) if reached_at is not None else None,
        "steps_to_target": int(steps[reached_at]) if reached_at is not None else None,
        "best_window_mean": round(float(finite.max()), 2) if finite.size else None,
        "last_window_mean": round(float(finite[-1]), 2) if finite.size else None,
        "minutes_run": round(sum(leg["minutes_run"] for leg in legs), 2),
        "steps_run": int(steps[-1]) if steps.size else 0,
        "stopped_by": stop_reason or "the run's end",
        "cpu": cpu_description(),
        "gpu": gpu,
        "command": legs[0]["command"],  # the first leg's: the run's settings (a resumed one keeps its saved args)
        "legs": legs,
        "games": [[int(s), round(float(t), 1), float(r)] for s, t, r in zip(steps, seconds, returns)],
    }
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as file:
        json.dump(record, file, indent=None)
    os.replace(path + ".tmp", path)
    outcome = (
        f"reached {args.target:g} at {record['minutes_to_target']} min, step {record['steps_to_target']:,}"
        if record["reached"]
        else f"did not reach {args.target:g} in {record['minutes_run']} min "
        + (
            f"(best mean {record['best_window_mean']})"
            if record["best_window_mean"] is not None
            else f"(fewer than {args.window} games: no mean yet)"
        )
    )
    shown = os.path.relpath(path)  # from the user's folder, where it is under it (trial 31: "../rel_t31/...")
    print(f"{outcome}; {games(len(returns))}; record: {path if shown.startswith(os.pardir) else shown}")


if __name__ == "__main__":
    main()

"""One speed lever of one script, A against B, interleaved (A B A B ...) in one invocation: SPS of each run and the
ratio of the means, with the machine named. For a lever whose gain is near the run-to-run spread, where one pair of
runs cannot decide a default.

    ONEDNN_MAX_CPU_ISA=AVX2 python benchmark/lever_ab.py --script c51_atari_envpool --flag channels-last --values on off

Run on a quiet machine (pause background runs): the runs are sequential, each on every core."""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speed_by_machine import DQN_ATARI, REPO, cpu_model_and_isa, learning_sps  # noqa: E402

from cleanrl_utils.stop import exit_tool_on_signals, run_child, scratch_folder  # noqa: E402

# the replay scripts measured as speed_by_machine's rows measure them: Pong, learning from step 1,000
SETTINGS = {
    name: DQN_ATARI for name in ("dqn_atari_envpool", "c51_atari_envpool", "rainbow_atari_envpool", "sac_atari_envpool")
}


def what_it_said(stderr: str) -> str:
    """A script's refusal in one line: its `error: ...` line, or the text of tyro's box (unknown flag, bad choice)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    said = next((line for line in reversed(lines) if line.startswith("error:")), None)
    if said:
        return said.removeprefix("error: ")
    inner = [line.strip("│╭╮╰╯─ ") for line in lines]
    inner = [line for line in inner if line and not line.startswith("For full helptext")]
    if len(inner) > 1 and inner[1].lower().startswith(inner[0].lower()):
        inner = inner[1:]  # the box's title, said again by its first line
    return " ".join(inner)


def parsed_value(script: str, flags: list[str]) -> str:
    """The script's own argument parser and checks on `flags`, before any run: a bad --flag or value costs no training
    run (its validate_args holds the range checks, e.g. --torch-threads 0..4 per core). Returns the value the script
    reads for the last flag, as repr: `1` and `01` are one value."""
    field = flags[-2].removeprefix("--").replace("-", "_")
    parse = (
        f"import sys, tyro; sys.path.insert(0, '.'); sys.path.insert(0, 'cleanrl'); import {script} as s; "
        f"a = tyro.cli(s.Args, args=sys.argv[1:]); s.validate_args(a); print('value:', repr(a.{field}))"
    )
    result = subprocess.run([sys.executable, "-c", parse, *flags], capture_output=True, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"error: {script} refuses {' '.join(flags[-2:])}: {what_it_said(result.stderr)}")
    said = [line for line in result.stdout.splitlines() if line.startswith("value: ")]
    if not said:  # --help (trial 13: its box was taken for the value): not a setting of the run
        sys.exit(f"error: {flags[-2]} is not a setting of {script}'s runs: give a lever's flag, e.g. channels-last")
    return said[-1].removeprefix("value: ")


def run(command: list[str], log_dir: str) -> None:
    """One run of the script under `log_dir`; a refusal or a crash ends this tool with the script's own error line."""
    result = run_child(
        [sys.executable, *command, "--log-dir", log_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(command)} exited {result.returncode}: {what_it_said(result.stderr)}")


def main() -> None:
    exit_tool_on_signals("benchmark/lever_ab.py")  # a stop ends its runs, removes their folder: one line
    parser = argparse.ArgumentParser(  # the docstring's first paragraph (trial 13: its first line stopped mid-sentence)
        description=" ".join(__doc__.split("\n\n")[0].split()), epilog="Run on a quiet machine: the runs are sequential."
    )
    parser.add_argument("--script", required=True, help=f"one of {', '.join(SETTINGS)}")
    parser.add_argument("--flag", required=True, help="the lever's flag without its dashes, e.g. channels-last")
    parser.add_argument("--values", nargs=2, required=True, metavar=("A", "B"), help="the two values compared")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each value (default: 3)")
    parser.add_argument("--steps", type=int, default=4000, help="steps per run (default: 4000)")
    parser.add_argument("--from-step", type=int, default=2000, help="SPS from this step on (default: 2000)")
    args = parser.parse_args()
    if args.script not in SETTINGS:
        sys.exit(f"error: --script {args.script!r} is not one of {', '.join(SETTINGS)}")
    args.flag = args.flag.removeprefix("--").replace("_", "-")  # tyro takes either spelling (trial 14: total_timesteps)
    if args.flag in ("total-timesteps", "log-dir"):  # trial 13, Q2: its own value came last and won, A and B ran alike
        sys.exit(f"error: --flag {args.flag} is set by this tool itself (--steps, a temporary folder): compare a lever")
    if args.values[0] == args.values[1]:
        sys.exit(f"error: --values {args.values[0]} {args.values[1]} are the same value: give the two compared")
    if args.repeats < 1:
        sys.exit(f"error: --repeats must be >= 1, got {args.repeats}")
    if args.from_step < 0 or args.steps <= args.from_step + 1000:
        sys.exit(
            f"error: --steps {args.steps} must be more than --from-step {args.from_step} + 1000 (the SPS window), "
            "and --from-step >= 0"
        )
    # The runs log charts/SPS every 1,000 steps (1,000, 2,000, ...): the window needs two of those points (trial 29:
    # --steps 1400 --from-step 300 held one, and a ZeroDivisionError traceback came after both runs)
    first_point = -(-max(args.from_step, 1) // 1000) * 1000
    if args.steps < first_point + 1000:
        sys.exit(
            f"error: --steps {args.steps} from --from-step {args.from_step} holds fewer than two of the SPS points the "
            f"runs log every 1,000 steps (the first at {first_point:,}): give --steps {first_point + 1000} or more"
        )
    # checked with the run's own --total-timesteps (trial 13, Q1: a --learning-starts past it passed, then failed a run)
    fixed = [*SETTINGS[args.script], "--total-timesteps", str(args.steps)]
    parsed = [parsed_value(args.script, [*fixed, f"--{args.flag}", value]) for value in args.values]
    if parsed[0] == parsed[1]:
        sys.exit(
            f"error: --values {args.values[0]} {args.values[1]} are the same value to {args.script} "
            f"(--{args.flag} {parsed[0]}): give the two compared"
        )
    model, isa = cpu_model_and_isa()
    print(f"machine: {model}, {len(os.sched_getaffinity(0))} cores, ISA {isa}", flush=True)
    sps = {value: [] for value in args.values}
    with scratch_folder() as log_dir:
        for repeat in range(args.repeats):
            for value in args.values:
                out = os.path.join(log_dir, f"{value}-{repeat}")
                os.makedirs(out)
                run([f"cleanrl/{args.script}.py", *fixed, f"--{args.flag}", value], out)  # the command checked above
                sps[value].append(learning_sps(out, args.from_step))
                print(f"  --{args.flag} {value} run {repeat + 1}: SPS {sps[value][-1]:.1f}", flush=True)
    (a, a_sps), (b, b_sps) = sps.items()
    spread = lambda values: statistics.stdev(values) if len(values) > 1 else 0.0  # noqa: E731
    print(
        f"{args.script} --{args.flag}: {a} {statistics.mean(a_sps):.1f} ± {spread(a_sps):.1f} SPS, "
        f"{b} {statistics.mean(b_sps):.1f} ± {spread(b_sps):.1f} SPS over {args.repeats} runs each; "
        f"{a} / {b} = {statistics.mean(a_sps) / statistics.mean(b_sps):.2f}x ({model}, {isa})",
        flush=True,
    )


if __name__ == "__main__":
    main()

"""How much of a step is the network's arithmetic, and so how far any loop around that arithmetic could go.

For each script named (a row of benchmark/speed_by_machine.py: the same commands, the script beside its CleanRL-layout
reference), two runs of each side, one after the other:
  1. plain: SPS over the learning phase (charts/SPS from the row's from-step on, as speed_by_machine.py measures);
  2. under torch.profiler: the self time of the network's arithmetic (convolutions and matrix products, forward and
     backward: the ops below) over the learning phase, per env step.
Then the ceiling: the reference's ms a step over the script's arithmetic ms a step, the ratio over the reference that
a loop doing nothing but the script's network arithmetic would reach. Where it is below a speed goal, no change
to the loop meets the goal; only less or faster arithmetic does (bf16, where the machine computes it natively).

    ONEDNN_MAX_CPU_ISA=AVX2 python benchmark/network_share.py --only c51_atari_envpool,sac_atari_envpool
    python benchmark/network_share.py --only c51_atari_envpool --steps 4000     # a shorter run

Run it on a quiet machine (pause background runs): the figures are times."""

import argparse
import os
import runpy
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speed_by_machine import REPO, ROWS, cpu_model_and_isa, learning_sps  # noqa: E402

from cleanrl_utils.stop import exit_tool_on_signals, run_child, scratch_folder  # noqa: E402

# aten ops that are the network's arithmetic, forward and backward (self time: each op's own, not its children's)
ARITHMETIC = {
    "aten::mkldnn_convolution",
    "aten::convolution_backward",
    "aten::_convolution",
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
}


def learning_starts(command: list[str]) -> int:
    return int(command[command.index("--learning-starts") + 1]) if "--learning-starts" in command else 0


def child(command: list[str], out: str) -> None:
    """Run `command` (a script path and its flags) in this process under the profiler; write the arithmetic's self
    time in seconds and the op names counted to `out`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.argv = command
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        try:
            runpy.run_path(command[0], run_name="__main__")
        except SystemExit as error:
            if error.code not in (0, None):
                raise
        wall = time.perf_counter() - start
    totals = {event.key: event.self_cpu_time_total for event in prof.key_averages() if event.key in ARITHMETIC}
    with open(out, "w") as f:
        f.write(f"{sum(totals.values()) / 1e6} {wall} {torch.get_num_threads()}\n")
        f.write(" ".join(f"{name}={us / 1e6:.2f}s" for name, us in sorted(totals.items())) + "\n")


def run(command: list[str], run_dir: str, profiled: bool) -> subprocess.CompletedProcess:
    prefix = [__file__, "--child", os.path.join(run_dir, "arithmetic.txt"), "--"] if profiled else []
    full = [sys.executable, *prefix, *command, "--log-dir", run_dir]
    result = run_child(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return result


def fewest_steps(row) -> int:
    """The shortest run that measures `row`: a learning phase past its from-step, with SPS logged every 1,000 steps."""
    return max(row.from_step, learning_starts(row.command)) + 1024


def measure(row, steps: int, log_dir: str) -> dict[str, dict]:
    figures = {}
    for side, command in (("reference", row.reference), ("script", row.command)):
        command = [*command, "--total-timesteps", str(steps)]
        plain_dir, profiled_dir = (
            os.path.join(log_dir, f"{row.script}-{side}"),
            os.path.join(log_dir, f"{row.script}-{side}-p"),
        )
        run(command, plain_dir, profiled=False)
        sps = learning_sps(plain_dir, row.from_step)
        run(command, profiled_dir, profiled=True)
        with open(os.path.join(profiled_dir, "arithmetic.txt")) as f:
            seconds, _, threads = f.readline().split()
            ops = f.readline().strip()
        arithmetic_ms = float(seconds) * 1e3 / (steps - learning_starts(command))
        figures[side] = dict(sps=sps, step_ms=1e3 / sps, arithmetic_ms=arithmetic_ms, threads=int(threads), ops=ops)
        print(
            f"  {row.script} {side}: {sps:,.0f} SPS ({1e3 / sps:.2f} ms a step), network arithmetic {arithmetic_ms:.2f} ms "
            f"a step ({arithmetic_ms * sps / 1e3:.0%}), {threads} torch threads; {ops}",
            flush=True,
        )
    return figures


def main() -> None:
    exit_tool_on_signals("benchmark/network_share.py")  # a stop ends its runs, removes their folder: one line
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="c51_atari_envpool,rainbow_atari_envpool,sac_atari_envpool")
    parser.add_argument("--steps", type=int, default=0, help="env steps a run (0: the row's idle steps)")
    parser.add_argument("--log-dir", default="", help="where the runs go (default: a temporary folder, removed)")
    args = parser.parse_args()
    rows = {row.script: row for row in ROWS if row.command[0].endswith(".py")}
    names = [name for name in args.only.split(",") if name]
    unknown = [name for name in names if name not in rows]
    if unknown or not names:
        sys.exit(f"error: --only {args.only!r}: each name must be one of {', '.join(sorted(rows))}")
    if args.steps < 0:
        sys.exit(f"error: --steps must be 0 (each row's own budget) or a positive number of env steps, got {args.steps}")
    for name in names:  # every budget checked before anything is printed or run (trial 20)
        fewest = fewest_steps(rows[name])
        if (args.steps or rows[name].steps) < fewest:
            sys.exit(f"error: --steps {args.steps} leaves too little learning phase for {name} (at least {fewest})")
    model, isa = cpu_model_and_isa()
    print(f"{model} ({len(os.sched_getaffinity(0))} cores), {isa}", flush=True)
    with scratch_folder() as scratch:
        log_dir = args.log_dir or scratch
        print("| script | reference: SPS, ms a step, arithmetic ms (share) | script: SPS, ms a step, arithmetic ms (share) "
              "| ratio | ceiling: reference ms / script arithmetic ms |")  # fmt: skip
        for name in names:
            row = rows[name]
            steps = args.steps or row.steps
            f = measure(row, steps, log_dir)
            ref, own = f["reference"], f["script"]
            cells = [
                f"{side['sps']:,.0f}, {side['step_ms']:.2f}, {side['arithmetic_ms']:.2f} ({side['arithmetic_ms'] / side['step_ms']:.0%})"
                for side in (ref, own)
            ]
            print(
                f"| `{name}` ({steps:,} steps) | {cells[0]} | {cells[1]} | {own['sps'] / ref['sps']:.2f}x | "
                f"{ref['step_ms'] / own['arithmetic_ms']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--child" and sys.argv[3] == "--":
        child(sys.argv[4:], sys.argv[2])
    else:
        main()

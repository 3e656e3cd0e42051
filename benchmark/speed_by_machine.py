"""Speed per machine kind: each CPU- or GPU-sensitive script at its defaults beside its reference, in one invocation,
idle and loaded, one row per script written into docs/benchmarks/speed_by_machine.md (rows of other machines kept).

    python benchmark/speed_by_machine.py                          # this machine as it is
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmark/speed_by_machine.py  # the same CPU computing like an AVX2-only one
    python benchmark/speed_by_machine.py --only ppo_atari_envpool --steps-scale 0.5
    python benchmark/speed_by_machine.py --only c51_atari_envpool --idle-only --pairs 3  # medians of 3 pairs

Idle: one run alone (with --pairs N, N runs of each side, reference and script alternately: the medians). Loaded:
two copies started together (two runs by hand on the same cores), each one's SPS.
SPS is taken from the runs' own `charts/SPS` event wall times, from the first logged point at or after `from_step`
to the last, so start-up (env creation, the first iteration's kernel selection, an off-policy run's random
warm-up) is not counted. The reference of the PPO Atari scripts is CleanRL's loop (benchmark/
ppo_atari_envpool_cleanrl_layout.py; the torch.distributed one runs as 2 processes x 4 envs under torchrun, the same
8 x 128 batch), of the LSTM script CleanRL's ppo_atari_lstm.py loop (benchmark/ppo_atari_lstm_envpool_cleanrl_layout.py),
of PQN CleanRL's pqn_atari_envpool.py loop (benchmark/pqn_atari_envpool_cleanrl_layout.py), of C51 CleanRL's
c51_atari.py loop (benchmark/c51_atari_envpool_cleanrl_layout.py), of Rainbow CleanRL's rainbow_atari.py loop
(benchmark/rainbow_atari_envpool_cleanrl_layout.py), of discrete SAC CleanRL's sac_atari.py loop
(benchmark/sac_atari_envpool_cleanrl_layout.py), of RPO CleanRL's rpo_continuous_action.py loop on Gymnasium
(benchmark/rpo_continuous_action_cleanrl_layout.py), of SAC its CleanRL-layout baseline. TD3, DDPG and DQN on
Atari have no CleanRL-layout baseline here: their reference is the same script with every lever at its old
fixed value (fp32, one torch thread per core), which is what CleanRL's scripts run. Pause other work on the
machine while it runs.
"""

import argparse
import datetime
import glob
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass

from cleanrl_utils.stop import CHILDREN, exit_tool_on_signals, scratch_folder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(REPO, "docs", "benchmarks", "speed_by_machine.md")
HEADER = (
    "| date | CPU (cores) | ISA oneDNN uses | script (resolved levers) | reference | steps idle / loaded | "
    "idle: reference / script SPS | idle ratio | loaded: reference / script SPS each | loaded ratio |"
)


@dataclass
class Row:
    script: str
    command: list[str]
    reference_name: str
    reference: list[str]
    steps: int  # idle runs
    from_step: int  # SPS from the first charts/SPS point at or after this step
    loaded_steps: int  # each of the two loaded runs (fewer: a reference that collapses under load crawls)


OFF_POLICY = ["--env-id", "Hopper-v4", "--learning-starts", "1000", "--buffer-size", "100000"]
# no replay in the checkpoint: it does not change SPS, and four 1M-capacity buffers at once (7 GB each) fill a disk
DQN_ATARI = ["--env-id", "Pong-v5", "--learning-starts", "1000", "--no-checkpoint-buffer"]
RPO_TABLE5 = ["--env-id", "HalfCheetah-v4", "--num-envs", "64", "--num-steps", "64", "--learning-rate", "0.00295"]
RPO_TABLE5 += ["--num-minibatches", "4", "--update-epochs", "2", "--vf-coef", "1.3", "--max-grad-norm", "3.5"]
OLD_LEVERS = ["--precision", "fp32", "--torch-threads", str(len(os.sched_getaffinity(0)))]
ROWS = [
    Row("ppo_atari_envpool", ["cleanrl/ppo_atari_envpool.py", "--env-id", "Pong-v5"], "CleanRL layout",
        ["benchmark/ppo_atari_envpool_cleanrl_layout.py", "--env-id", "Pong-v5"], 15360, 2048, 5120),
    Row("ppo_atari_envpool_async", ["cleanrl/ppo_atari_envpool_async.py", "--env-id", "Pong-v5"], "CleanRL layout (sync)",
        ["benchmark/ppo_atari_envpool_cleanrl_layout.py", "--env-id", "Pong-v5"], 15360, 2048, 5120),
    Row("ppo_atari_envpool_distributed",
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "cleanrl/ppo_atari_envpool_distributed.py",
         "--env-id", "Pong-v5", "--local-num-envs", "4"], "CleanRL layout (one process, 8 envs)",
        ["benchmark/ppo_atari_envpool_cleanrl_layout.py", "--env-id", "Pong-v5"], 15360, 2048, 5120),
    Row("ppo_atari_envpool_xla_jax", ["cleanrl/ppo_atari_envpool_xla_jax.py", "--env-id", "Pong-v5"], "CleanRL layout (torch)",
        ["benchmark/ppo_atari_envpool_cleanrl_layout.py", "--env-id", "Pong-v5"], 15360, 2048, 5120),
    Row("ppo_atari_lstm_envpool", ["cleanrl/ppo_atari_lstm_envpool.py", "--env-id", "Pong-v5"], "CleanRL layout",
        ["benchmark/ppo_atari_lstm_envpool_cleanrl_layout.py", "--env-id", "Pong-v5"], 10240, 2048, 3072),
    Row("pqn_atari_envpool", ["cleanrl/pqn_atari_envpool.py", "--env-id", "Pong-v5"], "CleanRL layout",
        ["benchmark/pqn_atari_envpool_cleanrl_layout.py", "--env-id", "Pong-v5"], 15360, 2048, 5120),
    Row("dqn_atari_envpool", ["cleanrl/dqn_atari_envpool.py", *DQN_ATARI], "the script, fp32, threads = cores",
        ["cleanrl/dqn_atari_envpool.py", *DQN_ATARI, "--channels-last", "off", *OLD_LEVERS], 5000, 2000, 3000),
    # C51, Rainbow and discrete SAC: a 100k replay in both. CleanRL's keeps whole stacks, 26 GB at 1M, which numpy
    # refuses here; SPS does not depend on the capacity (a sample touches only the filled rows)
    Row("c51_atari_envpool", ["cleanrl/c51_atari_envpool.py", *DQN_ATARI, "--buffer-size", "100000"], "CleanRL layout",
        ["benchmark/c51_atari_envpool_cleanrl_layout.py", *DQN_ATARI[:4], "--buffer-size", "100000"], 5000, 2000, 3000),
    Row("rainbow_atari_envpool", ["cleanrl/rainbow_atari_envpool.py", *DQN_ATARI, "--buffer-size", "100000"],
        "CleanRL layout", ["benchmark/rainbow_atari_envpool_cleanrl_layout.py", *DQN_ATARI[:4], "--buffer-size", "100000"],
        5000, 2000, 3000),
    Row("sac_atari_envpool", ["cleanrl/sac_atari_envpool.py", *DQN_ATARI, "--buffer-size", "100000"], "CleanRL layout",
        ["benchmark/sac_atari_envpool_cleanrl_layout.py", *DQN_ATARI[:4], "--buffer-size", "100000"], 5000, 2000, 3000),
    # RPO at the script's Table 5 settings, given to CleanRL's loop too (its own defaults are 1 env x 2,048 steps and
    # 10 x 32 minibatches, 80x the gradient work per sample: a ratio to those would measure hyperparameters)
    Row("rpo_continuous_action_envpool", ["cleanrl/rpo_continuous_action_envpool.py", *RPO_TABLE5], "CleanRL layout (Gymnasium)",
        ["benchmark/rpo_continuous_action_cleanrl_layout.py", *RPO_TABLE5], 40960, 8192, 20480),
    Row("sac_continuous_action_envpool", ["cleanrl/sac_continuous_action_envpool.py", *OFF_POLICY], "CleanRL layout",
        ["benchmark/sac_continuous_action_cleanrl_layout.py", *OFF_POLICY], 4000, 2000, 3000),
    Row("td3_continuous_action_envpool", ["cleanrl/td3_continuous_action_envpool.py", *OFF_POLICY],
        "the script, fp32, threads = cores", ["cleanrl/td3_continuous_action_envpool.py", *OFF_POLICY, *OLD_LEVERS], 4000, 2000, 3000),
    Row("ddpg_continuous_action_envpool", ["cleanrl/ddpg_continuous_action_envpool.py", *OFF_POLICY],
        "the script, fp32, threads = cores", ["cleanrl/ddpg_continuous_action_envpool.py", *OFF_POLICY, *OLD_LEVERS], 4000, 2000, 3000),
]  # fmt: skip


def cpu_model_and_isa() -> tuple[str, str]:
    """lscpu's model name (and the GPU's, where there is one) and the best ISA class lscpu lists, with the oneDNN cap
    this process runs under."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.+)", text).group(1).strip()
    flags = set(re.search(r"Flags:\s*(.+)", text).group(1).split())
    isa = next(
        (name for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512-BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
         if flag in flags),
        "below AVX2",
    )  # fmt: skip
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    if shutil.which("nvidia-smi"):  # the scripts train on the GPU where there is one: the row is that GPU's
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
        model += "".join(f" + {name.strip()}" for name in gpu.stdout.splitlines()[:1])
    return model, f"{isa}, capped by ONEDNN_MAX_CPU_ISA={cap}" if cap else isa


def learning_sps(run_dir: str, from_step: int) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(glob.glob(os.path.join(run_dir, "*", "events*"))[0], size_guidance={"scalars": 0})
    events.Reload()
    points = [(e.step, e.wall_time) for e in events.Scalars("charts/SPS") if e.step >= from_step]
    if len(points) < 2 or points[-1][1] <= points[0][1]:  # trial 29: one point was a ZeroDivisionError traceback
        sys.exit(
            f"error: the run in {run_dir} logged charts/SPS {len(points)} time(s) from step {from_step:,} on: the speed needs two; give it more steps"
        )
    (s0, t0), (s1, t1) = points[0], points[-1]
    return (s1 - s0) / (t1 - t0)


def run_together(commands: list[list[str]], log_dir: str) -> str:
    """Start the commands at once (run folders under `log_dir`/0, /1, ...); the levers the first one printed."""
    processes, dirs = [], []
    for i, command in enumerate(commands):
        run_dir = os.path.join(log_dir, str(i))
        dirs.append(run_dir)
        log = open(run_dir + ".log", "w")
        processes.append(
            subprocess.Popen([sys.executable, *command, "--log-dir", run_dir], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        )
        CHILDREN.append(processes[-1])  # a signal to this tool ends them too (exit_tool_on_signals)
    codes = [process.wait() for process in processes]
    del CHILDREN[:]
    for code, run_dir in zip(codes, dirs):
        if code != 0:
            sys.exit(f"error: {' '.join(commands[0])} failed:\n{open(run_dir + '.log').read()[-2000:]}")
    printed = open(dirs[0] + ".log").read()
    levers = "; ".join(m.group(0) for m in re.finditer(r"^(precision|channels-last|torch threads): \S+", printed, re.M))
    return levers


def measure(row: Row, scale: float, log_dir: str, idle_only: bool = False, pairs: int = 1) -> dict:
    """SPS of each side: idle (`pairs` runs of each, reference and script alternately, so that a drift of the machine's
    speed meets both sides alike), then loaded (two copies at once)."""
    figures = {}
    sides = (("reference", row.reference), ("script", row.command))
    idle = [(name, command, "idle", 1, row.steps, pair) for pair in range(pairs) for name, command in sides]
    loaded = [(name, command, "loaded", 2, row.loaded_steps, 0) for name, command in sides]
    for name, command, load, copies, steps, pair in idle + ([] if idle_only else loaded):
        out = os.path.join(log_dir, f"{row.script}-{name}-{load}-{pair}")
        steps = max(int(steps * scale), row.from_step + 1024)
        processes = [[*command, "--total-timesteps", str(steps)]] * copies
        os.makedirs(out)
        levers = run_together(processes, out)
        sps = [learning_sps(os.path.join(out, str(i)), row.from_step) for i in range(copies)]
        figures.setdefault((name, load), []).extend(sps)  # idle: one figure a pair; loaded: one a copy
        if name == "script" and load == "idle":
            figures["levers"] = levers
        print(f"  {row.script} {name} {load}: SPS {', '.join(f'{x:.0f}' for x in sps)}", flush=True)
    figures["steps"] = (
        f"{max(int(row.steps * scale), row.from_step + 1024):,} / {max(int(row.loaded_steps * scale), row.from_step + 1024):,}"
    )
    return figures


def table_row(row: Row, figures: dict, model: str, isa: str) -> str:
    def each(values):
        return " + ".join(f"{v:,.0f}" for v in values)

    ref_idle, idle = figures["reference", "idle"], figures["script", "idle"]
    ref_loaded, loaded = figures.get(("reference", "loaded")), figures.get(("script", "loaded"))
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    loaded_cells = f"{each(ref_loaded)} / {each(loaded)} | {mean(loaded) / mean(ref_loaded):.2f}x" if loaded else "not run | |"
    # Several idle pairs: each side's median, and the ratio of the medians with the range of the pairs' own ratios
    # (one pair's ratio on a shared VM varies by 15% or more from one invocation to the next)
    idle_cells = f"{statistics.median(ref_idle):,.0f} / {statistics.median(idle):,.0f}"
    idle_ratio = f"{statistics.median(idle) / statistics.median(ref_idle):.2f}x"
    if len(idle) > 1:
        ratios = sorted(own / ref for ref, own in zip(ref_idle, idle))
        idle_cells += f" (medians of {len(idle)} alternating pairs)"
        idle_ratio += f" (pairs {ratios[0]:.2f}-{ratios[-1]:.2f}x)"
    return (
        f"| {datetime.date.today()} | {model} ({len(os.sched_getaffinity(0))}) | {isa} | `{row.script}` ({figures['levers']}) | "
        f"{row.reference_name} | {figures['steps']} | {idle_cells} | {idle_ratio} | {loaded_cells} |"
    )


def row_key(line: str) -> tuple[str, str, str]:
    """(CPU, ISA, script name) of a table row: one row per script and machine kind."""
    cpu, isa, script = (cell.strip() for cell in line.split("|")[2:5])
    return cpu, isa, script.split(" (")[0]


def write_rows(new_rows: dict[tuple[str, str, str], str]) -> None:
    """Replace this machine's rows for the scripts measured; keep every other row."""
    lines = open(TABLE).read().splitlines() if os.path.exists(TABLE) else []
    start = next((i for i, line in enumerate(lines) if line.startswith("| date |")), None)
    if start is None:
        lines += ["", "## Measured rows", "", HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
        start = len(lines) - 2
    body_end = start + 2
    while body_end < len(lines) and lines[body_end].startswith("|"):
        body_end += 1
    kept = [line for line in lines[start + 2 : body_end] if row_key(line) not in new_rows]
    keyed = [(row_key(r), r) for r in kept] + list(new_rows.items())
    body = [r for _, r in sorted(keyed, key=lambda kr: (kr[0][2], kr[0][0], kr[0][1]))]
    lines[start + 2 : body_end] = body
    os.makedirs(os.path.dirname(TABLE), exist_ok=True)
    with open(TABLE, "w") as f:
        f.write("\n".join(lines) + "\n")


# --steps-scale above it asks for days of runs a row
MAX_STEPS_SCALE = 100
MAX_PAIRS = 20  # a Rainbow pair takes about 5 minutes here


def main() -> None:
    exit_tool_on_signals("benchmark/speed_by_machine.py")  # a stop ends its runs, removes their folder: one line
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated script names (default: every row)")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply every row's steps")
    parser.add_argument("--idle-only", action="store_true", help="skip the loaded pairs")
    parser.add_argument("--no-write", action="store_true", help="print the rows, leave the table alone")
    parser.add_argument(
        "--pairs", type=int, default=1, help=f"idle runs of each side, alternating (1 to {MAX_PAIRS}); the row gives medians"
    )
    args = parser.parse_args()
    if not (math.isfinite(args.steps_scale) and 0 < args.steps_scale <= MAX_STEPS_SCALE):  # trial 21, Y3
        sys.exit(f"error: --steps-scale must be in (0, {MAX_STEPS_SCALE}], got {args.steps_scale}")
    if not 1 <= args.pairs <= MAX_PAIRS:
        sys.exit(f"error: --pairs must be in 1..{MAX_PAIRS}, got {args.pairs}")
    chosen = [row for row in ROWS if not args.only or row.script in args.only.split(",")]
    if not chosen:
        sys.exit(f"error: --only {args.only!r} names no row; rows: {', '.join(row.script for row in ROWS)}")
    model, isa = cpu_model_and_isa()
    print(f"machine: {model}, {len(os.sched_getaffinity(0))} cores, ISA {isa}", flush=True)
    for row in chosen:
        # each row written as soon as it is measured (a stopped invocation keeps the rows it finished), and its run
        # folders removed (DQN Atari's checkpoints hold GBs of replay)
        with scratch_folder() as log_dir:
            line = table_row(row, measure(row, args.steps_scale, log_dir, args.idle_only, args.pairs), model, isa)
        print(line, flush=True)
        if not args.no_write:
            write_rows({row_key(line): line})
            print(f"wrote the row to {os.path.relpath(TABLE, REPO)}", flush=True)


if __name__ == "__main__":
    main()

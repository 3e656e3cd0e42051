"""The results campaign: named slices of script x env x seed runs whose results go into tracked files, resumable.

    python benchmark/campaign.py --slice on-policy-mujoco            # run what is not finished yet
    python benchmark/campaign.py --slice on-policy-mujoco --dry-run  # list the runs, finished or not
    python benchmark/campaign.py --slice dqn-classic --commit        # commit each finished run's results

A session may end at any time, so each run's results are written the moment it ends, under
`benchmark/results/records/<exp_name>/<env_id>__<seed>.json` (its summary, a downsampled training curve over steps
and wall-clock, the periodic test curve), and `benchmark/results/summary.csv` is rewritten with one row per finished
run. A run with a results file is finished and skipped. An interrupted run continues from its last checkpoint (one
every ~30,000 steps, in its folder under `runs/campaign/`), so a stopped session loses at most that much training;
the run's wall-clock and CPU figures add up its attempts, written down every 30 s, and leave out the time between.
`--commit` commits the run's two files alone (other staged or unstaged work is left as it is).

Runs go one at a time, seeds outermost: every cell gets its first seed before any gets its second.

The periodic test is Tianshou's: every ~30,000 steps (an epoch of its MuJoCo benchmark) the run keeps a checkpoint;
after training each is played for 10 episodes with sampled actions and frozen observation statistics, on one
evaluation seed, and `best_test_return` is the best of those means (Tianshou's tables report the maximum over
training of such a curve, averaged over seeds). `final_return` is the stricter figure: the mean of the training
episodes that ended in the last 5% of the steps. `python -m cleanrl_utils.results` turns the files into the tables
and figures.
"""

import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import tyro

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run as `python benchmark/campaign.py` from anywhere
from cleanrl_utils.results import (  # noqa: E402
    DEFAULT_OUTPUT_DIR,
    MARKER,
    cpu_description,
    run_record,
    write_summary_csv,
)
from cleanrl_utils.run import check_writable_dir  # noqa: E402
from cleanrl_utils.stop import LEFT_BEHIND, exit_tool_on_signals, run_child  # noqa: E402

DEFAULT_RESULTS_DIR = os.path.join(REPO, "benchmark", "results")
MAX_SEEDS = 100  # a slice's seeds 1..N: more is a typo (each run takes minutes to hours)
TIANSHOU_EPOCH = 30_000  # env steps between periodic tests in Tianshou's MuJoCo benchmark


@dataclass(frozen=True)
class Cell:
    """One script at one setting over some envs; `steps_per_iteration` sets the test period."""

    script: str
    exp_name: str
    env_ids: tuple[str, ...]
    total_timesteps: int
    steps_per_iteration: int  # env steps between checkpoints the script can keep (num_envs x num_steps, or num_envs)
    flags: tuple[str, ...] = ()
    test_episodes: int = 10  # 0: no periodic test (the best_test_return column stays empty)
    later: bool = False  # runs after every seed of the slice's other cells (the "then DDPG, as time allows")


LOCOMOTION = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4")
PPO = "ppo_continuous_action_envpool"
RPO = "rpo_continuous_action_envpool"
PPO_1M = ("--update-epochs", "10", "--num-minibatches", "8", "--kl-adaptive-lr", "0.008")  # docs/ppo.md, at 1M steps
# Tianshou's own PPO benchmark settings where this script has the flag (its examples/mujoco: lr 3e-4, 64 envs and
# 2,048 steps per collect, 10 epochs of minibatch 64, vf 0.25, grad norm 0.5); not its per-epoch advantage
# recomputation or its lr decayed over 3M steps (this one anneals to 0 at 1M). Its log-std init of -0.5 is the
# second cell's one difference from the first
PPO_TIANSHOU = ("--learning-rate", "3e-4", "--num-envs", "64", "--num-steps", "32", "--num-minibatches", "32")
PPO_TIANSHOU += ("--update-epochs", "10", "--vf-coef", "0.25", "--max-grad-norm", "0.5")
SLICES = {
    # issue 27, tier 1: on-policy MuJoCo at 1M steps, 5 seeds
    "on-policy-mujoco": (
        [Cell(PPO, f"{PPO}_1m", (*LOCOMOTION, "Ant-v4", "Humanoid-v4"), 1_000_000, 4096, PPO_1M)]
        + [Cell(PPO, PPO, (*LOCOMOTION, "Ant-v4", "Humanoid-v4"), 1_000_000, 4096)]  # Table 5 as it is
        + [
            Cell(f"{name}_continuous_action_envpool", f"{name}_continuous_action_envpool", LOCOMOTION, 1_000_000, size)
            for name, size in (("a2c", 80), ("npg", 1024), ("trpo", 1024), ("reinforce", 2050))
        ]
    ),
    # the PPO shortfall (docs/ppo.md): the cells below Tianshou's figure rerun at Tianshou's own PPO settings
    "ppo-tianshou-settings": [
        Cell(PPO, f"{PPO}_tianshou", ("HalfCheetah-v4", "Ant-v4"), 1_000_000, 2048, PPO_TIANSHOU),
        Cell(
            PPO,
            f"{PPO}_tianshou_logstd",
            ("HalfCheetah-v4", "Ant-v4"),
            1_000_000,
            2048,
            (*PPO_TIANSHOU, "--actor-logstd-init", "-0.5"),
        ),
    ],
    # tier 2: DQN on classic control at CleanRL's 500k (CleanRL reports training returns: no periodic test)
    "dqn-classic": [Cell("dqn", "dqn", ("CartPole-v1", "Acrobot-v1", "MountainCar-v0"), 500_000, 1, test_episodes=0)],
    # the value-based scripts beside DQN (issue 28), CleanRL's 500k budget, 3 seeds; training returns, as CleanRL's
    "value-classic": [
        Cell(name, name, ("CartPole-v1", "Acrobot-v1", "MountainCar-v0"), 500_000, 1, test_episodes=0)
        for name in ("pqn", "c51")
    ],
    # RPO beside PPO (issue 29): Hopper and HalfCheetah at 1M, 3 seeds, both at Table 5's settings; then RPO at the
    # alpha CleanRL's docs recommend for Hopper (0.01; 0.5, the paper's, for HalfCheetah), where 0.5 raised the entropy
    "rpo-mujoco": [
        Cell(name, name, ("Hopper-v4", "HalfCheetah-v4"), 1_000_000, 4096)
        for name in ("rpo_continuous_action_envpool", "ppo_continuous_action_envpool")
    ]
    + [Cell(RPO, f"{RPO}_alpha001", ("Hopper-v4", "HalfCheetah-v4"), 1_000_000, 4096, ("--rpo-alpha", "0.01"))],
    # Tianshou's protocol for the cells below its figure (docs/reinforce_a2c_npg_trpo.md): its 1M figures are read off
    # 3M-step runs, whose lr is still about 2/3 of its start at 1M, and its REINFORCE figures are at 3M. These run 3M
    # steps; cleanrl_utils.results reads A2C's against Tianshou's 1M figure up to 1M, as Tianshou does
    "tianshou-protocol": [
        Cell("a2c_continuous_action_envpool", "a2c_continuous_action_envpool_3m", ("Hopper-v4",), 3_000_000, 80),
        Cell(
            "reinforce_continuous_action_envpool",
            "reinforce_continuous_action_envpool_3m",
            ("HalfCheetah-v4", "Walker2d-v4"),
            3_000_000,
            2050,
        ),
        # the REINFORCE cell still below at 3M (Walker2d: best test 329 on seed 1, against 412), with the one setting
        # of Tianshou's REINFORCE this script did not share: actions squashed by tanh onto the bounds, not clipped
        Cell(
            "reinforce_continuous_action_envpool",
            "reinforce_continuous_action_envpool_3m_tanh",
            ("Walker2d-v4",),
            3_000_000,
            2050,
            ("--action-bound", "tanh"),
        ),
    ],
    # tier 3: off-policy MuJoCo at 300k, 3 seeds (Tianshou's figures are at 1M: the tables say so)
    "off-policy-mujoco": [
        Cell(
            f"{name}_continuous_action_envpool",
            f"{name}_continuous_action_envpool",
            ("Hopper-v4", "HalfCheetah-v4"),
            300_000,
            1,
            later=name == "ddpg",
        )
        for name in ("sac", "td3", "ddpg")
    ],
}
SEEDS = {
    "on-policy-mujoco": 5,
    "ppo-tianshou-settings": 3,
    "dqn-classic": 5,
    "value-classic": 5,
    "rpo-mujoco": 3,
    "off-policy-mujoco": 3,
    "tianshou-protocol": 3,
}


@dataclass
class CampaignArgs:
    slice: str
    """the slice to run: on-policy-mujoco, ppo-tianshou-settings, dqn-classic, value-classic, rpo-mujoco,
    tianshou-protocol or off-policy-mujoco"""
    seeds: int = 0
    """seeds 1..N, N at most 100 (0: the slice's own count, 5 or 3)"""
    results_dir: str = DEFAULT_RESULTS_DIR
    """the tracked folder the results go to"""
    runs_dir: str = os.path.join(REPO, "runs", "campaign")
    """where the runs' own folders (events, kept checkpoints, logs) go"""
    commit: bool = False
    """git-commit each finished run's results file and summary.csv, with the tables and figures regenerated from
    them (docs/results/ and the results sections of README.md and docs/*.md), so that main's pages are never stale"""
    dry_run: bool = False
    """list the slice's runs and whether each is finished, run nothing"""
    only_env: list[str] = field(default_factory=list)
    """run only these env ids of the slice"""


def result_path(results_dir: str, exp_name: str, env_id: str, seed: int) -> str:
    return os.path.join(results_dir, "records", exp_name, f"{env_id}__{seed}.json")


def test_curve(run_dir: str, episodes: int) -> dict:
    """Each kept checkpoint played for `episodes` episodes with sampled actions: {"step": [...], "return": [...]}."""
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", run_dir, "--episodes", str(episodes)]
    command += ["--no-cuda", "--torch-threads", "1"]
    result = run_child(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    if result.returncode != 0:
        raise RuntimeError(f"evaluating {run_dir} failed: {result.stderr.strip()[-500:]}")
    curve = {"step": [], "return": []}
    for line in result.stdout.splitlines():  # "step      30,720: mean return over 10 episodes    1234.56 +- 7.89"
        if line.startswith("step ") and "mean return" in line:
            curve["step"].append(int(line.split()[1].rstrip(":").replace(",", "")))
            curve["return"].append(float(line.split("episodes")[1].split()[0]))
    return curve


# How often a run's time so far is written down (its attempts.json): a session that ends (its processes killed with
# it) loses at most this much of the run's wall-clock and CPU figures, and the training since its last checkpoint.
HEARTBEAT_SECONDS = 30


def interrupted_checkpoint(log_dir: str) -> str | None:
    """The checkpoint.pt that an interrupted earlier attempt of this run left in its folder, or None."""
    found = glob.glob(os.path.join(glob.escape(log_dir), "*__*", "checkpoint.pt"))
    return found[0] if len(found) == 1 else None


def write_attempts(log_dir: str, attempts: list[dict]) -> None:
    path = os.path.join(log_dir, "attempts.json")
    with open(path + ".tmp", "w") as file:
        json.dump(attempts, file)
    os.replace(path + ".tmp", path)


def read_attempts(log_dir: str) -> list[dict]:
    """Each earlier attempt's {"started", "ended", "cpu_seconds"}, as its heartbeats last wrote them."""
    try:
        with open(os.path.join(log_dir, "attempts.json")) as file:
            return [a for a in json.load(file) if {"started", "ended", "cpu_seconds"} <= set(a)]
    except (OSError, ValueError, TypeError):
        return []


def count_attempts(attempts: list[dict]) -> int:
    """The runs of the script among the entries (an entry after a pause continues the same run)."""
    return sum(1 for one in attempts if not one.get("after_pause"))


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a running process and the children it has waited for (its evaluators) have used so far."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()  # from field 3 (state) on: utime..cstime are fields 14-17
    return sum(int(ticks) for ticks in fields[11:15]) / os.sysconf("SC_CLK_TCK")


# A gap this long between two heartbeats is the campaign stopped meanwhile (SIGSTOP, as the guide asks while
# benchmarking), not training: it is left out of the run's wall-clock as the time between attempts is
PAUSE_SECONDS = 120


class Timekeeper:
    """Writes an attempt's time so far to its run's attempts.json: every HEARTBEAT_SECONDS while the run trains (a
    thread started by run_child's while_running), and once more, measured from the outside, when it has ended. A
    pause (PAUSE_SECONDS without a heartbeat) starts a new entry, so that the pause counts as no one's time."""

    def __init__(self, log_dir: str, attempts: list[dict], clock=time.time, sleep=time.sleep):
        import threading

        self.log_dir, self.attempts, self.clock, self.sleep = log_dir, attempts, clock, sleep
        self.lock, self.ended, self.cpu_from = threading.Lock(), False, 0.0  # cpu_from: the process's CPU at the entry's start
        attempts.append({"started": clock(), "ended": clock(), "cpu_seconds": 0.0})
        write_attempts(log_dir, attempts)

    def while_running(self, process) -> None:
        import threading

        threading.Thread(target=self.beat, args=(process,), daemon=True).start()

    def beat(self, process) -> None:
        while process.poll() is None:
            with self.lock:  # not after end(): a late heartbeat would write a stale figure over the final one
                try:
                    if not self.ended:
                        now, cpu = self.clock(), process_cpu_seconds(process.pid)
                        if now - self.attempts[-1]["ended"] > PAUSE_SECONDS:  # stopped meanwhile: a pause
                            self.attempts.append({"started": now, "ended": now, "cpu_seconds": 0.0, "after_pause": True})
                            self.cpu_from = cpu
                        self.attempts[-1].update(ended=now, cpu_seconds=cpu - self.cpu_from)
                        write_attempts(self.log_dir, self.attempts)
                except (OSError, ValueError, IndexError):  # it ended meanwhile
                    pass
            self.sleep(HEARTBEAT_SECONDS)

    def end(self, cpu_seconds: float) -> None:
        """`cpu_seconds`: the whole attempt's, measured when it has ended."""
        with self.lock:
            self.ended, now = True, self.clock()
            if now - self.attempts[-1]["ended"] <= PAUSE_SECONDS:  # else it ended in a pause: its last beat stands
                self.attempts[-1]["ended"] = now
            self.attempts[-1]["cpu_seconds"] = cpu_seconds - self.cpu_from
            write_attempts(self.log_dir, self.attempts)


def run_one(cell: Cell, env_id: str, seed: int, args: CampaignArgs, cpu: str, fresh: bool = False) -> dict:
    """Train one run, test its kept checkpoints, and return its results record. A run that an earlier session left
    unfinished continues from its last checkpoint (a 300k-step SAC run takes longer than a session here); its record
    counts the time of every attempt and none of the time between them. `fresh`: start it again from scratch."""
    log_dir = os.path.join(args.runs_dir, cell.exp_name, f"{env_id}__{seed}")
    checkpoint = None if fresh else interrupted_checkpoint(log_dir)
    if checkpoint is None:
        shutil.rmtree(log_dir, ignore_errors=True)
        os.makedirs(log_dir)
    attempts = read_attempts(log_dir) if checkpoint else []
    script = os.path.join(REPO, "cleanrl", f"{cell.script}.py")
    command = [sys.executable, script, "--env-id", env_id, "--seed", str(seed), "--total-timesteps", str(cell.total_timesteps)]
    command += ["--exp-name", cell.exp_name, "--log-dir", log_dir, "--no-cuda", *cell.flags]
    # a checkpoint every ~30,000 steps (Tianshou's epoch): kept for the periodic test, and what an attempt cut short
    # by the end of a session continues from
    command += ["--checkpoint-every", str(max(1, round(TIANSHOU_EPOCH / cell.steps_per_iteration)))]
    command += ["--keep-checkpoints"] if cell.test_episodes else []
    this_attempt = [sys.executable, script, "--resume", checkpoint] if checkpoint else command  # flags: in the file
    if checkpoint:
        print(f"  continuing from {os.path.relpath(checkpoint, REPO)} (attempt {count_attempts(attempts) + 1})", flush=True)
    timekeeper = Timekeeper(log_dir, attempts)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.path.join(log_dir, "train.log"), "a" if checkpoint else "w") as log:
        code = run_child(
            this_attempt, while_running=timekeeper.while_running, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
        ).returncode  # a stop ends it too
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time beside wall-clock: a session's other work shares these 2 cores, which stretches the wall-clock only
    timekeeper.end((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
    if code != 0 and checkpoint:
        print(f"  could not continue (exit {code}; its log: {log_dir}/train.log); running it again from its start", flush=True)
        return run_one(cell, env_id, seed, args, cpu, fresh=True)
    if code != 0:
        raise RuntimeError(f"{' '.join(this_attempt)} exited {code}; its log: {log_dir}/train.log")
    (run_dir,) = [os.path.join(log_dir, name) for name in os.listdir(log_dir) if "__" in name]
    test = test_curve(run_dir, cell.test_episodes) if cell.test_episodes else {"step": [], "return": []}
    wall_seconds = sum(one["ended"] - one["started"] for one in attempts)
    pauses = [(earlier["ended"], later["started"]) for earlier, later in zip(attempts, attempts[1:])]
    record = run_record(run_dir, script=cell.script, wall_seconds=wall_seconds, cpu=cpu, test=test, pauses=pauses)
    record["cpu_seconds"] = round(sum(one["cpu_seconds"] for one in attempts), 1)
    record["attempts"] = count_attempts(attempts)
    record["command"] = " ".join(os.path.relpath(part, REPO) if part.startswith(REPO) else part for part in command)
    return record


def commit(paths: list[str], message: str) -> None:
    """Commit these paths only; a busy index (another git command at work) is retried, then given up with a line."""
    for attempt in range(5):
        added = subprocess.run(["git", "add", *paths], cwd=REPO, capture_output=True, text=True)
        done = added.returncode == 0 and (
            subprocess.run(["git", "commit", "-q", "-m", message, "--", *paths], cwd=REPO, capture_output=True).returncode == 0
        )
        if done:
            return
        time.sleep(5 * (attempt + 1))
    print(f"warning: could not commit {paths} (git busy or failing); the files are written", flush=True)


def regenerate_pages() -> list[str]:
    """Refresh every table and figure (`python -m cleanrl_utils.results`) so that what is committed shows every
    committed record; returns what to commit beside the record: docs/results/, and the pages with results markers
    unless one of them holds uncommitted edits (a commit of the page would take those too: said in a line)."""
    pages = ["README.md", *sorted(glob.glob("docs/*.md", root_dir=REPO))]  # the pages results fills by default
    pages = [page for page in pages if MARKER.search(open(os.path.join(REPO, page)).read())]
    edited = subprocess.run(["git", "diff", "--quiet", "--", *pages], cwd=REPO).returncode != 0
    command = [sys.executable, "-m", "cleanrl_utils.results"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"warning: the pages were not regenerated: {done.stderr.strip()}", flush=True)
        return []
    if edited:
        print("warning: a results page has uncommitted edits; regenerated, not committed", flush=True)
        return [DEFAULT_OUTPUT_DIR]
    return [DEFAULT_OUTPUT_DIR, *pages]


def main() -> None:
    # Ctrl-C, SIGTERM, SIGHUP: one line, exit 128 + the signal, and the run in progress ended with the campaign (trial
    # 28: SIGTERM and SIGHUP left it training on alone, and a Ctrl-C called it "failed" and exited 1). Also no
    # BrokenPipeError traceback for `--dry-run | head`.
    exit_tool_on_signals("benchmark/campaign.py")
    LEFT_BEHIND.append("finished runs keep their records; the next start continues the stopped one from its last checkpoint")
    args = tyro.cli(CampaignArgs)
    # its runs and their evaluations start in the repo's root: a relative folder is the user's, from here (trial 29:
    # time_to_score's runs went under the repo while it read the folder the user meant)
    args.runs_dir, args.results_dir = os.path.abspath(args.runs_dir), os.path.abspath(args.results_dir)
    if args.slice not in SLICES:
        sys.exit(f"error: --slice {args.slice!r} is not a slice; the slices are {', '.join(SLICES)}")
    if not 0 <= args.seeds <= MAX_SEEDS:  # trial 14: --seeds 10^9 built a plan of 3e9 runs before a line
        sys.exit(f"error: --seeds must be in 0..{MAX_SEEDS} (0: the slice's own count), got {args.seeds}")
    for flag, folder in (("--results-dir", args.results_dir), ("--runs-dir", args.runs_dir)):  # trial 14: a file
        if os.path.exists(folder) and not os.path.isdir(folder):  # passed, then failed after a run as a traceback
            sys.exit(f"error: {flag} {folder!r} is a file, not a folder")
    if not args.dry_run:
        check_writable_dir(args.results_dir, "--results-dir")
        check_writable_dir(args.runs_dir, "--runs-dir")
    seeds = range(1, (args.seeds or SEEDS[args.slice]) + 1)
    cpu = cpu_description()
    # seed by seed over the cells, so that every cell has a first seed early; `later` cells after all of that
    plan = [
        (seed, cell, env_id)
        for later in (False, True)
        for seed in seeds
        for cell in SLICES[args.slice]
        if cell.later == later
        for env_id in cell.env_ids
    ]
    slice_envs = sorted({env_id for cell in SLICES[args.slice] for env_id in cell.env_ids})
    unknown = sorted(set(args.only_env) - set(slice_envs))
    if unknown:
        sys.exit(f"error: --only-env {' '.join(unknown)} is not in slice {args.slice}; its envs are {', '.join(slice_envs)}")
    plan = [item for item in plan if not args.only_env or item[2] in args.only_env]
    todo = [item for item in plan if not os.path.exists(result_path(args.results_dir, item[1].exp_name, item[2], item[0]))]
    print(f"slice {args.slice}: {len(plan)} runs, {len(plan) - len(todo)} finished, {len(todo)} to run; cpu: {cpu}")
    if args.dry_run:
        for seed, cell, env_id in plan:
            done = os.path.exists(result_path(args.results_dir, cell.exp_name, env_id, seed))
            print(f"  {'done' if done else 'todo'}  {cell.exp_name} {env_id} seed {seed}")
        return
    failures = 0
    for number, (seed, cell, env_id) in enumerate(todo, 1):
        print(f"[{number}/{len(todo)}] {cell.exp_name} {env_id} seed {seed} ...", flush=True)
        try:
            record = run_one(cell, env_id, seed, args, cpu)
        except RuntimeError as error:
            failures += 1
            print(f"  failed: {error}", flush=True)
            continue
        path = result_path(args.results_dir, cell.exp_name, env_id, seed)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as file:
            json.dump(record, file, indent=1)
        os.replace(path + ".tmp", path)
        summary = write_summary_csv(args.results_dir)
        best = record["best_test_return"]
        print(
            f"  final {record['final_return']:.1f}, best test {'-' if best is None else f'{best:.1f}'}, "
            f"{record['wall_seconds'] / 60:.1f} min",
            flush=True,
        )
        if args.commit:
            pages = regenerate_pages() if os.path.samefile(args.results_dir, DEFAULT_RESULTS_DIR) else []
            commit([path, summary, *pages], f"results: {cell.exp_name} {env_id} seed {seed}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

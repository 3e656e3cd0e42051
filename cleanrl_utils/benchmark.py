"""Run a command over envs x seeds with a worker limit, a progress line, and no stop on failure.

    python -m cleanrl_utils.benchmark --command "python cleanrl/ppo_atari_envpool.py" \\
        --env-ids Pong-v5 Breakout-v5 --seeds 1 2 3 --workers 1

Each run is `<command> --env-id <env> --seed <seed>`, its output appended to `<log-dir>/<name>.log`
under a header line naming the sweep's start time (a second sweep into the same folder keeps the
first's output). A failed run, or one that cannot start (a missing program), does not stop the sweep;
the failures are listed with their log paths at the end and the exit code is 1. The progress line
rewrites itself on a terminal and prints plain lines elsewhere.

Ctrl-C, SIGTERM or SIGHUP to the runner is passed on, once, to each running training (which then saves its
checkpoint and exits), no further run starts, and the runner waits for them, prints what finished,
what was stopped and what never started, and exits 128 + the signal number. The trainings run in
their own session, so a terminal's Ctrl-C reaches them only through the runner: twice would make
them abort without saving. A second signal is passed on too: the trainings then abort at once.

Runs share the machine's cores: each run gets OMP_NUM_THREADS = cores / concurrent runs (at least 1),
which the scripts' `--torch-threads 0` (auto) follows. Torch's default of one thread per core in
every run makes concurrent runs spin against each other, many times slower than one thread each.
An OMP_NUM_THREADS you set yourself is kept.
"""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from cleanrl_utils.stop import SIGNALS, OutputThatOutlivesItsReader


@dataclass
class BenchmarkArgs:
    command: str
    """the command to run; `--env-id ENV --seed SEED` are appended"""
    env_ids: list[str] = field(default_factory=lambda: ["CartPole-v1"])
    """the environment ids"""
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    """the seeds"""
    workers: int = 1
    """how many runs at once (on a 2-core machine, 1 for the CPU-heavy scripts)"""
    log_dir: str = "runs/logs"
    """where each run's stdout/stderr goes (the runs' own --log-dir goes in --command)"""


@dataclass
class Run:
    env_id: str
    seed: int
    argv: list[str]
    log_path: str
    process: subprocess.Popen | None = None
    started: float = 0.0
    returncode: int | None = None
    signalled: bool = False  # was running when the runner passed on a Ctrl-C or SIGTERM


def run_label(argv: list[str]) -> str:
    """What the logs are named after: the command's --exp-name, else its .py script, else its program."""
    if "--exp-name" in argv[:-1]:
        return argv[argv.index("--exp-name") + 1]
    scripts = [arg for arg in argv if arg.endswith(".py")]
    return os.path.splitext(os.path.basename(scripts[0] if scripts else argv[0]))[0]


def command_argv(command: str) -> list[str]:
    """`command` split as a shell would (no shell runs it); one line and exit if it is empty or unparsable."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        sys.exit(f"error: --command {command!r} cannot be parsed ({error})")
    if not argv:
        sys.exit('error: --command is empty; give the program to run, e.g. --command ".venv/bin/python cleanrl/ppo.py"')
    # each run appends its own --env-id and --seed, which win: one in the command would be dropped without a word
    for flag, instead in (("--seed", "--seeds"), ("--env-id", "--env-ids")):
        if any(arg == flag or arg.startswith(flag + "=") for arg in argv):
            sys.exit(f"error: --command holds {flag}, which each run sets itself: give it as {instead} instead")
    return argv


def check_interpreter(argv: list[str]) -> None:
    """The command's program must exist, and a Python interpreter (`python ...`, `.venv/bin/python ...`) must be able
    to import this project: a mistyped program, or a bare `python` outside the activated environment, fails every run,
    each in its own log. Checked once, before any run, in one line."""
    program = shutil.which(argv[0])
    if program is None:  # trial 29: `--command "pyhton ..."` was found out only run by run, each exit 127
        if os.sep not in argv[0]:
            why = "no such program on PATH"
        else:
            why = "not an executable file" if os.path.isfile(argv[0]) else "no such file"
        sys.exit(f"error: --command's program {argv[0]!r} cannot be started ({why})")
    if not os.path.basename(argv[0]).startswith("python"):
        return
    try:
        # from a neutral folder: a script's own folder (cleanrl/), not the current one, is on its import path
        check = [os.path.abspath(program), "-c", "import cleanrl_utils"]
        found = subprocess.run(check, capture_output=True, timeout=60, cwd=tempfile.gettempdir()).returncode == 0
    except OSError as error:
        sys.exit(f"error: --command's program {argv[0]!r} cannot be started ({error.strerror or error})")
    if not found:
        ours = os.path.relpath(sys.executable)
        ours = sys.executable if ours.startswith(os.pardir) else ours  # .venv/bin/python from the repository
        sys.exit(
            f"error: --command's interpreter {argv[0]!r} cannot import cleanrl_utils (it is not this project's "
            f"environment); give this environment's interpreter instead, e.g. {ours}"
        )
    script = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
    if script is not None and script.endswith(".py") and not os.path.isfile(script):  # trial 15: each run failed
        sys.exit(f"error: --command's script {script!r} does not exist (from {os.getcwd()})")


def check_no_repeats(flag: str, values: list) -> None:
    """A repeated env id or seed would train the same run twice at once, both appending to one log (and plot
    would keep only one of them): one line and exit, before anything runs or is created."""
    for value in values:
        count = values.count(value)
        if count > 1:
            times = "twice" if count == 2 else f"{count} times"
            sys.exit(f"error: {flag} lists {value} {times}; each env id and seed runs once")


def plan_runs(command: str, env_ids: list[str], seeds: list[int], log_dir: str) -> list[Run]:
    argv = command_argv(command)
    label = run_label(argv)
    return [
        Run(
            env_id,
            seed,
            argv + ["--env-id", env_id, "--seed", str(seed)],
            os.path.join(log_dir, f"{label}__{env_id}__{seed}.log"),
        )
        for env_id in env_ids
        for seed in seeds
    ]


class Progress:
    """One line that rewrites itself on a terminal; plain lines (only on change) elsewhere."""

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.is_tty = stream.isatty()
        self.last = ""

    def update(self, text: str, state: object = None) -> None:
        """Show `text`; off a terminal only when `state` (default: the text) changed, so a clock in
        the text does not print a line per poll into a log file."""
        state = text if state is None else state
        if self.is_tty:
            self.stream.write("\r\033[K" + text)
            self.stream.flush()
        elif state != self.last:
            self.stream.write(text + "\n")
            self.stream.flush()
        self.last = state

    def event(self, text: str) -> None:
        """A line that stays, printed above the status line."""
        self.stream.write(("\r\033[K" if self.is_tty else "") + text + "\n")
        self.stream.flush()
        self.last = ""

    def close(self) -> None:
        if self.is_tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


def threads_per_run(workers: int, num_runs: int, environ=os.environ) -> tuple[str, str]:
    """(OMP_NUM_THREADS for each run, why): the user's own if set, else the cores this process may
    use split between the runs that run at once (at least 1 each)."""
    if "OMP_NUM_THREADS" in environ:
        return environ["OMP_NUM_THREADS"], "as set in your environment"
    cores, concurrent = len(os.sched_getaffinity(0)), max(1, min(workers, num_runs))
    return str(max(1, cores // concurrent)), f"{cores} cores / {concurrent} concurrent run{'s' if concurrent > 1 else ''}"


class PassOnSignals:
    """While a sweep runs: Ctrl-C, SIGTERM and SIGHUP (the terminal closed) are recorded (never raised: no
    KeyboardInterrupt traceback), for run_all to pass on to the running trainings, which stop on each the same way.
    `restore()` puts the previous handlers back. (Trial 28: SIGHUP killed the runner and orphaned its training.)"""

    def __init__(self):
        self.received: list[int] = []  # not yet passed on
        self.seen: list[int] = []  # every one, in order
        self.previous = {signum: signal.signal(signum, self._record) for signum in SIGNALS}

    def _record(self, signum, frame) -> None:
        self.received.append(signum)
        self.seen.append(signum)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def log_header(run: Run) -> str:
    return f"==== {time.strftime('%Y-%m-%d %H:%M:%S')}: {shlex.join(run.argv)}\n"


def start(run: Run, env: dict | None) -> bool:
    """Start `run` with its output appended to its log file, after a header (an earlier sweep's log is kept). A
    program that cannot start (missing, not executable) is a failed run (exit 127, as a shell gives), its
    reason in the log: the sweep goes on. The run gets its own session: a terminal's Ctrl-C reaches it only
    through the runner, once."""
    os.makedirs(os.path.dirname(run.log_path) or ".", exist_ok=True)
    run.started = time.time()
    with open(run.log_path, "a") as log:
        log.write(log_header(run))
        log.flush()  # before the child's own writes to the same file
        try:
            run.process = subprocess.Popen(run.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as error:
            log.write(f"cannot start {run.argv[0]!r}: {type(error).__name__}: {error.strerror}\n")
            run.returncode = 127
            return False
    return True


def pass_on(signals: list[int], running: list[Run], progress: Progress) -> None:
    """Send each signal received to every running training; none starts after the first."""
    while signals:
        signum = signals.pop(0)
        for run in running:
            run.signalled = True
            run.process.send_signal(signum)
        progress.event(f"{signal.Signals(signum).name}: passed on to {len(running)} running run(s), waiting for them")


def run_all(
    runs: list[Run],
    workers: int,
    poll_seconds: float = 0.2,
    stream=sys.stdout,
    env: dict | None = None,
    signals: PassOnSignals | None = None,
) -> list[Run]:
    """Run everything with at most `workers` at once, with environment `env` (None: this process's);
    return the failed runs. With `signals`, a Ctrl-C or SIGTERM is passed on to the running runs, the
    pending ones are dropped (left with no process), and it returns once the running ones have exited."""
    pending, running, done = list(runs), [], []
    progress = Progress(stream)
    start_time = time.time()
    while pending or running:
        if signals is not None and signals.received:
            pending.clear()
            pass_on(signals.received, running, progress)
        while pending and len(running) < workers:
            run = pending.pop(0)
            if start(run, env):
                running.append(run)
            else:
                done.append(run)
                progress.event(f"FAILED {run.env_id} seed {run.seed} (could not start {run.argv[0]!r}), log: {run.log_path}")
        for run in list(running):
            if run.process.poll() is not None:
                run.returncode = run.process.returncode
                running.remove(run)
                done.append(run)
                if run.signalled:  # the runner passed a Ctrl-C or SIGTERM on to it: stopped, not failed
                    progress.event(f"stopped {run.env_id} seed {run.seed} (exit {run.returncode}), log: {run.log_path}")
                elif run.returncode != 0:
                    progress.event(f"FAILED {run.env_id} seed {run.seed} (exit {run.returncode}), log: {run.log_path}")
        stopped = sum(r.signalled for r in done)
        failed = sum(r.returncode != 0 and not r.signalled for r in done)
        now_running = ", ".join(f"{r.env_id}/{r.seed}" for r in running)
        counts = f"{len(done) - stopped}/{len(runs)} done, {failed} failed" + (f", {stopped} stopped" if stopped else "")
        progress.update(
            f"[{counts}, {time.time() - start_time:.0f}s] running: {now_running or '-'}",
            state=(len(done), failed, now_running),
        )
        if pending or running:
            time.sleep(poll_seconds)
    progress.close()
    return [r for r in done if r.returncode != 0]


def stopped_summary(runs: list[Run], signum: int) -> list[str]:
    """What a stopped sweep did: finished runs, runs the signal stopped (exit 0: they saved a checkpoint), runs
    that failed, and runs that never started."""
    finished = [r for r in runs if r.returncode == 0 and not r.signalled]
    stopped = [r for r in runs if r.signalled]
    failed = [r for r in runs if r.returncode not in (0, None) and not r.signalled]
    not_started = [r for r in runs if r.returncode is None]
    lines = [
        f"sweep stopped by {signal.Signals(signum).name}: {len(finished)} of {len(runs)} runs finished, "
        f"{len(stopped)} stopped, {len(failed)} failed, {len(not_started)} not started"
    ]
    lines += [f"  stopped {r.env_id} seed {r.seed} (exit {r.returncode}), log {r.log_path}" for r in stopped]
    lines += [f"  failed {r.env_id} seed {r.seed} (exit {r.returncode}), log {r.log_path}" for r in failed]
    lines += [f"  not started {r.env_id} seed {r.seed}" for r in not_started]
    return lines


def main() -> None:
    import tyro  # here, not at the top: a Ctrl-C while it loads is caught by run_from_command_line

    from cleanrl_utils.run import check_writable_dir

    args = tyro.cli(BenchmarkArgs, prog="python -m cleanrl_utils.benchmark")
    if args.workers <= 0:
        sys.exit(f"error: --workers must be a positive integer, got {args.workers}")
    if not args.env_ids or not args.seeds:
        sys.exit("error: need at least one --env-ids and one --seeds value")
    if empty := [env_id for env_id in args.env_ids if not env_id.strip()]:  # trial 15: each run failed on its own
        sys.exit(f"error: --env-ids holds an empty id ({empty[0]!r}); give ids such as CartPole-v1")
    check_no_repeats("--env-ids", args.env_ids)
    check_no_repeats("--seeds", args.seeds)
    if bad := [seed for seed in args.seeds if not 0 <= seed <= 2**31 - 1]:  # trial 16: each run failed on its own
        sys.exit(f"error: --seeds must be in 0..2,147,483,647 (the scripts' --seed range), got {bad[0]}")
    runs = plan_runs(args.command, args.env_ids, args.seeds, args.log_dir)
    check_interpreter(runs[0].argv)
    check_writable_dir(args.log_dir, "--log-dir")
    threads, why = threads_per_run(args.workers, len(runs))
    print(f"each run gets OMP_NUM_THREADS={threads} ({why})", flush=True)
    # after SIGHUP the terminal is gone: the runner still waits for its trainings and writes their logs
    sys.stdout, sys.stderr = OutputThatOutlivesItsReader(sys.stdout), OutputThatOutlivesItsReader(sys.stderr)
    signals = PassOnSignals()
    try:
        failed = run_all(runs, args.workers, env={**os.environ, "OMP_NUM_THREADS": threads}, signals=signals)
    finally:
        signals.restore()
    if signals.seen:
        print("\n".join(stopped_summary(runs, signals.seen[0])), flush=True)
        sys.exit(128 + signals.seen[0])
    if failed:
        print(f"{len(failed)} of {len(runs)} runs failed:")
        for run in failed:
            how = "could not start" if run.process is None else f"exit {run.returncode}"
            print(f"  {run.env_id} seed {run.seed}: {how}, log {run.log_path}")
        sys.exit(1)
    print(f"all {len(runs)} runs finished; logs in {args.log_dir}")


def run_from_command_line() -> None:
    """main(), with a Ctrl-C that lands before the sweep starts (while tyro and the plan load, before the runner
    takes the signals over) said in one line, exit 130, instead of a KeyboardInterrupt traceback."""
    try:
        main()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C) before any run started; nothing ran", file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    run_from_command_line()

"""A training run's folder, its tensorboard/wandb writer, its progress line, its divergence exit and
its CPU thread count: the plumbing every script shares, one small function or class each.
"""

import os
import shlex
import sys
import time

import numpy as np

from cleanrl_utils.stop import (
    FRESH_LOG_DIRS_MADE,
    FRESH_RUN_FOLDER,
    LOOP_PROGRESS,
    RESUMED_AT_ITS_END,
    RUN_FOLDER_LOCKS,
    folders_missing,
    late_stop_line,
    remove_fresh_run_folder,
)


def run_folder(args, checkpoint_path: str | None = None) -> tuple[str, str]:
    """(run_name, absolute run_dir), the folder made, its path printed; or one line and exit.

    A fresh run gets `<log_dir>/<env_id>__<exp_name>__<seed>__<unix time>`, with `-2`, `-3`, ...
    appended when that folder exists already (two launches in the same second): a run never writes
    into another run's folder. A namespaced env id (`phys2d/CartPole-v1`) becomes one folder name
    (`phys2d-CartPole-v1`). A resumed run continues in its checkpoint's own folder, wherever the
    command is started from."""
    if checkpoint_path is not None:
        run_dir = os.path.dirname(os.path.abspath(checkpoint_path))
        check_resumable_dir(run_dir, checkpoint_path)
        check_resumes_the_latest(run_dir, checkpoint_path)
        lock_run_folder(run_dir)
        print(f"run folder: {run_dir}", flush=True)
        return os.path.basename(run_dir), run_dir
    check_exp_name(args.exp_name)
    check_not_empty(args.log_dir, "--log-dir")
    base = f"{args.env_id.replace('/', '-')}__{args.exp_name}__{args.seed}__{int(time.time())}"
    log_dir = os.path.abspath(args.log_dir)
    missing = folders_missing(log_dir)  # a stop before training removes them with the run folder
    try:
        os.makedirs(log_dir, exist_ok=True)
        FRESH_LOG_DIRS_MADE[:] = missing
        for attempt in range(1, 1000):
            run_name = base if attempt == 1 else f"{base}-{attempt}"
            run_dir = os.path.join(log_dir, run_name)
            try:
                os.mkdir(run_dir)  # atomic: of two launches in the same second, one gets the name
            except FileExistsError:
                continue
            FRESH_RUN_FOLDER.append(run_dir)  # a signal before training starts removes it again
            lock_run_folder(run_dir)  # a --resume of this run's checkpoint while it trains is refused
            print(f"run folder: {run_dir}", flush=True)
            return run_name, run_dir
    except OSError as error:
        dangling = next((path for path in missing if os.path.islink(path)), None)  # trial 19: "File exists"
        if dangling is not None:
            sys.exit(
                f"error: --log-dir {args.log_dir!r}: {dangling} is a link to {os.readlink(dangling)!r}, which does not "
                "exist; make that folder, or give another --log-dir"
            )
        sys.exit(f"error: --log-dir {args.log_dir!r} cannot hold a run folder ({type(error).__name__}: {error.strerror})")
    sys.exit(f"error: --log-dir {args.log_dir!r} already holds runs {base} to {base}-999")


def lock_run_folder(run_dir: str) -> None:
    """One process writes a run folder at a time (trial 19, W4: two resumes of one checkpoint both ran, each
    overwriting the other's checkpoint and model, and the folder logged every step twice). An flock on the folder
    itself: the kernel releases it when the process ends, however it ends (kill -9 too), so no stale lock is left, and
    nothing is written into the folder. A file system without flock is left unlocked."""
    import fcntl

    if run_dir in RUN_FOLDER_LOCKS:
        return
    try:
        descriptor = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        holder = run_folder_holder(run_dir)
        sys.exit(
            f"error: the run folder {run_dir} is being written by another process{holder}: wait for it to end, or "
            "branch from a copy of its checkpoint in a folder of its own"
        )
    except OSError:
        os.close(descriptor)
        return
    RUN_FOLDER_LOCKS[run_dir] = descriptor


def run_folder_holder(run_dir: str) -> str:
    """' (pid N: its command line)' of the process holding the folder's flock, from /proc/locks; '' if not found."""
    try:
        status = os.stat(run_dir)
        where = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
        with open("/proc/locks") as f:  # "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF"
            pids = [fields[4] for fields in map(str.split, f) if fields[1:2] == ["FLOCK"] and fields[5] == where]
        with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
            command = " ".join(f.read().decode(errors="replace").replace("\0", " ").split())
    except (OSError, IndexError):
        return ""
    return f" (pid {pids[0]}: {command})"  # whole: its arguments tell which run it is (trial 20: cut at 160)


# The longest file name most file systems take (ext4, xfs, btrfs: 255 bytes); the run folder's time stamp and
# suffix take up to 16 of them.
MAX_EXP_NAME_BYTES = 200


def check_exp_name(exp_name: str) -> None:
    """--exp-name becomes part of the run folder's name: not empty, no path separator, not too long. Without this,
    a bad name failed as "--log-dir cannot hold a run folder", blaming the wrong flag, and "" was accepted."""
    if not exp_name.strip():
        sys.exit(f"error: --exp-name {exp_name!r} is empty; give a name for the run folders, e.g. --exp-name baseline")
    if "/" in exp_name or "\0" in exp_name:
        suggestion = exp_name.replace("/", "-").replace("\0", "")
        sys.exit(f"error: --exp-name {exp_name!r} holds a '/' or NUL, which a folder name cannot hold; e.g. {suggestion!r}")
    if len(exp_name.encode()) > MAX_EXP_NAME_BYTES:
        sys.exit(
            f"error: --exp-name is {len(exp_name.encode())} bytes long; a folder name allows at most {MAX_EXP_NAME_BYTES}"
        )


def check_resumable_dir(run_dir: str, checkpoint_path: str) -> None:
    """A resumed run writes into its checkpoint's folder: one line, before anything is written, if it cannot."""
    probe = os.path.join(run_dir, f".write-test-{os.getpid()}")
    try:
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        sys.exit(
            f"error: --resume {checkpoint_path!r} is in a folder this run cannot write to ({type(error).__name__}: "
            f"{error.strerror}); copy the run folder somewhere writable and resume from the copy"
        )


def check_resumes_the_latest(run_dir: str, checkpoint_path: str, saved_step: int | None = None) -> None:
    """A resumed run continues in its checkpoint's folder: it rewrites checkpoint.<ext>, keeps new checkpoints and
    drops the logged scalars past its step. From an older kept checkpoint of a run that went on, that would destroy
    the newer lineage and mix the two: refuse in one line that says how to branch instead (a copy in a new folder).
    The step is the kept file's name; for another name (checkpoint.<ext> rolled back by hand to an older kept copy,
    trial 13, Q6), `saved_step`, the step the checkpoint records, or else the step of a kept file of equal bytes."""
    from cleanrl_utils.checkpoint import kept_checkpoint_step

    kept = kept_checkpoint_step(os.path.basename(checkpoint_path))
    if kept is None:
        ext = os.path.splitext(checkpoint_path)[1]
        all_kept = sorted((k[0], name) for name in os.listdir(run_dir) if (k := kept_checkpoint_step(name)) and k[1] == ext)
        if saved_step is None:  # no step at hand: the kept file it is a copy of, if any
            saved_step = next(
                (step for step, name in all_kept if same_checkpoint(checkpoint_path, os.path.join(run_dir, name))), None
            )
        newer = [name for step, name in all_kept if saved_step is not None and step > saved_step]
        if newer:
            later = ", ".join(newer) if len(newer) <= 3 else f"{len(newer)} later checkpoints, up to {newer[-1]}"
            refuse_to_overwrite(
                checkpoint_path,
                run_dir,
                saved_step,
                ext,
                f"holds step {saved_step:,}, older than the kept checkpoints of this run ({later})",
            )
        return
    step, ext = kept
    newer = sorted(
        name for name in os.listdir(run_dir) if (other := kept_checkpoint_step(name)) and other[1] == ext and other[0] > step
    )
    latest = os.path.join(run_dir, f"checkpoint{ext}")
    # checkpoint.<ext> counts when it is another state than both the refused file and the newest kept one (it is
    # often a link to that one: the same step, not a later one)
    if os.path.exists(latest) and not same_checkpoint(latest, checkpoint_path):
        if not (newer and same_checkpoint(latest, os.path.join(run_dir, newer[-1]))):
            newer.append(f"checkpoint{ext}")
    if newer:
        if len(newer) > 3:  # a long run keeps thousands: the line names how many and the latest
            newer = [f"{len(newer)} later checkpoints, up to {newer[-2] if newer[-1] == f'checkpoint{ext}' else newer[-1]}"]
        refuse_to_overwrite(
            checkpoint_path, run_dir, step, ext, f"is an older checkpoint of a run that went on ({', '.join(newer)})"
        )


def refuse_to_overwrite(checkpoint_path: str, run_dir: str, step: int, ext: str, why: str) -> None:
    # shell-quoted: the commands are pasted into a shell, and a path may hold spaces or quotes (trial 19)
    branch = f"{run_dir}-from-{step}"
    target = os.path.join(branch, f"checkpoint{ext}")
    sys.exit(
        f"error: --resume {checkpoint_path!r} {why}; resuming it in place would overwrite that lineage. To branch from "
        f"it: mkdir {shlex.quote(branch)} && cp {shlex.quote(checkpoint_path)} {shlex.quote(target)}, then --resume "
        f"{shlex.quote(target)}"
    )


def same_checkpoint(a: str, b: str) -> bool:
    """The same file (a kept checkpoint is a hard link to checkpoint.<ext> when saved), or a byte-equal copy (the
    fallback where the file system has no hard links)."""
    import filecmp

    return os.path.samefile(a, b) or (os.path.getsize(a) == os.path.getsize(b) and filecmp.cmp(a, b, shallow=False))


def check_not_empty(path: str, flag: str) -> None:
    """An empty folder name is refused, not read as the current folder (trials 13 and 14: `--log-dir ''` put the run
    folder wherever the command was started)."""
    if not path.strip():
        sys.exit(f"error: {flag} {path!r} is empty: name a folder (use . for the current one)")


def check_writable_dir(path: str, flag: str, keep: bool = True) -> None:
    """Exit with one line unless `path` is (or can be made) a folder this process can write into. keep=False: the
    folders made for the check are removed again (a tool that may still refuse its input creates its output folder
    only when it writes: a refused command leaves nothing behind)."""
    check_not_empty(path, flag)
    missing = folders_missing(path)
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write-test-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        sys.exit(f"error: {flag} {path!r} is not a writable folder ({type(error).__name__}: {error.strerror})")
    finally:
        for folder in missing if not keep else ():  # deepest first
            if os.path.isdir(folder):
                os.rmdir(folder)


def make_writer(args, run_name: str, run_dir: str, resumed_step: int | None = None):
    """A tensorboard SummaryWriter on `run_dir` (mirrored to Weights and Biases with --track), the
    hyperparameters written as a text table. On resume, events the interrupted run logged after its
    checkpoint are dropped (purge_step), so no step is logged twice. A run resumed at exactly its end trains
    nothing and gets a writer that writes nothing: no events file, no Weights and Biases run."""
    if os.path.abspath(run_dir) in RESUMED_AT_ITS_END:
        return WriterOfNothing()
    if args.track:
        import wandb

        # A login with no network answer retried for minutes (trial 16): give up after WANDB_INIT_TIMEOUT seconds
        # (30 unless set) with one line. wandb's own files go into the run folder, not the current one.
        timeout = float(os.environ.get("WANDB_INIT_TIMEOUT", 30))
        started = time.monotonic()
        try:
            wandb.init(
                project=args.wandb_project_name,
                entity=args.wandb_entity,
                sync_tensorboard=True,
                config=vars(args),
                name=run_name,
                save_code=True,
                dir=os.environ.get("WANDB_DIR", run_dir),  # a WANDB_DIR of the user's own wins
                settings=wandb.Settings(init_timeout=timeout),
            )
        except Exception as error:  # wandb's UsageError (no login), CommError (no network), ...: before any training
            first_line = " ".join(str(error).split())[:200]
            # "within 30 s" only where it waited that long: no login fails at once (trial 17)
            waited = f" within {timeout:g} s" if time.monotonic() - started >= 0.9 * timeout else ""
            sys.exit(
                f"error: --track could not start Weights and Biases{waited} ({type(error).__name__}: "
                f"{first_line}){remove_fresh_run_folder()}: run `wandb login`, set WANDB_API_KEY, raise "
                "WANDB_INIT_TIMEOUT on a slow network, or set WANDB_MODE=offline to log locally (or leave out --track)"
            )
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(run_dir, purge_step=None if resumed_step is None else resumed_step + 1)
    # the script's file first: two scripts run under one --exp-name are plotted apart (cleanrl_utils.plot, trial 20)
    rows = {"script": os.path.basename(sys.argv[0]), **vars(args)}
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in rows.items()])),
    )
    return writer


class WriterOfNothing:
    """make_writer's writer for a run with no iteration left: the calls a script makes, and nothing written."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def add_text(self, *args, **kwargs) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


# The scalar every script writes once, at its normal end: cleanrl_utils.plot reads it (see record_end_step).
END_STEP_TAG = "charts/end_global_step"


def record_end_step(writer, global_step: int) -> None:
    """At the normal end of a run (all iterations done, or stopped by Ctrl-C/SIGTERM after its checkpoint): the
    global step it reached, logged at that step. Scripts that log every 1,000 steps (the replay-buffer ones) log their last
    scalar short of the planned length, so only this record tells cleanrl_utils.plot that a run finished; a
    stopped run records the step it stopped at, short of the planned length, and stays unfinished."""
    writer.add_scalar(END_STEP_TAG, global_step, global_step)
    late = late_stop_line()
    if late is not None:
        print(late, flush=True)


def torch_threads(requested: int) -> int:
    """The torch intra-op thread count to use: `requested` if > 0; else (0, auto) OMP_NUM_THREADS when
    set (cleanrl_utils.benchmark sets it to cores / workers for each run it starts), else the cores
    this process may use. Two processes that both spin one OpenMP thread per core on shared cores
    slow each other down many times over, so concurrent runs must split the cores."""
    if requested > 0:
        return requested
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    return len(os.sched_getaffinity(0))


class ProgressLine:
    """The progress line and the SPS clock of a run. On a terminal, one line rewritten in place at most once a second; elsewhere (CI, log files,
    pipes) a plain line every 10 s. The last line (`final=True`) is always printed and ends with a
    newline. `episode_word` names what `returns` counts ("games" for Atari, else "episodes"). A resumed run counts
    the episodes since the resume, and its line says so: `episodes_before` are those its checkpoint gave back
    (ppo.py's and dqn.py's sync envs keep their returns; trial 21: they were counted as since the resume)."""

    def __init__(
        self, start_step: int, total_steps: int, episode_word: str = "episodes", stream=None, episodes_before: int = 0
    ):
        self.start_step, self.start_time, self.episodes_before = start_step, time.time(), episodes_before
        self.total_steps = total_steps
        self.episode_word = episode_word if start_step == 0 else f"{episode_word} since resume"
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self.last_print = 0.0
        self.open_line = False

    def sps(self, global_step: int) -> int:
        """Env steps per second since this run (or resumed run) started training."""
        return int((global_step - self.start_step) / max(time.time() - self.start_time, 1e-9))

    def show(self, global_step: int, sps: int, returns: list[float], final: bool = False) -> None:
        now = time.time()
        if not final and now - self.last_print <= (1 if self.live else 10):
            return
        self.last_print = now
        recent = returns[-20:]
        mean_return = f"{np.mean(recent):.2f}" if recent else "n/a"
        eta = max(self.total_steps - global_step, 0) / max(sps, 1)
        line = (
            f"step {global_step:,}/{self.total_steps:,}  SPS {sps:,}  return(last {len(recent)}) {mean_return}  "
            f"{self.episode_word} {len(returns) - self.episodes_before:,}  ETA {eta / 60:.1f} min"
        )
        if self.live:  # "\r\x1b[K": back to column 0 and clear the line, so it is rewritten in place
            line = f"\r\x1b[K{line}"
        end = "\n" if final or not self.live else ""
        print(line, end=end, file=self.stream, flush=True)
        self.open_line = self.live and not end

    def end_line(self) -> None:
        """Before printing anything else under a live line."""
        if self.open_line:
            print(file=self.stream, flush=True)
            self.open_line = False


def torch_all_finite(model, loss=None) -> bool:
    """Whether `loss` (if given) and every parameter of the torch `model` are finite, in one host sync: a
    script calls it where it logs and before each checkpoint, not every step."""
    import torch

    checks = [torch.isfinite(p).all() for p in model.parameters()]
    if loss is not None:
        checks.append(torch.isfinite(loss).all())
    return bool(torch.stack(checks).all())


def exit_if_diverged(
    finite: bool,
    *,
    iteration: int,
    global_step: int,
    checkpoint_path: str,
    resumed_from: str | None,
    writer,
    progress,
    flag: str = "--learning-rate",
) -> None:
    """A diverged run (non-finite loss or parameters) stops here, before any checkpoint could be
    overwritten with its state: the last good checkpoint, if any, stays as it was. The line names it
    (the run folder's checkpoint, else the file the run was resumed from) and the flag to lower (`flag`)."""
    if finite:
        return
    writer.close()
    progress.end_line()
    if os.path.exists(checkpoint_path):
        saved = f"last good checkpoint: {checkpoint_path}"
    elif resumed_from:
        saved = f"last good checkpoint: {os.path.abspath(resumed_from)}"
    else:
        saved = "no checkpoint was written"
    sys.exit(
        f"error: non-finite loss or parameters at iteration {iteration} (global step {global_step:,}); {saved}; "
        f"try a lower {flag}"
    )


def checkpoint_due(iteration: int, num_iterations: int, every: int, stopping: bool) -> bool:
    """Every `every` iterations (0: never on a schedule), at a requested stop, and at the end. Notes the end for the
    lines of a run folder moved, deleted or left after a failure (stop.LOOP_PROGRESS): called once per iteration."""
    LOOP_PROGRESS[:] = [iteration, num_iterations]
    return (every > 0 and iteration % every == 0) or stopping or iteration == num_iterations


class XlaCompilations:
    """Counts XLA compilations (jax.monitoring's backend-compile events) so a JAX script can show that
    its jitted iteration compiled in the first iteration only: its inputs keep their shapes and dtypes
    (a resumed run's too, through restore_like). Call `first_iteration_done()` after the first
    iteration; `summary(...)` is the line to print at the end (None if no iteration ran)."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        import jax

        self.durations: list[float] = []
        self.in_first: int | None = None
        jax.monitoring.register_event_duration_secs_listener(
            lambda event, duration, **_: self.durations.append(duration) if event == self.EVENT else None
        )

    def first_iteration_done(self) -> None:
        if self.in_first is None:
            self.in_first = len(self.durations)

    def summary(self, start_iteration: int, last_iteration: int) -> str | None:
        if self.in_first is None:
            return None
        first, later = self.durations[: self.in_first], self.durations[self.in_first :]
        return (
            f"XLA compilations: {len(first)} in iteration {start_iteration} ({sum(first):.1f} s), "
            f"{len(later)} in the {last_iteration - start_iteration} later iterations"
        )

"""Ctrl-C and SIGTERM for a training run: what each does, at every moment of the run.

- During start-up (the imports, env and network set-up, loading a checkpoint) either signal exits
  at once with one line: nothing has been trained yet, so nothing is lost.
- Once training runs (`StopAfterIteration`), the first signal asks the run to stop after the current
  iteration: the script then writes its checkpoint and exits 0. SIGTERM is what schedulers send
  (SLURM, `docker stop`, Kubernetes, `timeout`), so it is treated as Ctrl-C is. A second signal
  aborts at once without saving; the last checkpoint stays valid (checkpoints are written whole,
  then renamed), and a save it interrupts leaves no half-written file behind. A signal within
  SAME_STOP_SECONDS of the first is that same stop delivered twice, not a second one: a launcher
  in the terminal's process group (`timeout --foreground`, torchrun, a shell script that traps
  and forwards) passes on the Ctrl-C its child already got, and one Ctrl-C aborted the run.

The handlers never raise. An exception raised from a signal handler lands in whatever Python code
runs at that moment, and inside a garbage-collection callback (JAX registers one, and EnvPool imports
JAX) Python prints "Exception ignored" and carries on as if nothing happened. So the handlers act
through os._exit or a flag, never through KeyboardInterrupt. They write with os.write: a print()
interrupted in the middle of another print() raises "reentrant call".
"""

import atexit
import contextlib
import errno
import itertools
import os
import re
import shlex
import signal
import sys
import time

# SIGHUP: the terminal closed or the ssh connection dropped (trial 19, W7: the run died at once, no checkpoint)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
# The half-written files of the saves in progress (cleanrl_utils.checkpoint.write_atomically): a second signal during a
# save removes them, each as large as a checkpoint, and a run never resumed would otherwise keep them forever.
SAVES_IN_PROGRESS: set[str] = set()
# Every file cleanrl_utils.checkpoint.write_atomically completed, in order: a second signal that lands after the first
# one's checkpoint was written (while the last evaluation video is filmed, say) says that checkpoint is whole.
COMPLETED_SAVES: list[str] = []
# A second signal this soon after the first is the first one forwarded by a launcher (trial 11, N6: `timeout
# --foreground` forwards the terminal's Ctrl-C within milliseconds); a person's second Ctrl-C comes later.
SAME_STOP_SECONDS = 1.0
# What a command-line tool leaves behind if a signal stops it now, said in its one line (exit_tool_on_signals).
LEFT_BEHIND: list[str] = []
# The folder of the evaluation video being filmed now (cleanrl_utils.video.VideoJobs), if any. Its evaluator runs in
# its own session and finishes its video after a second Ctrl-C stops training: that line says so (trial 18).
STILL_FILMING: list[str] = []
# [iteration, number of iterations] of the training loop's latest iteration (cleanrl_utils.run.checkpoint_due notes
# it), empty before the first. A run folder moved after the last one is not offered a --resume that would only say the
# run already ran its iterations (trial 23, A2); a fresh folder that logged an iteration is not removed (A4).
LOOP_PROGRESS: list[int] = []
# The run folder of a run resumed at exactly its end (cleanrl_utils.checkpoint.say_resumed): it trains nothing, so
# cleanrl_utils.run.make_writer gives it a writer that writes nothing (trial 26, K14: a new events file held only a
# repeat of the hyperparameters and of the end step; a shorter --total-timesteps already wrote nothing).
RESUMED_AT_ITS_END: list[str] = []


def trained_all_iterations() -> bool:
    return bool(LOOP_PROGRESS) and LOOP_PROGRESS[0] >= LOOP_PROGRESS[1]


# The run folder this process made for a fresh run (cleanrl_utils.run.run_folder): a signal during start-up removes
# it, since nothing was trained into it, and so does a refusal of memory before any checkpoint was saved (trial 15, S5: each stop between "run folder:" and training left an empty
# folder, which --resume then could not use).
FRESH_RUN_FOLDER: list[str] = []
# The folders above it that run_folder made for it (a new --log-dir), deepest first: removed with it where empty.
FRESH_LOG_DIRS_MADE: list[str] = []
# The signal of a stop asked for during training and not yet honoured by the loop (stopped_line): one landing in the
# last iteration, after the loop read its stop flag, met a run that then finished as planned, and nothing said so
# after the "stopping after this iteration" line (trial 20). cleanrl_utils.run.record_end_step says it.
PENDING_STOP: list[int] = []
# A benchmark tool's child processes (the training runs it times, cleanrl_utils.stop.run_child) and its scratch folders:
# a signal's exit ends the one and removes the other (trial 21, Y4: a SIGTERM to benchmark/speed_by_machine.py left
# its run training on alone, and its temporary folder behind; a Ctrl-C printed a KeyboardInterrupt traceback).
CHILDREN: list = []
SCRATCH_FOLDERS: list[str] = []
# The run folders this process writes, each an open descriptor holding its flock until the process ends
# (cleanrl_utils.run.lock_run_folder). The descriptor follows the folder: where it was moved, or that it was deleted.
RUN_FOLDER_LOCKS: dict[str, int] = {}
# The names a script gives its checkpoint in its run folder (torch scripts; the JAX twins)
CHECKPOINT_NAMES = ("checkpoint.pt", "checkpoint.msgpack")


def is_checkpoint_file(path: str) -> bool:
    """checkpoint.pt/.msgpack, or one kept under its step (checkpoint-000307200.pt): a file a run resumes from. A
    `.cleanrl_model` (weights and args only) is not one."""
    return re.fullmatch(r"checkpoint(-\d+)?\.(pt|msgpack)", os.path.basename(path)) is not None


def _say(message: str) -> None:
    try:
        os.write(2, f"\n{message}\n".encode())  # "\n" first: ends a live progress line
    except OSError:  # no terminal left to say it on (after SIGHUP: EIO); the stop itself goes on
        pass


def _exit_now(code: int) -> None:
    """os._exit, after killing this process's multiprocessing children (Gymnasium's AsyncVectorEnv workers): left
    behind, each would find its pipe to the main process broken and print a traceback. A Ctrl-C that lands while
    `multiprocessing` itself is being imported finds it partially initialised, with no `active_children` yet, and no
    child started from it: nothing to kill then (trial 28: an AttributeError traceback and exit 1 at start-up)."""
    try:
        active_children = getattr(sys.modules.get("multiprocessing"), "active_children", None)
        for child in active_children() if active_children is not None else ():
            child.kill()
        finish_video_encoders()
    finally:  # whatever went wrong there, the process still exits with its code and no traceback
        os._exit(code)


# How long a stop waits for the video encoders to end their files before it kills them
ENCODER_SECONDS = 60.0


def finish_video_encoders() -> None:
    """imageio starts one ffmpeg per video being written, in a process group of its own (out of a terminal Ctrl-C's
    reach, by design), and ffmpeg ends its file when its input pipe closes. Exiting closed the pipes and left them
    encoding on, orphaned, with the files 48 bytes long after the line said they were there (trial 28: 17-20
    encoders ran on for 10-15 s after evaluate exited). So a stop closes this process's files (the pipes among them)
    and waits for its ffmpeg children: each video cut short is then a whole .partial.mp4 when the process ends."""
    encoders = [pid for pid, name in child_processes() if name.startswith("ffmpeg")]
    if not encoders:
        return
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the process exits next: every pipe to an encoder closes now
    deadline = time.monotonic() + ENCODER_SECONDS
    for pid in encoders:
        try:
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)
        except ChildProcessError:  # waited for elsewhere
            pass


def child_processes() -> list[tuple[int, str]]:
    """(pid, executable name) of this process's children, read from /proc (empty where there is none)."""
    children = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read().decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if int(rest[1]) == os.getpid():  # the fields after the name: state, then the parent's pid
            children.append((int(entry), name))
    return children


class OutputThatOutlivesItsReader:
    """stdout and stderr of a training run: when the reader goes (`| head`, a pager quit: EPIPE; a closed terminal:
    EIO), the run goes on and writes to /dev/null from then on, instead of dying at its next progress line with
    nothing saved."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            self._reader_gone(error)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            self._reader_gone(error)

    def _reader_gone(self, error: OSError) -> None:
        if error.errno not in (errno.EPIPE, errno.EIO):
            raise error
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())  # the pending bytes flush into /dev/null

    def __getattr__(self, name):
        return getattr(self._stream, name)


# What the machine says when it will not give memory or threads: EnvPool's and OpenMP's thread pools raise
# "Resource temporarily unavailable" (EAGAIN); a library loaded under a memory limit raises ImportError "failed to map
# segment"; MuJoCo's engine "Could not allocate memory"; PyTorch "out of memory" / "bad_alloc".
MACHINE_REFUSAL_SIGNS = (
    "resource temporarily unavailable",
    "out of memory",
    "cannot allocate memory",
    "could not allocate memory",
    "failed to map segment",
    "bad_alloc",
)
# The smallest address-space limit (`ulimit -v`) a training script is started under. Below it PyTorch's own import
# aborts in C++ (std::bad_alloc, exit 134 with no line: 488 MiB on an AMD EPYC here), which no Python code can catch;
# above it a refusal is a Python exception, which `machine_refusal_in_one_line` turns into one line.
MIN_ADDRESS_SPACE = 600 * 2**20
# The EnvPool MuJoCo scripts' floor (trial 17, U7; trial 18, V3). Below it MuJoCo's and EnvPool's threads, or torch's
# import after EnvPool's, failed in C++ where no Python code hears it (AMD EPYC, 2 cores, one env: 1,000,000 KiB
# std::bad_alloc, exit 134; 1,300,000 glibc's "cannot allocate memory for thread-local data: ABORT", or a hang after a
# thread's MemoryError); at 1,400,000 SAC's refusal was a Python exception; at 1,500,000 all nine scripts trained.
MUJOCO_ENVPOOL_ADDRESS_SPACE = 1_500_000 * 1024


# Words that mean the machine refused memory only when an address-space limit is set: Pillow's PNG encoder says
# "codec configuration error" when zlib's deflateInit2 fails, which under `ulimit -v` is Z_MEM_ERROR (trial 17, U1).
REFUSAL_SIGNS_UNDER_A_LIMIT = ("codec configuration error",)


def refused_memory(error: BaseException) -> bool:
    """Whether `error` is the machine refusing memory or threads (not the script or its input): a MemoryError, a
    refusal's words (REFUSAL_SIGNS_UNDER_A_LIMIT too, under an address-space limit), or either earlier in its chain
    of exceptions."""
    signs = MACHINE_REFUSAL_SIGNS + (REFUSAL_SIGNS_UNDER_A_LIMIT if address_space_limited() else ())
    while error is not None:
        if isinstance(error, MemoryError) or any(sign in str(error).lower() for sign in signs):
            return True
        error = error.__cause__ or error.__context__
    return False


def address_space_limited() -> bool:
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def address_space_limit() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "no address-space limit" if soft == resource.RLIM_INFINITY else f"ulimit -v: {soft // 2**20:,} MiB"


def check_address_space(needed: int, what: str) -> None:
    """One line and exit 1 where the address-space limit is below `needed` bytes (`what` needs them)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < needed:
        sys.exit(
            f"error: this process may map {soft // 2**20:,} MiB (ulimit -v), less than the {needed // 2**20:,} MiB "
            f"{what} needs to start (below it the libraries abort with no error line): raise the limit"
        )


def remove_fresh_run_folder() -> str:
    """Remove the run folder this process made for a fresh run, unless a checkpoint was saved into it (then the
    folder is the run's, to --resume) or an iteration was logged there (its curves, maybe a video: trial 23, A4, a
    full disk removed a finished evaluation video and 12k steps of curves, saying "nothing was saved"); says which,
    for a one-line exit."""
    for folder in FRESH_RUN_FOLDER:
        if COMPLETED_SAVES:
            return f"; its checkpoint {COMPLETED_SAVES[-1]} is whole"
        if LOOP_PROGRESS:
            iterations = f"{LOOP_PROGRESS[0]} iteration{'s' * (LOOP_PROGRESS[0] != 1)}"
            return (
                f"; its run folder {folder} keeps what {iterations} logged (its curves, any videos; no checkpoint was saved)"
            )
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        removed = [folder]
        for made in FRESH_LOG_DIRS_MADE:  # trial 19: a new --log-dir was left behind, empty
            try:
                os.rmdir(made)
            except OSError:  # another run wrote into it meanwhile, or it is gone
                break
            removed.append(made)
        above = f" and the --log-dir {removed[-1]} made for it" if len(removed) > 1 else ""
        return f"; removed its run folder {folder}{above}, where nothing was saved"
    return ""


def os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind `error`: itself, or one it was raised from or while handling (torch.save reports a full
    disk as a RuntimeError from its zip writer, raised while handling the OSError)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def full_disk(error: BaseException | None) -> OSError | None:
    """The OSError in `error`'s chain of exceptions that is a full disk or an exhausted quota, if any."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return error
        error = error.__cause__ or error.__context__
    return None


def run_folder_gone() -> str | None:
    """One line if a run folder this process writes was deleted or moved while it ran, else None (trial 20, X1: `rm
    -rf` or `mv` of a training run's folder gave two FileNotFoundError tracebacks, the tensorboard writer thread's and
    then the training loop's, and no word of where the last checkpoint went). The folder's locked descriptor still
    points at it: /proc/self/fd names where it is now, and a deleted folder has no links left."""
    for run_dir, descriptor in RUN_FOLDER_LOCKS.items():
        try:
            held = os.fstat(descriptor)
            if os.path.samestat(held, os.stat(run_dir)):
                continue
        except FileNotFoundError:
            pass
        except OSError:
            continue
        finished = trained_all_iterations()
        if held.st_nlink == 0:
            when = "after the run trained all its iterations" if finished else "while the run trained"
            return (
                f"error: the run folder {run_dir} was deleted {when}, with everything in it; "
                "this run cannot write on: start it again"
            )
        try:
            now = os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:
            now = ""
        if not now.startswith("/"):
            return f"error: the run folder {run_dir} was moved away while the run trained; this run cannot write on"
        saved = [p for p in COMPLETED_SAVES if os.path.dirname(p) == run_dir]
        names = [os.path.basename(saved[-1])] if saved else list(CHECKPOINT_NAMES)
        checkpoint = next((os.path.join(now, name) for name in names if os.path.isfile(os.path.join(now, name))), None)
        if checkpoint is None:
            resume = "; it holds no checkpoint yet"
        elif finished:  # a resume at the run's end only does the end-of-run work, such as --save-model
            resume = (
                f"; its final checkpoint is {checkpoint} (--resume {shlex.quote(checkpoint)} --save-model writes its model)"
            )
        else:
            resume = f"; its last checkpoint is {checkpoint} (continue with --resume {shlex.quote(checkpoint)})"
        filming = "".join(  # trial 21, Y6: the run ended without a word on the video still being filmed
            f"; the evaluation video being filmed in {now}{folder[len(run_dir) :]} is finished by its own process"
            for folder in STILL_FILMING
            if folder.startswith(run_dir + os.sep)
        )
        when = "after the run trained all its iterations" if finished else "while the run trained"
        return f"error: the run folder {run_dir} was moved to {now} {when}, so this run cannot write on{resume}{filming}"
    return None


def current_place(path: str) -> str:
    """Where `path`, inside a run folder this process holds, is now: under the folder's new name if it was moved
    (trial 23, A2: "evaluation video written: <the old path>"); `path` itself otherwise."""
    for run_dir, descriptor in RUN_FOLDER_LOCKS.items():
        if path.startswith(run_dir + os.sep):
            try:
                now = os.readlink(f"/proc/self/fd/{descriptor}")
            except OSError:
                return path
            return now + path[len(run_dir) :] if now.startswith("/") and os.path.isdir(now) else path
    return path


def quiet_writer_thread(hook_args) -> None:
    """threading.excepthook of a training run: the tensorboard writer's thread is the first to find a deleted or moved
    run folder or a full disk; it says nothing, since the training loop's next write raises the same error and its
    one line follows (trial 20, X1; trial 21, Y5: a 20-line thread traceback above the disk-full line). Any other
    thread's error is Python's default traceback."""
    import threading

    error = hook_args.exc_value
    if isinstance(error, OSError) and (run_folder_gone() is not None or full_disk(error) is not None):
        return
    threading.__excepthook__(hook_args)


def machine_refusal_in_one_line(kind, error, traceback) -> None:
    """sys.excepthook of a training run and of the tools: the machine refusing memory or threads (a `ulimit -v`, a container's limit,
    a machine out of threads) is one line naming the limit, not a traceback, and a fresh run folder with no checkpoint
    in it is removed (trial 15, S1: tracebacks from torch's and EnvPool's imports, from MuJoCo's engine, and empty run
    folders left). So is a full disk (trial 19, W2: results and plot ended in two chained tracebacks), with what the
    tool had written so far (LEFT_BEHIND). Anything else is the default traceback."""

    gone = run_folder_gone() if os_error_in(error) is not None else None
    if gone is not None:
        sys.stderr.write(gone + "\n")
        return
    full = full_disk(error)
    if full is not None:
        where = (
            f": {os.path.abspath(full.filename) if isinstance(full.filename, str) else full.filename}" if full.filename else ""
        )
        sys.stderr.write(
            f"error: the disk is full ({full.strerror}{where}){remove_fresh_run_folder()}{remove_empty_output_dirs()}"
            f"{''.join('; ' + left for left in LEFT_BEHIND)}: free space there, or write elsewhere, and run again\n"
        )
        return

    # Under an address-space limit, an ImportError of an installed library is the limit too: a library whose load
    # failed for memory can leave a half-made module behind, and the next import from it fails with "cannot import
    # name" (torch._dynamo at `ulimit -v 1300000`), the refusal's own words swallowed inside the library.
    limited_import = isinstance(error, ImportError) and address_space_limited()
    if not (refused_memory(error) or limited_import):
        return sys.__excepthook__(kind, error, traceback)
    said = " ".join(str(error).split())[:200]
    sys.stderr.write(
        f"error: the machine refused memory or threads ({address_space_limit()}; {kind.__name__}"
        f"{': ' + said if said else ''}){remove_fresh_run_folder()}{remove_empty_output_dirs()}{''.join('; ' + left for left in LEFT_BEHIND)}: retry with more memory (ulimit -v, a container's limit), smaller settings, or fewer runs at once\n"
    )


def exit_at_once_on_signals(envpool_mujoco: bool = False) -> None:
    """Start-up: Ctrl-C or SIGTERM exits at once (exit code 128 + signal number) with one line. Also keeps the run
    alive when the reader of its stdout goes (trial 12, P5: `ppo.py | head -2` lost the run to a BrokenPipeError),
    refuses an address-space limit its libraries cannot load under, and makes the machine's refusal of memory one
    line (machine_refusal_in_one_line). It runs before the heavy imports, so all of this covers them too."""

    if envpool_mujoco:  # the EnvPool MuJoCo scripts: a higher floor, checked before EnvPool and torch load
        check_address_space(MUJOCO_ENVPOOL_ADDRESS_SPACE, "an EnvPool MuJoCo script")
    check_address_space(MIN_ADDRESS_SPACE, "a training script (PyTorch or JAX, EnvPool or Gymnasium)")
    one_blas_thread_under_a_memory_limit()
    sys.excepthook = machine_refusal_in_one_line
    import threading

    threading.excepthook = quiet_writer_thread
    if not isinstance(sys.stdout, OutputThatOutlivesItsReader):
        sys.stdout = OutputThatOutlivesItsReader(sys.stdout)
    if not isinstance(sys.stderr, OutputThatOutlivesItsReader):
        sys.stderr = OutputThatOutlivesItsReader(sys.stderr)

    signals_seen = itertools.count()

    def exit_now(signum, frame):
        if next(signals_seen) > 0:  # a launcher's copy of the same Ctrl-C: the first call is exiting, with its line
            return
        _say(f"{SIGNAL_NAMES[signum]} during start-up: exiting before training began{remove_fresh_run_folder()}")
        _exit_now(128 + signum)

    for signum in SIGNALS:
        signal.signal(signum, exit_now)


def remove_saves_in_progress() -> str:
    """Remove the half-written files of the saves in progress; says which, for the signal's line."""
    removed = ""
    for tmp_path in list(SAVES_IN_PROGRESS):
        try:
            os.remove(tmp_path)
            removed += f"removed the half-written {os.path.basename(tmp_path)}; "
        except OSError:  # renamed into place a moment ago: that save completed
            pass
    return removed


def end_quietly_when_the_reader_goes() -> None:
    """A tool piped into `head` (or a pager that quits) ends as Unix tools do, silently, not with a BrokenPipeError
    traceback: Python ignores SIGPIPE and raises instead. For tools only; a training run keeps Python's way."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def one_blas_thread_under_a_memory_limit() -> None:
    """Under an address-space limit, numpy's OpenBLAS gets one thread (unless OPENBLAS_NUM_THREADS is set): its
    per-thread buffers did not fit under `ulimit -v 400000` and it exited with its own line, or (300000) retried in C
    for minutes, deaf to signals (trial 16, T1). Before numpy loads; torch's and JAX's threads are not affected."""
    if address_space_limited():
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def map_blas_buffer_now() -> None:
    """Under an address-space limit, numpy's OpenBLAS maps its work buffer (about 34 MiB) here, or the machine's
    refusal is the excepthook's one line. Mapped later, mid-work, a refusal is OpenBLAS's own line and a C `exit(1)`
    that no Python code sees (`ulimit -v 320000`: blas_memory_alloc under dgesv under matplotlib's transform inverse,
    an empty plot folder left behind). With one BLAS thread the buffer, once mapped, is reused by every later call."""
    if not address_space_limited():
        return
    import mmap

    import numpy as np

    try:
        mmap.mmap(-1, 64 * 2**20).close()  # twice the buffer: room for it and for what numpy maps around the call
    except OSError as error:
        raise MemoryError("OpenBLAS's work buffer (about 34 MiB) does not fit") from error
    np.linalg.inv(np.eye(2))  # dgesv: OpenBLAS maps the buffer on its first call


# The output folders a tool made (deepest first) with their LEFT_BEHIND entry: removed again where nothing was
# written into them, at exit, at a signal and at the machine's refusal (trial 17, U4: a Ctrl-C left them empty).
OUTPUT_DIRS_MADE: list[tuple[list[str], str]] = []


def folders_missing(path: str) -> list[str]:
    """The folders `os.makedirs(path)` would make, deepest first: those a stop may remove again, where empty."""
    missing, folder = [], os.path.abspath(path)
    while not os.path.exists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def make_output_dir(path: str, holds: str) -> None:
    """A tool's output folder, made just before its first write. Should the tool then stop (a signal, the machine
    refusing memory), its line says what the folder holds (`holds`); the folders this call made are removed again
    if nothing was written into them (trials 16 and 17: empty and half-named folders left behind)."""
    import atexit

    made = folders_missing(path)
    if not OUTPUT_DIRS_MADE:
        atexit.register(remove_empty_output_dirs)
    os.makedirs(path, exist_ok=True)
    # named in full: the filming evaluator writes into "." (its video folder), and its line said ". holds" (trial 24, K8)
    OUTPUT_DIRS_MADE.append((made, f"{os.path.abspath(path)} holds {holds}"))
    LEFT_BEHIND.append(OUTPUT_DIRS_MADE[-1][1])


@contextlib.contextmanager
def written_whole(path: str, mode: str = "w", **open_args):
    """A tool's output file (a table, a figure): written as `<path>.tmp` and renamed over `path` once whole. A full
    disk or a stop mid-write removes the .tmp, and `path` stays as it was (trial 21: results on a full disk left
    tables.md empty, or cut mid-row)."""
    tmp_path = path + ".tmp"
    SAVES_IN_PROGRESS.add(tmp_path)  # a signal's exit removes it (exit_tool_on_signals)
    try:
        with open(tmp_path, mode, **open_args) as file:
            yield file
        os.replace(tmp_path, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.remove(tmp_path)
        if isinstance(error, OSError) and error.filename is None:  # a write's error names no file (trial 23, K3)
            error.filename = path
        raise
    finally:
        SAVES_IN_PROGRESS.discard(tmp_path)


def remove_empty_output_dirs() -> str:
    """Remove the folders make_output_dir made where nothing was written into them, with their LEFT_BEHIND entry;
    says which, for a stopping line."""
    removed = []
    for made, entry in OUTPUT_DIRS_MADE:
        top = None
        for folder in made:  # deepest first: a parent goes only once its child has
            try:  # rmdir alone refuses a folder holding anything (ENOTEMPTY); listdir's opendir got ENOMEM at 300000
                os.rmdir(folder)
                top = folder
            except (OSError, MemoryError):
                break
        if top is not None:
            removed.append(top)
            if entry in LEFT_BEHIND:
                LEFT_BEHIND.remove(entry)
    OUTPUT_DIRS_MADE.clear()  # once: at exit after a refusal's line, nothing is left to say
    return "".join(f"; removed {folder}, where nothing was written" for folder in removed)


def exit_tool_on_signals(tool: str) -> None:
    """A command-line tool (evaluate, plot, results): Ctrl-C or SIGTERM exits at once (exit code 128 + signal
    number) with one line that names the tool and what it leaves (`LEFT_BEHIND`), never a KeyboardInterrupt
    traceback. Installed before the tool's heavy imports, so it holds during start-up too, as does one BLAS thread
    under a memory limit."""

    one_blas_thread_under_a_memory_limit()
    sys.excepthook = machine_refusal_in_one_line  # trial 16: plot under `ulimit -v 300000`, a MemoryError traceback
    end_quietly_when_the_reader_goes()
    signals_seen = itertools.count()  # one C call: of a signal and its launcher's copy, exactly one call sees 0

    def exit_now(signum, frame):
        if next(signals_seen) > 0:  # the copy (trial 13: plain `timeout` passes the terminal's Ctrl-C on): one line
            return
        ended = end_children_and_scratch()
        half_written = remove_saves_in_progress()  # first: a folder holding only its first file's .tmp is empty then
        removed = remove_empty_output_dirs()  # (trial 23, A5: it stayed, said to hold "the plots drawn so far")
        left = half_written + "; ".join(LEFT_BEHIND)
        _say(f"{SIGNAL_NAMES[signum]}: {tool} stopped" + ended + (f"; {left.rstrip('; ')}" if left else "") + removed)
        _exit_now(128 + signum)

    for signum in SIGNALS:
        signal.signal(signum, exit_now)


def run_child(command: list[str], while_running=None, **popen_args):
    """subprocess.run for a benchmark tool's child (a training run it times): a signal to the tool ends the child too
    (exit_tool_on_signals), where it would otherwise go on alone. `while_running(process)`, if given, is called once
    the child has started and must return at once (it may start a thread that watches the child)."""
    import subprocess

    with subprocess.Popen(command, **popen_args) as process:
        CHILDREN.append(process)
        try:
            if while_running is not None:
                while_running(process)
            stdout, stderr = process.communicate()
        finally:
            CHILDREN.remove(process)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@contextlib.contextmanager
def scratch_folder():
    """A temporary folder for a benchmark's runs, removed at the end, and by a signal's exit too."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        SCRATCH_FOLDERS.append(folder)
        try:
            yield folder
        finally:
            SCRATCH_FOLDERS.remove(folder)


def end_children_and_scratch() -> str:
    """Kill the tool's children (each is waited for: its files are closed before its folder goes) and remove its
    scratch folders; says what, for the signal's line."""
    import shutil

    ended = 0
    for process in list(CHILDREN):
        # os.waitpid, not process.wait(): the signal may have landed inside process.wait(), which holds a lock that
        # a second wait in this same thread would wait on forever
        try:
            os.kill(process.pid, signal.SIGKILL)
            os.waitpid(process.pid, 0)
            ended += 1
        except (ProcessLookupError, ChildProcessError):  # it had ended, and was waited for
            pass
    for folder in SCRATCH_FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)
    said = f"; ended the {ended} run{'s' * (ended != 1)} it had started" if ended else ""
    return said + ("; removed its scratch folder" if SCRATCH_FOLDERS else "")


class StopAfterIteration:
    """Training: the first Ctrl-C or SIGTERM sets `requested`; the loop reads it once per iteration,
    checkpoints and exits 0. A second signal aborts at once (exit code 128 + signal number). `quiet`: the first
    signal is not announced (under torchrun every process gets the terminal's Ctrl-C; process 0 alone says it)."""

    def __init__(self, quiet: bool = False):
        self.requested, self.quiet, self.saves_before, self.first_at, self.first_signum = False, quiet, 0, 0.0, 0
        # Which signal this is, taken in one C call. A signal that lands while this handler runs runs its own call of
        # the handler to the end first, at the next bytecode (trial 12: one forwarded Ctrl-C printed the stopping
        # line twice, when its copy landed between the `requested` check and the assignment). The count cannot be
        # split that way: exactly one call sees 0.
        self.signals_seen = itertools.count()
        for signum in SIGNALS:
            signal.signal(signum, self._handle)
        # Once the script's code is done (trained, saved, said so), a signal has nothing left to stop. Left alone,
        # one landing while Python shuts down met the default handler Python restores there: exit 130, no line, after
        # a whole checkpoint and the "stopped at iteration" line (trial 14). Ignored signals stay ignored to the end.
        atexit.register(lambda: [signal.signal(signum, signal.SIG_IGN) for signum in SIGNALS])

    def _handle(self, signum, frame):
        if next(self.signals_seen) > 0:
            if self.first_at == 0.0 or time.monotonic() - self.first_at < SAME_STOP_SECONDS:
                return  # the first signal again, passed on by a launcher (or landing inside its own handler)
            removed = remove_saves_in_progress()
            filming = "".join(
                f"; the evaluation video being filmed in {folder} is finished by its own process" for folder in STILL_FILMING
            )
            saved = [  # checkpoint.pt, or checkpoint-{step}.pt with --keep-checkpoints (checkpoint.pt links to it)
                os.path.join(os.path.dirname(path), "checkpoint.pt")
                for path in COMPLETED_SAVES[self.saves_before :]
                if re.fullmatch(r"checkpoint(-\d+)?\.pt", os.path.basename(path))
            ]
            # "SIGTERM again", or "Ctrl-C after SIGTERM" (trial 29: a Ctrl-C after a SIGTERM read "Ctrl-C again")
            second = SIGNAL_NAMES[signum] + (
                " again" if signum == self.first_signum else f" after {SIGNAL_NAMES[self.first_signum]}"
            )
            if saved and not removed:  # the stop's own checkpoint is whole: only what came after it is cut short
                _say(
                    f"{second}: stopped at once; the checkpoint written after the first signal is "
                    f"whole: {saved[-1]} (continue with --resume {shlex.quote(saved[-1])}){filming}"
                )
                _exit_now(128 + signum)
            _say(f"{second}: aborted without saving ({removed}a checkpoint written before, if any, stays valid){filming}")
            _exit_now(128 + signum)
        self.saves_before, self.first_signum = len(COMPLETED_SAVES), signum
        PENDING_STOP.append(signum)
        self.requested = True
        self.first_at = time.monotonic()
        if not self.quiet and trained_all_iterations():  # trial 24, K10: in the end-of-run work, no iteration is left
            _say(f"{SIGNAL_NAMES[signum]}: the run trained all its iterations and is finishing (a second one aborts)")
        elif not self.quiet:
            _say(f"{SIGNAL_NAMES[signum]}: stopping after this iteration (a second signal aborts without saving)")


def stopped_line(iteration: int, checkpoint_path: str) -> str:
    PENDING_STOP.clear()  # the stop is honoured, and said
    # the path shell-quoted in the command to paste: a --log-dir may hold spaces or quotes (trial 19)
    resume = shlex.quote(checkpoint_path)
    return f"stopped at iteration {iteration}; checkpoint: {checkpoint_path} (continue with --resume {resume})"


def late_stop_line() -> str | None:
    """At a run's normal end: a line if a stop was asked for after the loop's last look at its flag (so the run
    finished all its iterations), naming the checkpoint it wrote; None otherwise."""
    if not PENDING_STOP:
        return None
    saved = [  # checkpoint.pt, or checkpoint-{step}.pt with --keep-checkpoints (checkpoint.pt links to it)
        os.path.join(os.path.dirname(path), re.sub(r"-\d+(\.\w+)$", r"\1", os.path.basename(path))) for path in COMPLETED_SAVES
    ]
    checkpoint = f"; checkpoint: {saved[-1]}" if saved else ""
    name = SIGNAL_NAMES[PENDING_STOP[0]]
    PENDING_STOP.clear()
    return f"{name} came too late to stop the run early: it trained all its iterations and finished as planned{checkpoint}"


def ignore_signals_in_worker() -> None:
    """In an env subprocess: a terminal's Ctrl-C and `timeout`'s SIGTERM reach the whole process
    group; only the main process acts on them. It must close its workers on every exit (e.g.
    `atexit.register(envs.close)`): multiprocessing stops leftover workers at exit with SIGTERM,
    which they now ignore, and would wait for them forever."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)

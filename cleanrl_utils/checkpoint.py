"""Checkpoint files: written whole or not at all, read back with one-line errors, RNG states, and
the arguments of a resumed run.

What a checkpoint *holds* is each script's business (its `training_state()`); these functions only
write, read and check the file. Torch scripts write `torch.save` files that load with
`weights_only=True` (no pickle code runs on load); the JAX scripts write flax msgpack.
"""

import dataclasses
import errno
import numbers
import os
import random
import re
import shlex
import sys
import time
import types
import typing
from typing import Callable

import numpy as np

from cleanrl_utils.stop import (
    CHECKPOINT_NAMES,
    COMPLETED_SAVES,
    RESUMED_AT_ITS_END,
    SAVES_IN_PROGRESS,
    is_checkpoint_file,
    os_error_in,
    remove_fresh_run_folder,
    run_folder_gone,
    trained_all_iterations,
)

# Every checkpoint holds these, with these types (the script's own keys are checked by the script).
COMMON_KEYS = {"script": str, "run_name": str, "args": dict, "iteration": int, "global_step": int, "rng": dict}

# EnvPool's simulators cannot be snapshotted, so a resumed EnvPool run starts fresh games. Seeding
# them with `seed` again would replay the games the run began with; `seed + RESEED_STRIDE * iteration`
# gives new ones. The stride is a prime larger than any env count, so the seed ranges the envs of
# two resumes use (EnvPool gives env i the seed seed + i) never overlap.
RESEED_STRIDE = 7919
# EnvPool takes int32 seeds only (it asserts seed < 2**31 - 1): a resumed seed wraps around below that.
ENV_SEED_LIMIT = 2**31 - 1


def resumed_env_seed(seed: int, iteration: int) -> int:
    """The env seed of a run resumed after `iteration` (0: a fresh run, whose seed is kept as given)."""
    if iteration == 0:
        return seed
    return (seed + RESEED_STRIDE * iteration) % ENV_SEED_LIMIT


def readable_size(size: int) -> str:
    """Bytes as a reader takes them in: 1.25 GB, 3.4 MB or 812 bytes (trial 17: a small file said "0.00 GB")."""
    if size >= 10**9:
        return f"{size / 1e9:.2f} GB"
    return f"{size / 1e6:.1f} MB" if size >= 10**5 else f"{size:,} bytes"


def write_atomically(path: str, write: Callable, holds_replay_buffer: bool = False) -> None:
    """`write(file)` into `path + ".tmp"`, flushed to disk, then renamed over `path`: a crash, kill or
    full disk mid-write never leaves a torn checkpoint or model file, and the previous one stays until the rename.
    Checkpoints written are recorded in COMPLETED_SAVES (for the lines of a stop or a moved run folder)."""
    tmp_path = path + ".tmp"
    SAVES_IN_PROGRESS.add(tmp_path)  # a second Ctrl-C during the write removes it (cleanrl_utils.stop)
    try:
        with open(tmp_path, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
        if is_checkpoint_file(path):
            COMPLETED_SAVES.append(path)
    except BaseException as error:  # a full disk or a KeyboardInterrupt: the half-written file is as large as a checkpoint
        written = os.path.getsize(tmp_path) if os.path.exists(tmp_path) else 0
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        cause = os_error_in(error)
        if cause is None or isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        gone = run_folder_gone()  # trial 20, X1: the run folder was deleted or moved, not a full disk
        if gone is not None:
            sys.exit(gone)
        # A full disk, a quota, a vanished network folder: the user's to fix, so one line, not torch's zip-writer trace.
        # "resume" only where there is a file to resume (trial 19: a first save said so with nothing saved before).
        kept = os.path.exists(path)
        before = "the previous file there is as it was" if kept else "no earlier file of that name was there"
        buffer = " (the replay buffer is most of it: --no-checkpoint-buffer leaves it out)" if holds_replay_buffer else ""
        if is_checkpoint_file(path):
            then = "resume" if kept else "run again"
        elif COMPLETED_SAVES and trained_all_iterations() and is_video_snapshot(path):
            # the last video of a finished run: a --resume would only say the run already ran its iterations (trial 28)
            checkpoint = shlex.quote(COMPLETED_SAVES[-1])
            then = (
                "film it from the run's last checkpoint, which holds every iteration: python -m cleanrl_utils.evaluate "
                f"--model-path {checkpoint} --episodes 1 --capture-video --video-dir {shlex.quote(os.path.dirname(path))}"
                f" (and --resume {checkpoint} --save-model writes the model file, if the run was to save one)"
            )
        elif COMPLETED_SAVES:  # a model file (--save-model, or a video's snapshot) after a whole checkpoint (trial 23)
            then = f"continue with --resume {shlex.quote(COMPLETED_SAVES[-1])} (with --save-model it writes the model)"
        else:
            then = "run again"
        # A first save that fails says what the run folder keeps (trial 24, K7: a video's snapshot model on a full disk
        # said only "run again", though 25 iterations of curves were kept), or removes it where nothing was logged
        if then == "run again":
            before += remove_fresh_run_folder()
        # trial 24, K11: a checkpoint.pt replaced by a folder got the full disk's advice
        fix = f"Free space there{buffer}" if cause.errno in (errno.ENOSPC, errno.EDQUOT) else "Fix that path"
        sys.exit(
            f"error: could not write {path} ({cause.strerror or cause}, after {readable_size(written)}); {before}. "
            f"{fix} and {then}"
        )
    finally:
        SAVES_IN_PROGRESS.discard(tmp_path)


def is_video_snapshot(path: str) -> bool:
    """The policy snapshot an evaluation video is filmed from (cleanrl_utils.video.VideoJobs):
    <run>/videos/iteration-<n>/model.cleanrl_model."""
    folder = os.path.dirname(os.path.abspath(path))
    return (
        os.path.basename(path) == "model.cleanrl_model"
        and re.fullmatch(r"iteration-\d+", os.path.basename(folder)) is not None
        and os.path.basename(os.path.dirname(folder)) == "videos"
    )


def remove_interrupted_saves(path: str) -> None:
    """Remove the `.tmp` files a killed save left beside checkpoint `path` (kill -9, a second Ctrl-C, a power
    cut: no cleanup code runs), each as large as a checkpoint, and say so. Called when a run resumes from
    `path`, before it writes anything: that run's saves are the only writers of its folder."""
    run_dir = os.path.dirname(os.path.abspath(path))
    for name in sorted(os.listdir(run_dir)):
        if name.startswith("checkpoint") and name.endswith(".tmp"):
            try:
                os.remove(os.path.join(run_dir, name))
            except OSError:  # another rank removed it first, or the folder is read-only (refused later, in one line)
                continue
            print(f"removed {name}, left by a save that was interrupted", flush=True)


def kept_checkpoint_path(path: str, global_step: int) -> str:
    """Where `--keep-checkpoints` keeps the checkpoint of `global_step`: beside `path`, the step zero-padded so
    that the files sort in training order (runs/<run>/checkpoint-000307200.pt)."""
    root, ext = os.path.splitext(path)
    return f"{root}-{global_step:09d}{ext}"


def kept_checkpoint_step(name: str) -> tuple[int, str] | None:
    """(global step, extension) of a file name kept_checkpoint_path writes (`checkpoint-000307200.pt`), else None."""
    match = re.fullmatch(r"checkpoint-(\d+)(\.\w+)", name)
    return (int(match.group(1)), match.group(2)) if match else None


def keep_a_link(path: str, global_step: int, write: Callable) -> None:
    """The checkpoint just written at `path`, kept under its step as well (kept_checkpoint_path): a hard link where
    the file system allows (the next save renames a new file over `path`, so the kept one is never overwritten and
    costs no second copy), else a second file written with `write`."""
    kept = kept_checkpoint_path(path, global_step)
    if os.path.exists(kept):  # a resumed run saving the same step again
        os.remove(kept)
    try:
        os.link(path, kept)
    except OSError:  # no hard links here (some network and FAT file systems)
        write_atomically(kept, write)


def save_torch(path: str, state: dict, progress=None, keep: bool = False) -> None:
    """With `progress` (the run's ProgressLine), a save that took over a second is reported in one line, size
    and time: a checkpoint holding a replay buffer is GBs. With `keep` the checkpoint is also kept under its
    step (kept_checkpoint_path), a hard link where the file system allows: the next save renames a new file
    over `path`, so the kept one is never overwritten, and costs no second copy."""
    import torch

    start = time.time()
    write_atomically(path, lambda f: torch.save(state, f), holds_replay_buffer=bool(state.get("replay_buffer")))
    if keep:
        keep_a_link(path, state["global_step"], lambda f: torch.save(state, f))
    seconds = time.time() - start
    if progress is not None and seconds > 1:
        progress.end_line()
        print(f"checkpoint: {os.path.getsize(path) / 1e9:.2f} GB written in {seconds:.1f} s", flush=True)


def save_msgpack(path: str, state: dict, keep: bool = False) -> None:
    """flax msgpack, no pickle: arrays keep their dtypes and shapes, the rest is plain data. `keep` as in save_torch."""
    import flax.serialization

    write_atomically(path, lambda f: f.write(flax.serialization.msgpack_serialize(state)))
    if keep:
        keep_a_link(path, state["global_step"], lambda f: f.write(flax.serialization.msgpack_serialize(state)))


def _fail(flag: str, path: str, reason: str):
    sys.exit(f"error: {flag} {path!r} {reason}")


def check_is_file(path: str, flag: str, script: str) -> None:
    """One line unless `path` is a file: a run folder is named as a folder (it exists), with the checkpoint in it if it
    is one of `script`'s (trial 20: `dqn.py --resume ..` said to resume from a ppo.py checkpoint), or whose it is."""
    if os.path.isdir(path):
        inside = [os.path.join(path, name) for name in CHECKPOINT_NAMES if os.path.isfile(os.path.join(path, name))]
        hint = " (no checkpoint in it)"
        if inside:
            writer = checkpoint_script(inside[0])
            hint = f"; resume from {inside[0]!r}"
            if writer != script:
                whose = f"a checkpoint of {writer!r}" if writer else "no readable checkpoint"
                hint = f" (it holds {inside[0]!r}, {whose}, not one of {script!r})"
        _fail(flag, path, f"is a folder, not a checkpoint file{hint}")
    if not os.path.isfile(path):
        _fail(flag, path, "does not exist")


def checkpoint_script(path: str) -> str | None:
    """The script that wrote the checkpoint at `path`, or None if it cannot be read. A torch file is mapped, not read:
    a replay buffer's gigabytes stay on disk (the JAX scripts' msgpack checkpoints hold no buffer)."""
    try:
        if path.endswith(".msgpack"):
            import flax.serialization

            with open(path, "rb") as f:
                checkpoint = flax.serialization.msgpack_restore(f.read())
        else:
            import torch

            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return None
    return checkpoint.get("script") if isinstance(checkpoint, dict) else None


# What is not learned state, left out of the finiteness check: the replay buffer (GBs, and its rewards are the env's),
# RNG states and counters, and the run's arguments (checked as flags)
NOT_LEARNED = ("replay_buffer", "rng", "args", "env_state", "recent_returns", "next_obs", "obs")


def first_non_finite(tree, where: str = "") -> str | None:
    """The name of the first weight, statistic or optimiser entry in `tree` (nested dicts and lists of torch tensors,
    numpy arrays, floats) holding NaN or inf, else None. A file with one in it plays and trains NaN (trial 24, B1:
    a torch.multinomial traceback on --resume, "mean return nan" with exit 0 in evaluate)."""
    import math

    if isinstance(tree, dict):
        items = ((key, value) for key, value in tree.items() if not (where == "" and key in NOT_LEARNED))
        return next((bad for key, value in items if (bad := first_non_finite(value, f"{where}{key}.")) is not None), None)
    if isinstance(tree, list | tuple):
        return next((bad for i, v in enumerate(tree) if (bad := first_non_finite(v, f"{where}{i}.")) is not None), None)
    if isinstance(tree, float) and not math.isfinite(tree):
        return where.rstrip(".")
    if type(tree).__module__.startswith("torch") and tree.is_floating_point() and not bool(tree.isfinite().all()):
        return where.rstrip(".")
    if isinstance(tree, np.ndarray | np.generic) and np.issubdtype(tree.dtype, np.inexact):
        if not np.isfinite(tree).all():
            return where.rstrip(".")
    return None


def check_checkpoint(checkpoint, path: str, script: str, keys: dict[str, type], flag: str = "--resume") -> dict:
    """`checkpoint` if it is a dict holding `keys` (name -> type) and COMMON_KEYS and was written by
    `script`; else one line naming what is wrong, and exit. Runs before anything is written."""
    if not isinstance(checkpoint, dict):
        _fail(flag, path, "is not a resumable checkpoint (not a dict of training state)")
    if checkpoint.get("script") != script:
        _fail(flag, path, f"is a checkpoint of {checkpoint.get('script')!r}, not of {script!r}")
    for name, expected in {**COMMON_KEYS, **keys}.items():
        if name not in checkpoint:
            _fail(flag, path, f"has no {name!r} entry (written by an older version of the script, or damaged)")
        value = checkpoint[name]
        if expected is int and isinstance(value, np.ndarray | np.generic) and np.ndim(value) == 0:
            value = value.item()  # msgpack gives numpy scalars back
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            _fail(flag, path, f"has a {type(value).__name__} as {name!r}, not a {expected.__name__}")
    if checkpoint["iteration"] < 0 or checkpoint["global_step"] < 0:
        _fail(flag, path, "has a negative iteration or global step")
    bad = first_non_finite(checkpoint)
    if bad is not None:  # a run stops at its first non-finite loss before saving it: this file is damaged or edited
        _fail(flag, path, f"holds NaN or inf in {bad!r}: damaged or edited (a run never saves those); use another one")
    return checkpoint


def _unreadable(flag: str, path: str, script: str, error: Exception, other_format: str) -> None:
    """One line for a file this loader cannot read: where it is the twin framework's checkpoint or model file (a
    torch script's file given to its JAX twin, or the reverse), say whose it is and which of the two."""
    try:
        if other_format == "torch":
            import torch

            other = torch.load(path, map_location="cpu", weights_only=True)
        else:
            import flax.serialization

            with open(path, "rb") as f:
                other = flax.serialization.msgpack_restore(f.read())
        writer = other.get("script") if isinstance(other, dict) else None
    except Exception:
        writer = None
    if isinstance(writer, str):
        kind = "a torch" if other_format == "torch" else "a JAX (flax msgpack)"
        if other_format == "torch":
            resumable = "optimizer_state_dict" in other
        else:
            resumable = isinstance(other.get("train_state"), dict) and "opt_state" in other["train_state"]
        if not resumable:  # a .cleanrl_model: weights to evaluate, which no script resumes (trial 18)
            _fail(flag, path, f"is {kind} model file of {writer!r} (weights to evaluate), not a checkpoint of {script!r}")
        _fail(flag, path, f"is {kind} checkpoint of {writer!r}, not one of {script!r}; resume it with {writer}.py")
    _fail(flag, path, f"is not a readable checkpoint ({type(error).__name__})")


def load_torch(path: str, script: str, keys: dict[str, type] | None = None, flag: str = "--resume") -> dict:
    """A torch checkpoint of `script` holding weights, optimiser state and `keys` (name -> type), or
    one clear line and exit."""
    import torch

    check_is_file(path, flag, script)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        _unreadable(flag, path, script, error, other_format="msgpack")
    if isinstance(checkpoint, dict) and "optimizer_state_dict" not in checkpoint:
        _fail(flag, path, "is not a resumable checkpoint (no optimiser state)")
    checkpoint = check_checkpoint(
        checkpoint, path, script, {"model_state_dict": dict, "optimizer_state_dict": dict} | (keys or {}), flag
    )
    remove_interrupted_saves(path)
    return checkpoint


def load_msgpack(path: str, script: str, keys: dict[str, type], flag: str = "--resume") -> dict:
    """A flax msgpack checkpoint of `script` holding `keys`, or one clear line and exit."""
    import flax.serialization

    check_is_file(path, flag, script)
    try:
        with open(path, "rb") as f:
            checkpoint = flax.serialization.msgpack_restore(f.read())
    except Exception as error:
        _unreadable(flag, path, script, error, other_format="torch")
    train_state = checkpoint.get("train_state") if isinstance(checkpoint, dict) else None
    if not isinstance(train_state, dict) or "opt_state" not in train_state:
        _fail(flag, path, "is not a resumable checkpoint (no optimiser state)")
    checkpoint = check_checkpoint(checkpoint, path, script, keys, flag)
    for name in ("iteration", "global_step"):
        checkpoint[name] = int(checkpoint[name])
    remove_interrupted_saves(path)
    return checkpoint


def restored_or_exit(path: str, what: str, restore: Callable[[], None]) -> None:
    """Run `restore()` (load_state_dict and the like); if the saved state does not fit this run, one
    line naming `what` and exit, instead of a traceback from deep inside torch or flax."""
    try:
        restore()
    except Exception as error:
        reason = " ".join(str(error).split())[:300]  # one line
        sys.exit(f"error: --resume {path!r} holds {what} that this script cannot restore ({type(error).__name__}: {reason})")


def restore_torch(path: str, checkpoint: dict, model, optimizer, args, extra: dict | None = None) -> tuple[int, int]:
    """Weights, optimiser state, RNG states and each `extra` object's state (name -> an object with
    `load_state_dict`, read from checkpoint[name]) from a torch checkpoint, one line and exit if they
    do not fit; the optimiser then takes `args.learning_rate` (a rate changed on resume applies; a
    schedule overwrites it each iteration anyway), and so does every optimiser among the `extra` objects (TD3's
    and DDPG's critic optimiser). Prints where the run resumes. Returns (first iteration to run, global step).
    Scripts with per-network rates (--policy-lr, --q-lr) have no `args.learning_rate`: their optimisers keep the
    saved rates."""
    import torch

    restored_or_exit(path, "weights", lambda: model.load_state_dict(checkpoint["model_state_dict"]))
    restored_or_exit(path, "an optimiser state", lambda: optimizer.load_state_dict(checkpoint["optimizer_state_dict"]))
    restored_or_exit(path, "RNG states", lambda: set_torch_rng_states(checkpoint["rng"]))
    for name, state_holder in (extra or {}).items():
        restored_or_exit(path, f"an {name!r} entry", lambda: state_holder.load_state_dict(checkpoint[name]))
    if hasattr(args, "learning_rate"):
        optimizers = [optimizer] + [held for held in (extra or {}).values() if isinstance(held, torch.optim.Optimizer)]
        for group in (group for optimizer in optimizers for group in optimizer.param_groups):
            group["lr"] = args.learning_rate
    return say_resumed(path, checkpoint, args.num_iterations)


def restore_msgpack(path: str, checkpoint: dict, template: dict, num_iterations: int) -> tuple[dict, int, int]:
    """The saved values of `template`'s entries (name -> a fresh pytree: TrainState, PRNG key,
    normalisers), restored with restore_like, and Python's and numpy's RNG states; one line and exit
    if they do not fit. Prints where the run resumes. Returns (restored, first iteration to run,
    global step)."""
    restored = {}
    restored_or_exit(
        path, "a training state", lambda: restored.update(restore_like(template, {k: checkpoint[k] for k in template}))
    )
    restored_or_exit(path, "RNG states", lambda: set_msgpack_rng_states(checkpoint["rng"]))
    return (restored, *say_resumed(path, checkpoint, num_iterations))


def say_resumed(path: str, checkpoint: dict, num_iterations: int) -> tuple[int, int]:
    """Print where a resumed run continues (or that it has nothing left to do). Returns (first
    iteration to run, global step). A --total-timesteps below what the run has done exits 0 here, before
    anything is restored or written: the run folder stays as it was (it used to reload the replay, add an
    empty events file and rewrite the model with the shorter --total-timesteps in its args). A run resumed at
    exactly its end goes on: no iteration runs, and it still does its end-of-run work (--save-model), which is how a
    finished run's model is exported after the fact; it logs nothing (make_writer) and films nothing (a missing
    last video is filmed from the checkpoint by cleanrl_utils.evaluate: write_atomically says how)."""
    run_name, iteration, global_step = (
        os.path.basename(os.path.dirname(os.path.abspath(path))),
        checkpoint["iteration"],
        checkpoint["global_step"],
    )
    print(f"resumed {run_name} at iteration {iteration} (global step {global_step:,})", flush=True)
    if iteration == num_iterations:
        print(f"{run_name} already ran its {num_iterations} iterations; a larger --total-timesteps extends it", flush=True)
        RESUMED_AT_ITS_END.append(os.path.dirname(os.path.abspath(path)))
    elif iteration > num_iterations:
        print(
            f"{run_name} already ran {iteration} iterations, more than the {num_iterations} this --total-timesteps "
            "asks for: nothing to do, nothing changed (a larger --total-timesteps extends it)",
            flush=True,
        )
        sys.exit(0)
    return iteration + 1, global_step


# ---- arguments of a resumed run ----

# Flags a resumed run may change. Everything else defines the run (batch shapes, the algorithm, the
# envs) and must stay as saved. --total-timesteps extends (or shortens) the run; the learning-rate
# schedule is recomputed for the new length, as if the run had been planned that long from the start.
# --learning-rate rescues a run that diverged or stalled.
MAY_CHANGE_ON_RESUME = (
    "resume",
    "total_timesteps",
    "learning_rate",
    "save_model",
    "track",
    "wandb_project_name",
    "wandb_entity",
    "checkpoint_every",
    "keep_checkpoints",
    "capture_video",
    "video_every",
    "torch_threads",
    "cuda",
    "precision",
    "channels_last",
)


def upgrade_saved_args(saved: dict) -> dict:
    """Arguments saved by an older version of a script, in today's spelling (in place, and returned):
    `bf16: bool` became `precision: "bf16" | "fp32"`, `channels_last: bool` became "on" | "off"."""
    if isinstance(saved.get("bf16"), bool | np.bool_) and "precision" not in saved:
        saved["precision"] = "bf16" if saved.pop("bf16") else "fp32"
    if isinstance(saved.get("channels_last"), bool | np.bool_):
        saved["channels_last"] = "on" if saved["channels_last"] else "off"
    return saved


def resume_args(args_class, checkpoint: dict, path: str, may_change: tuple[str, ...] = MAY_CHANGE_ON_RESUME):
    """The saved arguments with the flags of this command line applied over them. A flag that would
    change anything outside `may_change` stops the run with one line naming it: never silently
    dropped, never silently applied. Fields added to a script after the checkpoint take their defaults."""
    import tyro

    fields = {field.name for field in dataclasses.fields(args_class)}
    saved = upgrade_saved_args(checkpoint["args"])
    unknown = sorted(set(saved) - fields)
    if unknown:
        sys.exit(f"error: --resume {path!r} holds arguments this script does not know: {', '.join(unknown)}")
    wrong = [name for name, value in saved.items() if not _fits(value, name, args_class)]
    if wrong:
        held = ", ".join(f"--{name.replace('_', '-')} {saved[name]!r} ({type(saved[name]).__name__})" for name in wrong)
        sys.exit(f"error: --resume {path!r} holds arguments of the wrong type: {held} (a damaged or hand-edited checkpoint)")
    try:
        saved_args = args_class(**saved)
    except Exception as error:
        sys.exit(f"error: --resume {path!r} holds arguments that do not fit this script ({type(error).__name__})")
    args = tyro.cli(args_class, default=saved_args)
    changed = [name for name in sorted(fields) if getattr(args, name) != getattr(saved_args, name) and name not in may_change]
    if changed:
        flags = ", ".join(
            f"--{name.replace('_', '-')} {getattr(args, name)} (saved: {getattr(saved_args, name)})" for name in changed
        )
        allowed = ", ".join(f"--{name.replace('_', '-')}" for name in may_change if name in fields and name != "resume")
        sys.exit(f"error: {flags} cannot change on --resume; a resumed run may change only {allowed}")
    return args


def _fits(value, name: str, args_class) -> bool:
    """Whether a saved argument has a type its field allows. Only plain scalar fields (bool, int,
    float, str, None and their unions) are checked; anything else passes."""
    try:
        annotation = typing.get_type_hints(args_class)[name]  # Annotated (tyro.conf.Suppress) stripped
    except Exception:
        return True
    is_union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    options = typing.get_args(annotation) if is_union else (annotation,)
    is_number = not isinstance(value, bool | np.bool_)
    checks = {
        bool: isinstance(value, bool | np.bool_),
        int: is_number and isinstance(value, numbers.Integral),
        float: is_number and isinstance(value, numbers.Real),
        str: isinstance(value, str),
        type(None): value is None,
    }
    if any(option not in checks for option in options):
        return True
    return any(checks[option] for option in options)


# ---- replay buffers of frame rings ----


def ring_state(ring, names: tuple[str, ...]) -> dict:
    """A frame-ring replay buffer's checkpoint content: its arrays `names`, filled slots only (slot t holds
    observation t until the ring wraps: a 1M buffer saved early is MBs, not 7 GB), as tensors sharing their memory,
    and its counters `num_obs`, `env_steps` and `capacity` (slots per env)."""
    import torch

    rows = min(ring.num_obs, ring.capacity)
    arrays = {name: torch.from_numpy(getattr(ring, name)[:rows]) for name in names}
    return arrays | dict(num_obs=ring.num_obs, env_steps=ring.env_steps, capacity=ring.capacity)


def load_ring_state(ring, state: dict, names: tuple[str, ...]) -> bool:
    """`ring_state`'s content back into `ring`. A full ring is taken over without a copy: a resumed run then holds one
    buffer in memory, not two (the fresh zero arrays were never touched, so they never took memory); a partly filled
    one is copied into the first rows. An empty dict (a checkpoint saved with --no-checkpoint-buffer) leaves the
    buffer empty: False. ValueError, before anything changes, if the saved buffer does not fit this one."""
    if not state:
        return False
    capacity = int(state.get("capacity", state[names[0]].shape[0]))  # older checkpoints saved every slot
    if capacity != ring.capacity:
        raise ValueError(f"saved ring of {capacity} slots per env, this run's {ring.capacity}")
    saved = {name: state[name].numpy() for name in names}
    for name, rows in saved.items():
        array = getattr(ring, name)
        if rows.shape[1:] != array.shape[1:] or rows.dtype != array.dtype or len(rows) > len(array):
            raise ValueError(f"saved {name} {rows.dtype}{list(rows.shape)}, this run's {array.dtype}{list(array.shape)}")
    for name, rows in saved.items():
        if len(rows) == ring.capacity:
            setattr(ring, name, rows)
        else:
            getattr(ring, name)[: len(rows)] = rows
    ring.num_obs, ring.env_steps = int(state["num_obs"]), int(state["env_steps"])
    return True


# ---- RNG states ----


def torch_rng_states() -> dict:
    """Python's, numpy's and torch's global RNG states, as types `torch.load(weights_only=True)` reads."""
    import torch

    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (np_name, np_keys.tolist(), np_pos, np_has_gauss, np_cached),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_torch_rng_states(states: dict) -> None:
    import torch

    random.setstate(states["python"])
    np_name, np_keys, np_pos, np_has_gauss, np_cached = states["numpy"]
    np.random.set_state((np_name, np.array(np_keys, dtype=np.uint32), np_pos, np_has_gauss, np_cached))
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def msgpack_rng_states() -> dict:
    """Python's and numpy's global RNG states as msgpack-friendly data (a JAX key is saved by the script)."""
    py_version, py_internal, py_gauss_next = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    return {
        "python": {"version": py_version, "internal": np.asarray(py_internal, np.int64), "gauss_next": py_gauss_next},
        "numpy": {"name": np_name, "keys": np_keys, "pos": np_pos, "has_gauss": np_has_gauss, "cached": np_cached},
    }


def set_msgpack_rng_states(states: dict) -> None:
    python, numpy = states["python"], states["numpy"]
    random.setstate((int(python["version"]), tuple(int(x) for x in python["internal"]), python["gauss_next"]))
    np_state = (numpy["name"], np.asarray(numpy["keys"], np.uint32), int(numpy["pos"]), int(numpy["has_gauss"]))
    np.random.set_state(np_state + (float(numpy["cached"]),))


def restore_like(template, state):
    """`template` (a pytree of jax arrays: a fresh TrainState, PRNG key, ...) holding the values saved
    in `state` (its flax state dict, as read back from a checkpoint). Structure, shapes, dtypes and
    weak types are the template's, so a jitted function sees exactly the input types of a fresh
    run: a resumed run compiles once, in its first iteration, like a fresh one. ValueError if
    `state` does not fit the template."""
    import flax.serialization
    import jax
    import jax.numpy as jnp

    restored = flax.serialization.from_state_dict(template, state)

    def leaf(fresh: jax.Array, saved) -> jax.Array:
        saved = np.asarray(saved)
        if saved.shape != fresh.shape or saved.dtype != fresh.dtype:
            raise ValueError(f"saved {saved.dtype}{list(saved.shape)} where this run has {fresh.dtype}{list(fresh.shape)}")
        # A weakly typed leaf (TrainState.step starts as the Python int 0) must stay weak: jit's
        # cache tells weak from strong types, so a strong one would compile the iteration again.
        value = jnp.asarray(saved.item()) if fresh.weak_type else jnp.asarray(saved)
        if value.dtype != fresh.dtype:
            raise ValueError(f"weakly typed {fresh.dtype} leaf restores as {value.dtype}")
        return value

    return jax.tree.map(leaf, template, restored)

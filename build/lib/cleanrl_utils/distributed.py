"""Run plumbing for a script launched by torchrun (torch.distributed), one process per CPU share or GPU.

torchrun starts the processes and tells each its place through environment variables (`world_from_env`);
`init_distributed` joins them into one process group: gloo on CPU, NCCL on CUDA. Under plain `python` there is
no group and every helper here degrades to its one-process meaning, so a script runs unchanged either way.

The process group gets a timeout because a collective waits for every process: without one, a peer that died or
hung would leave the others waiting forever. With it the collective fails, and `exit_on_lost_peer` turns that
failure into one line and exit 1.
"""

import contextlib
import datetime
import json
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from cleanrl_utils.checkpoint import ENV_SEED_LIMIT, resumed_env_seed


def world_from_env() -> tuple[int, int, int, int]:
    """(rank, world size, local rank, local world size) as torchrun sets them; (0, 1, 0, 1) under plain python."""
    return tuple(
        int(os.environ.get(name, 0 if "RANK" in name else 1))
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    )


@contextlib.contextmanager
def only_first_local_rank_speaks(local_rank: int):
    """Around the start-up checks (flags, --resume file). Every process checks the same input, so every one would
    print the same error: only the first process of each host says it, the others exit 1 silently. They wait a little
    first: torchrun SIGTERMs every process as soon as one exits, which could cut the first one off before it spoke."""
    try:
        yield
    except SystemExit as error:
        if local_rank != 0 and error.code not in (None, 0):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # torchrun's SIGTERM after the first process exits: silent
            time.sleep(10)
            os._exit(1)
        if isinstance(error.code, str):
            tell_the_launcher(error.code)
        raise


def tell_the_launcher(line: str) -> None:
    """torchrun ends with its own failure report (a ChildFailedError traceback). Its "Root Cause" shows what the
    first failed process wrote to the file torchrun names in TORCHELASTIC_ERROR_FILE, else only a link to its docs:
    this writes the one-line error there, so the report ends on that line instead of burying it. No-op elsewhere."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        try:
            with open(path, "w") as f:
                json.dump({"message": line, "timestamp": int(time.time())}, f)
        except OSError:
            pass  # the line is on stderr already


def check_one_gpu_per_process(cuda: bool) -> None:
    """NCCL refuses two processes on one GPU, and process r takes GPU r of its host: more processes per host than GPUs
    is a launch mistake. Called inside `only_first_local_rank_speaks`, so the host's first process says it."""
    _, _, _, local_world_size = world_from_env()
    gpus = torch.cuda.device_count() if cuda and torch.cuda.is_available() else 0
    if gpus and local_world_size > gpus:
        sys.exit(
            f"error: {local_world_size} processes per host, but this host has {gpus} CUDA device(s) and each process needs "
            f"its own; launch with --nproc-per-node {gpus} (or at most that), or train on CPU with --no-cuda"
        )


def init_distributed(timeout_seconds: float, cuda: bool) -> torch.device:
    """Join torchrun's process group (env:// rendezvous): NCCL on CUDA, gloo on CPU; no group under plain python.
    The timeout bounds every collective: a dead or hung peer makes the others fail instead of waiting forever."""
    use_cuda = cuda and torch.cuda.is_available()
    device = torch.device(f"cuda:{world_from_env()[2]}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)  # NCCL collectives and gather_object use the current device
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_seconds))
    return device


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def local_env_seed(seed: int, rank: int, local_num_envs: int, iteration: int = 0) -> int:
    """EnvPool seeds env i with `seed + i`, so process r's envs get seed + r*L + i: the run's envs are seeded seed ..
    seed + P*L - 1, each once, as a one-process script seeds P*L envs (CleanRL's multi-GPU PPO gives seed + r + i: rank
    0 env 1 = rank 1 env 0). A resumed run shifts the base as the one-process scripts do (new games, resumed_env_seed)."""
    return (resumed_env_seed(seed, iteration) + rank * local_num_envs) % ENV_SEED_LIMIT


def rank_seed(seed: int, rank: int, iteration: int) -> int:
    """Process r > 0's own seed for action sampling and minibatch order (`seed + rank` would be another run's seed)."""
    return int(np.random.SeedSequence([seed, rank, iteration]).generate_state(1)[0])


def all_reduce_mean(values: list[float], device: torch.device) -> list[float]:
    """The mean over processes of each value, in one collective (gloo has no AVG: SUM / world size)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if distributed():
        dist.all_reduce(tensor)
        tensor /= dist.get_world_size()
    return tensor.tolist()


def broadcast_from_rank0(obj):
    """Process 0's `obj` on every process (any picklable object); the others pass a placeholder such as None."""
    holder = [obj]
    if distributed():
        dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_to_rank0(obj, rank: int) -> list:
    """Every process's `obj`, by rank, on process 0; [] elsewhere."""
    if not distributed():
        return [obj]
    gathered = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered or []


class CommTimer:
    """DDP's default gradient all-reduce (mean over processes) as a comm hook that notes when each bucket's all-reduce
    was in flight (`ddp.register_comm_hook(None, timer.hook)`). `take()` is that time (overlaps counted once): it runs
    alongside the backward pass and includes waiting for a slower process, so it bounds what communication adds to an
    update from above."""

    def __init__(self):
        self.spans: list[tuple[float, float]] = []

    def hook(self, state, bucket):
        start, tensor = time.perf_counter(), bucket.buffer().div_(dist.get_world_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()
        return future.then(lambda fut: self.spans.append((start, time.perf_counter())) or fut.value()[0])

    def take(self) -> float:
        total, end = 0.0, float("-inf")
        for a, b in sorted(self.spans):
            total, end = total + max(0.0, b - max(a, end)), max(end, b)
        self.spans = []
        return total


# gloo says "Connection closed by peer", "Connection reset by peer" or "Timed out waiting ...ms"; NCCL's watchdog a timeout
LOST_PEER_WORDS = ("connection closed", "connection reset", "timed out", "timeout", "broken pipe", "nccl", "gloo")


def exit_on_lost_peer(rank: int, world_size: int, timeout_seconds: float) -> None:
    """A failed collective (a peer died, or hung past --dist-timeout) becomes one line and exit 1, not a traceback from
    inside DDP. As sys.excepthook it sees only uncaught exceptions: no try around the training loop."""
    default_hook = sys.excepthook

    def hook(kind, error, tb):
        message = " ".join(str(error).split())
        if distributed() and isinstance(error, RuntimeError) and any(w in message.lower() for w in LOST_PEER_WORDS):
            reason = message.rsplit("] ", 1)[-1].split(". ")[0][:160]  # gloo: "[file.cc:553] What happened. Advice."
            line = (
                f"error: process {rank} of {world_size} lost contact with the others ({reason}): another process "
                f"died or hung for over --dist-timeout {timeout_seconds:g} s; a checkpoint saved before, if any, "
                "stays valid (saves are atomic)"
            )
            print(line, file=sys.stderr, flush=True)
            tell_the_launcher(line)
            os._exit(1)  # not sys.exit: gloo's threads may still wait on the dead peer
        default_hook(kind, error, tb)

    sys.excepthook = hook


def leave_the_group_and_exit() -> None:
    """The end of a distributed run, once everything is written and closed: every process leaves the group together
    and exits 0 at once, without the interpreter's teardown. With that teardown, about one run in 40 on two busy
    cores had a process abort after its last line of Python ("terminate called without an active exception", no
    Python frame left: a C++ thread of the torch/gloo stack destroyed while running), and torchrun then failed the
    whole run. A wandb run is finished first: its own exit hook would not run."""
    if distributed():
        dist.barrier()  # no process tears its group down while another still uses it
        dist.destroy_process_group()
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

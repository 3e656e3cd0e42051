"""cleanrl_utils.checkpoint: files written whole under SIGKILL, bit-exact torch and msgpack round
trips, RNG states, one-line errors for every damaged checkpoint, the arguments of a resumed run."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import REPO, one_line_exit

from cleanrl_utils.checkpoint import (
    COMMON_KEYS,
    RESEED_STRIDE,
    check_checkpoint,
    load_msgpack,
    load_ring_state,
    load_torch,
    msgpack_rng_states,
    restore_torch,
    restored_or_exit,
    resumed_env_seed,
    ring_state,
    save_msgpack,
    save_torch,
    set_msgpack_rng_states,
    set_torch_rng_states,
    torch_rng_states,
    write_atomically,
)

TORCH_KEYS = {"model_state_dict": dict, "optimizer_state_dict": dict}


# ---- written whole or not at all ----

WRITER = """
    import sys
    import time
    from cleanrl_utils.checkpoint import write_atomically

    path, size = sys.argv[1], int(sys.argv[2])
    version = 0
    while True:
        version += 1
        block = bytes([version % 256]) * (size // 64)

        def write(f):
            f.write(version.to_bytes(8, "little"))
            for _ in range(64):  # many small, slow writes (a large state on a slow disk): kills land mid-file
                f.write(block)
                f.flush()
                time.sleep(0.002)

        write_atomically(path, write)
        print(version, flush=True)
"""


def read_version(path: str, size: int) -> int:
    """The version a whole file holds; fails on a torn one."""
    data = open(path, "rb").read()
    assert len(data) == 8 + size // 64 * 64, f"torn: {len(data)} bytes"
    version = int.from_bytes(data[:8], "little")
    assert data[8:] == bytes([version % 256]) * (size // 64 * 64), "torn: mixed contents"
    return version


def test_write_atomically_never_leaves_a_torn_file_under_sigkill(tmp_path):
    path, size = str(tmp_path / "checkpoint.pt"), 4 << 20
    rng = random.Random(0)
    killed_before_rename = killed_mid_write = 0
    for kill in range(10):
        process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WRITER), path, str(size)], stdout=subprocess.PIPE, text=True, cwd=REPO
        )
        first = int(process.stdout.readline())  # one whole file is out
        time.sleep(rng.uniform(0.0, 0.25))
        process.send_signal(signal.SIGKILL)
        rest = process.communicate(timeout=30)[0].split()
        assert process.returncode == -signal.SIGKILL
        last_printed = int(rest[-1]) if rest else first
        # the file holds the last version announced or the one whose rename beat the print: never torn
        assert read_version(path, size) in (last_printed, last_printed + 1)
        tmp = path + ".tmp"
        if os.path.exists(tmp):
            killed_before_rename += 1
            killed_mid_write += os.path.getsize(tmp) < os.path.getsize(path)
    # the test is only worth something if kills landed inside a write (with the 2 ms sleeps, most do)
    assert killed_mid_write >= 2 and killed_before_rename >= 3, (killed_mid_write, killed_before_rename)


def test_a_failing_write_keeps_the_previous_file(tmp_path, monkeypatch):
    import cleanrl_utils.checkpoint as checkpoint_module

    monkeypatch.setattr(checkpoint_module, "COMPLETED_SAVES", [])  # no checkpoint written by this process yet
    path = str(tmp_path / "checkpoint.pt")
    write_atomically(path, lambda f: f.write(b"old"))

    def fail_halfway(f):
        f.write(b"ne")
        raise OSError(28, "No space left on device")

    one_line_exit(lambda: write_atomically(path, fail_halfway), f"error: could not write {path} (No space left on device")
    assert open(path, "rb").read() == b"old"
    assert not os.path.exists(path + ".tmp")

    class FullDisk:  # a file that fills up after 1 MB, as a real disk does: torch.save then raises its zip
        def __init__(self, f):  # writer's RuntimeError while handling the OSError
            self.f, self.written = f, 0

        def write(self, data):
            self.written += len(data)
            if self.written > 1_000_000:
                raise OSError(28, "No space left on device")
            return self.f.write(data)

        def flush(self):
            self.f.flush()

    big = {"weights": torch.zeros(1_000_000)}
    line = one_line_exit(
        lambda: write_atomically(path, lambda f: torch.save(big, FullDisk(f)), holds_replay_buffer=True),
        "(No space left on device, after ",
        "); the previous file there is as it was",
        "Free space there (the replay buffer is most of it: --no-checkpoint-buffer leaves it out) and resume",
    )
    # what reached the disk, under 1 MB here, as a reader takes it in (trial 17: "after 0.00 GB")
    assert re.search(r"after (\d[\d,]* bytes|\d+\.\d MB)\)", line), line
    assert open(path, "rb").read() == b"old"
    assert not os.path.exists(path + ".tmp")  # the half-written file (a checkpoint's size) is not left behind
    # a first save: no earlier file to keep or to resume from (trial 19 cosmetic)
    (tmp_path / "first").mkdir()
    first = str(tmp_path / "first" / "checkpoint.pt")
    line = one_line_exit(
        lambda: write_atomically(first, lambda f: torch.save(big, FullDisk(f))),
        "; no earlier file of that name was there. Free space there and run again",
    )
    assert "--no-checkpoint-buffer" not in line  # trial 23 cosmetic: said to ppo.py, which has no replay buffer
    assert not os.path.exists(first) and not os.path.exists(first + ".tmp")
    # trial 23, A1: a model file (--save-model, a video's snapshot) after a whole checkpoint points at that checkpoint
    monkeypatch.setattr(checkpoint_module, "COMPLETED_SAVES", [path])
    model = str(tmp_path / "ppo.cleanrl_model")
    one_line_exit(
        lambda: write_atomically(model, lambda f: torch.save(big, FullDisk(f))),
        "; no earlier file of that name was there. Free space there and continue with ",
        f"--resume {path} (with --save-model it writes the model)",
    )
    assert not os.path.exists(model) and not os.path.exists(model + ".tmp")
    # trial 24, K11: not a full disk (a folder where the file goes): no advice to free space
    (tmp_path / "blocked").mkdir()
    blocked = str(tmp_path / "blocked" / "checkpoint.pt")
    os.mkdir(blocked)
    line = one_line_exit(lambda: write_atomically(blocked, lambda f: f.write(b"new")), "(Is a directory", "Fix that path")
    assert "Free space" not in line

    def interrupted_halfway(f):
        f.write(b"ne")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, interrupted_halfway)
    assert open(path, "rb").read() == b"old" and not os.path.exists(path + ".tmp")
    write_atomically(path, lambda f: f.write(b"new"))  # a stale .tmp does not get in the way
    assert open(path, "rb").read() == b"new"


# ---- round trips ----


def torch_state(iteration: int = 3) -> tuple[dict, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 5)).sum().backward()
    optimizer.step()
    state = {
        "script": "some_script",
        "run_name": "CartPole-v1__some_script__1__1700000000",
        "args": {"seed": 1, "learning_rate": 1e-3, "wandb_entity": None},
        "iteration": iteration,
        "global_step": 512 * iteration,
        "rng": torch_rng_states(),
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "extras": {"bf16": torch.randn(3).bfloat16(), "int64": torch.arange(5), "bool": torch.tensor([True, False])},
    }
    return state, model, optimizer


def assert_same(a, b):
    """Equal structure, values bit for bit, and dtypes."""
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray | np.generic):
        b = np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    else:
        assert a == b and type(a) is type(b), (a, b)


def test_torch_round_trip_is_bit_exact(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    state, _, _ = torch_state()
    save_torch(path, state)
    assert not os.path.exists(path + ".tmp")
    loaded = load_torch(path, "some_script", TORCH_KEYS)
    assert_same(state, loaded)


def test_a_slow_torch_save_is_reported_in_one_line(tmp_path, capsys, monkeypatch):
    """A replay buffer makes checkpoints GBs: with the run's progress line, a save over a second says its size and
    time (after ending a live progress line); a fast one, or one without a progress line, says nothing."""
    import cleanrl_utils.checkpoint as checkpoint_module

    class Progress:
        ended = 0

        def end_line(self):
            self.ended += 1

    path, progress = str(tmp_path / "checkpoint.pt"), Progress()
    save_torch(path, {"x": torch.zeros(1000)}, progress)
    assert capsys.readouterr().out == "" and progress.ended == 0
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(checkpoint_module.time, "time", lambda: next(clock))
    save_torch(path, {"x": torch.zeros(1000)}, progress)
    size = os.path.getsize(path) / 1e9
    assert capsys.readouterr().out == f"checkpoint: {size:.2f} GB written in 2.5 s\n" and progress.ended == 1


@pytest.mark.parametrize("hard_links", [True, False])
def test_kept_checkpoints_hold_their_own_step(tmp_path, monkeypatch, hard_links):
    """--keep-checkpoints: each save also stays under its step, untouched by later saves (the next save renames a
    new file over checkpoint.pt, so a hard link keeps the old one); a resumed run saving a kept step again replaces
    it; without hard links the state is written a second time."""
    import cleanrl_utils.checkpoint as checkpoint_module

    if not hard_links:
        monkeypatch.setattr(checkpoint_module.os, "link", lambda *_: (_ for _ in ()).throw(OSError("no links")))
    path = str(tmp_path / "checkpoint.pt")
    for step in (1024, 2048, 2048):
        save_torch(path, {"global_step": step, "x": torch.full((3,), float(step))}, keep=True)
    save_torch(path, {"global_step": 4096, "x": torch.zeros(3)})  # not kept
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-000001024.pt", "checkpoint-000002048.pt", "checkpoint.pt"]
    for step in (1024, 2048):
        kept = torch.load(checkpoint_module.kept_checkpoint_path(path, step), weights_only=True)
        assert kept["global_step"] == step and torch.equal(kept["x"], torch.full((3,), float(step)))
    assert torch.load(path, weights_only=True)["global_step"] == 4096


def test_msgpack_round_trip_is_bit_exact(tmp_path):
    path = str(tmp_path / "checkpoint.msgpack")
    rng = np.random.default_rng(0)
    params = {"Dense_0": {"kernel": rng.standard_normal((5, 7)).astype(np.float32), "bias": np.zeros(7, np.float32)}}
    state = {
        "script": "some_jax_script",
        "run_name": "Hopper-v4__some_jax_script__1__1700000000",
        "args": {"seed": 1, "learning_rate": 0.00295, "target_kl": None, "env_id": "Hopper-v4"},
        "iteration": 4,
        "global_step": 2048,
        "rng": msgpack_rng_states(),
        "train_state": {"params": params, "opt_state": {"count": np.int32(4), "mu": params}, "step": np.int32(4)},
        "key": np.array([0, 42], dtype=np.uint32),
        "extras": {"float64": rng.standard_normal(3), "int64": np.arange(3), "bool": np.array([True, False])},
    }
    save_msgpack(path, state)
    loaded = load_msgpack(path, "some_jax_script", {"train_state": dict, "key": np.ndarray})
    assert_same(state, loaded)
    assert type(loaded["iteration"]) is int and type(loaded["global_step"]) is int


def draws() -> list:
    return [
        random.random(),
        random.gauss(0, 1),
        np.random.standard_normal(3).tolist(),
        int(np.random.randint(1 << 30)),
        torch.rand(3).tolist(),
        torch.randint(0, 1 << 30, (2,)).tolist(),
    ]


def prime_rngs():
    """Seed, then leave cached Gaussians behind (Python's gauss_next, numpy's has_gauss): the states
    a round trip is most likely to lose."""
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)
    np.random.standard_normal()
    assert random.getstate()[2] is not None and np.random.get_state()[3] == 1


def scramble_rngs():
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)


def test_torch_rng_states_round_trip_through_a_weights_only_file(tmp_path):
    prime_rngs()
    path = str(tmp_path / "rng.pt")
    save_torch(path, {"rng": torch_rng_states()})
    expected = draws()
    scramble_rngs()
    set_torch_rng_states(torch.load(path, weights_only=True)["rng"])  # the format the scripts load
    assert draws() == expected


def test_msgpack_rng_states_round_trip_through_a_file(tmp_path):
    import flax.serialization

    prime_rngs()
    path = str(tmp_path / "rng.msgpack")
    save_msgpack(path, {"rng": msgpack_rng_states()})
    expected = draws()[:4]  # Python's and numpy's (a JAX key is saved by the script)
    scramble_rngs()
    with open(path, "rb") as f:
        set_msgpack_rng_states(flax.serialization.msgpack_restore(f.read())["rng"])
    assert draws()[:4] == expected


# ---- one-line errors ----


def valid_checkpoint() -> dict:
    return {
        "script": "s",
        "run_name": "r",
        "args": {"seed": 1},
        "iteration": 2,
        "global_step": 256,
        "rng": {"python": 0},
        "model_state_dict": {},
        "optimizer_state_dict": {},
    }


def test_check_checkpoint_accepts_a_valid_one_and_numpy_scalar_counters():
    checkpoint = valid_checkpoint()
    assert check_checkpoint(checkpoint, "c.pt", "s", TORCH_KEYS) is checkpoint
    checkpoint["iteration"], checkpoint["global_step"] = np.int64(2), np.array(256)  # as msgpack gives them back
    check_checkpoint(checkpoint, "c.pt", "s", TORCH_KEYS)


@pytest.mark.parametrize("missing", [*COMMON_KEYS, *TORCH_KEYS])
def test_each_missing_key_gives_one_line_naming_it(missing):
    checkpoint = valid_checkpoint()
    del checkpoint[missing]
    if missing == "script":
        one_line_exit(lambda: check_checkpoint(checkpoint, "c.pt", "s", TORCH_KEYS), "'c.pt'", "is a checkpoint of None")
    else:
        one_line_exit(lambda: check_checkpoint(checkpoint, "c.pt", "s", TORCH_KEYS), f"has no {missing!r} entry")


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("iteration", "3", "has a str as 'iteration', not a int"),
        ("iteration", True, "has a bool as 'iteration', not a int"),
        ("iteration", 2.0, "has a float as 'iteration', not a int"),
        ("global_step", None, "has a NoneType as 'global_step'"),
        ("args", ["seed", 1], "has a list as 'args', not a dict"),
        ("run_name", 7, "has a int as 'run_name', not a str"),
        ("rng", None, "has a NoneType as 'rng', not a dict"),
        ("model_state_dict", [], "has a list as 'model_state_dict', not a dict"),
        ("iteration", -1, "negative iteration"),
    ],
)
def test_each_wrong_type_gives_one_line_naming_the_key(key, value, fragment):
    checkpoint = valid_checkpoint() | {key: value}
    one_line_exit(lambda: check_checkpoint(checkpoint, "c.pt", "s", TORCH_KEYS), "--resume 'c.pt'", fragment)


def test_check_checkpoint_names_another_script_and_a_non_dict():
    one_line_exit(
        lambda: check_checkpoint(valid_checkpoint(), "c.pt", "ppo", TORCH_KEYS), "is a checkpoint of 's', not of 'ppo'"
    )
    one_line_exit(lambda: check_checkpoint([1, 2], "c.pt", "s", TORCH_KEYS), "not a dict of training state")
    one_line_exit(lambda: check_checkpoint([], "m.pt", "s", {}, flag="--model-path"), "--model-path 'm.pt'")


def test_load_torch_one_line_errors(tmp_path):
    load = lambda path: load_torch(str(path), "s", TORCH_KEYS)  # noqa: E731
    one_line_exit(lambda: load(tmp_path / "missing.pt"), "does not exist")
    # a run folder exists: it is named as a folder (was: "does not exist"), with the checkpoint to give instead
    one_line_exit(
        lambda: load(tmp_path), f"--resume {str(tmp_path)!r} is a folder, not a checkpoint file (no checkpoint in it)"
    )
    torch.save(valid_checkpoint(), tmp_path / "checkpoint.pt")
    one_line_exit(lambda: load(tmp_path), "is a folder, not a checkpoint file; resume from", "checkpoint.pt")
    # another script's checkpoint is not offered (trial 20: `dqn.py --resume ..` suggested ppo.py's)
    one_line_exit(
        lambda: load_torch(str(tmp_path), "dqn", TORCH_KEYS),
        f"is a folder, not a checkpoint file (it holds {str(tmp_path / 'checkpoint.pt')!r}, a checkpoint of 's', not one "
        "of 'dqn')",
    )
    os.remove(tmp_path / "checkpoint.pt")
    (tmp_path / "junk.pt").write_bytes(os.urandom(1000))
    one_line_exit(lambda: load(tmp_path / "junk.pt"), "is not a readable checkpoint")
    (tmp_path / "empty.pt").write_bytes(b"")
    one_line_exit(lambda: load(tmp_path / "empty.pt"), "is not a readable checkpoint")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    one_line_exit(lambda: load(tmp_path / "list.pt"), "not a dict of training state")
    model_only = valid_checkpoint()
    del model_only["optimizer_state_dict"]  # a .cleanrl_model file, not a checkpoint
    torch.save(model_only, tmp_path / "model.pt")
    one_line_exit(lambda: load(tmp_path / "model.pt"), "no optimiser state")
    torch.save(valid_checkpoint() | {"script": "ppo"}, tmp_path / "other.pt")
    one_line_exit(lambda: load(tmp_path / "other.pt"), "is a checkpoint of 'ppo', not of 's'")
    torch.save(valid_checkpoint() | {"iteration": "2"}, tmp_path / "typed.pt")
    one_line_exit(lambda: load(tmp_path / "typed.pt"), "has a str as 'iteration'")
    torch.save(valid_checkpoint(), tmp_path / "ok.pt")
    assert load(tmp_path / "ok.pt")["iteration"] == 2


KILLED_SAVE = """
import os, signal, sys
from cleanrl_utils.checkpoint import write_atomically

def killed_halfway(f):
    f.write(b"x" * (1 << 20))
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # as kill -9, or a second Ctrl-C's os._exit: no cleanup code runs

write_atomically(sys.argv[1], killed_halfway)
"""


def test_resuming_removes_the_tmp_file_a_killed_save_left_behind(tmp_path, capsys):
    path = str(tmp_path / "checkpoint.pt")
    torch.save(valid_checkpoint(), path)
    killed = subprocess.run([sys.executable, "-c", KILLED_SAVE, path], cwd=REPO, timeout=60)
    assert killed.returncode == -signal.SIGKILL and os.path.getsize(path + ".tmp") == 1 << 20
    assert load_torch(path, "s", TORCH_KEYS)["iteration"] == 2
    assert not os.path.exists(path + ".tmp")
    assert "removed checkpoint.pt.tmp, left by a save that was interrupted" in capsys.readouterr().out


def test_load_torch_refuses_pickled_code(tmp_path):
    torch.save(valid_checkpoint() | {"payload": torch.nn.Linear(1, 1)}, tmp_path / "pickled.pt")  # a module: pickle code
    one_line_exit(lambda: load_torch(str(tmp_path / "pickled.pt"), "s", TORCH_KEYS), "is not a readable checkpoint")


def test_load_msgpack_one_line_errors(tmp_path):
    import flax.serialization
    import msgpack

    load = lambda path: load_msgpack(str(path), "s", {"train_state": dict})  # noqa: E731
    one_line_exit(lambda: load(tmp_path / "missing.msgpack"), "does not exist")
    (tmp_path / "junk.msgpack").write_bytes(b"\xc1" + os.urandom(100))
    one_line_exit(lambda: load(tmp_path / "junk.msgpack"), "is not a readable checkpoint")
    (tmp_path / "list.msgpack").write_bytes(msgpack.packb([1, 2]))
    one_line_exit(lambda: load(tmp_path / "list.msgpack"), "no optimiser state")
    valid = valid_checkpoint() | {"train_state": {"params": {}, "opt_state": {"count": np.int32(1)}}}
    valid["rng"] = {"python": {"version": 3}}
    no_optimiser = valid | {"train_state": {"params": {}}}
    (tmp_path / "model.msgpack").write_bytes(flax.serialization.msgpack_serialize(no_optimiser))
    one_line_exit(lambda: load(tmp_path / "model.msgpack"), "no optimiser state")
    for key in ("iteration", "args", "run_name", "global_step", "rng"):
        damaged = {k: v for k, v in valid.items() if k != key}
        (tmp_path / "damaged.msgpack").write_bytes(flax.serialization.msgpack_serialize(damaged))
        one_line_exit(lambda: load(tmp_path / "damaged.msgpack"), f"has no {key!r} entry")
    (tmp_path / "ok.msgpack").write_bytes(flax.serialization.msgpack_serialize(valid))
    assert load(tmp_path / "ok.msgpack")["global_step"] == 256


def test_restore_errors_are_one_line_and_say_what_does_not_fit(tmp_path, capsys):
    state, model, optimizer = torch_state(iteration=3)
    wrong = torch.nn.Linear(5, 3)
    one_line_exit(
        lambda: restored_or_exit("c.pt", "weights", lambda: wrong.load_state_dict(state["model_state_dict"])),
        "--resume 'c.pt' holds weights that this script cannot restore (RuntimeError:",
    )
    # a fitting checkpoint: weights and counters restored, where it resumes printed
    fresh = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=1e-3)
    run_dir = tmp_path / state["run_name"]
    assert restore_torch(
        str(run_dir / "checkpoint.pt"), state, fresh, fresh_optimizer, SimpleNamespace(learning_rate=1e-3, num_iterations=10)
    ) == (4, 1536)
    assert_same(model.state_dict(), fresh.state_dict())
    assert f"resumed {state['run_name']} at iteration 3 (global step 1,536)" in capsys.readouterr().out
    restore_torch(
        str(run_dir / "checkpoint.pt"), state, fresh, fresh_optimizer, SimpleNamespace(learning_rate=7e-5, num_iterations=3)
    )
    assert "already ran its 3 iterations; a larger --total-timesteps extends it" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stopped:  # a shorter --total-timesteps than the run has done: exit 0, said as such
        restore_torch(
            str(run_dir / "checkpoint.pt"),
            state,
            fresh,
            fresh_optimizer,
            SimpleNamespace(learning_rate=7e-5, num_iterations=2),
        )
    assert stopped.value.code == 0
    assert "already ran 3 iterations, more than the 2 this --total-timesteps asks for" in capsys.readouterr().out
    # a --learning-rate given on resume replaces the rate the optimiser state carried
    assert [group["lr"] for group in fresh_optimizer.param_groups] == [7e-5]
    # a script without --learning-rate (SAC's --policy-lr, --q-lr) keeps the saved rates
    restore_torch(str(run_dir / "checkpoint.pt"), state, fresh, fresh_optimizer, SimpleNamespace(num_iterations=10))
    assert [group["lr"] for group in fresh_optimizer.param_groups] == [state["optimizer_state_dict"]["param_groups"][0]["lr"]]


# ---- the arguments of a resumed run (a real command line, in a subprocess) ----

RESUME_SCRIPT = """
import json
import sys
from dataclasses import dataclass

import tyro

from cleanrl_utils.checkpoint import resume_args


@dataclass
class Args:
    seed: int = 1
    total_timesteps: int = 1000
    learning_rate: float = 1e-3
    num_envs: int = 4
    save_model: bool = False
    resume: str | None = None
    target_kl: float | None = None
    added_after_the_checkpoint: int = 5
    batch_size: tyro.conf.Suppress[int] = 0


with open("saved.json") as f:
    saved = json.load(f)
print(json.dumps(vars(resume_args(Args, {"args": saved}, "ckpt.pt"))))
"""

SAVED = {
    "seed": 3,
    "total_timesteps": 2000,
    "learning_rate": 0.002,
    "num_envs": 8,
    "save_model": False,
    "resume": None,
    "target_kl": None,
    "batch_size": 32,
}


def resume_with(tmp_path, saved: dict, *argv: str) -> subprocess.CompletedProcess:
    (tmp_path / "resume_script.py").write_text(RESUME_SCRIPT)
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    return subprocess.run(
        [sys.executable, "resume_script.py", "--resume", "ckpt.pt", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": REPO},
        timeout=60,
    )


def resumed(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_resume_keeps_the_saved_arguments(tmp_path):
    args = resumed(resume_with(tmp_path, SAVED))
    assert args == SAVED | {"resume": "ckpt.pt", "added_after_the_checkpoint": 5}  # num_envs 8, not the default 4
    # passing a protected flag with its saved value changes nothing, so it is fine
    assert resumed(resume_with(tmp_path, SAVED, "--num-envs", "8", "--seed", "3"))["num_envs"] == 8


def test_resume_applies_the_flags_that_may_change(tmp_path):
    args = resumed(resume_with(tmp_path, SAVED, "--total-timesteps", "5000", "--learning-rate", "0.01", "--save-model"))
    assert (args["total_timesteps"], args["learning_rate"], args["save_model"]) == (5000, 0.01, True)
    assert args["num_envs"] == 8 and args["seed"] == 3


def test_resume_refuses_a_changed_protected_flag_with_one_line_naming_it(tmp_path):
    line = one_error_line(resume_with(tmp_path, SAVED, "--num-envs", "16", "--learning-rate", "0.01"))
    assert "--num-envs 16 (saved: 8) cannot change on --resume" in line
    assert "--learning-rate" not in line.split("cannot change")[0]  # the allowed one is not blamed
    assert "may change only --total-timesteps, --learning-rate, --save-model" in line
    line = one_error_line(resume_with(tmp_path, SAVED, "--seed", "4", "--target-kl", "0.02"))
    assert "--seed 4 (saved: 3)" in line and "--target-kl 0.02 (saved: None)" in line


def test_resume_refuses_unknown_and_wrongly_typed_saved_arguments(tmp_path):
    line = one_error_line(resume_with(tmp_path, SAVED | {"from_another_script": 1, "num_envz": 2}))
    assert "holds arguments this script does not know: from_another_script, num_envz" in line
    line = one_error_line(resume_with(tmp_path, SAVED | {"seed": "x", "num_envs": True}))
    assert "holds arguments of the wrong type: --seed 'x' (str), --num-envs True (bool)" in line
    resumed(resume_with(tmp_path, SAVED | {"learning_rate": 1, "target_kl": 0.02}))  # an int where a float goes is fine


# ---- JAX state and env seeds ----


def test_restore_like_keeps_weak_types_so_a_jitted_step_does_not_compile_again():
    import flax.serialization
    import jax
    import jax.numpy as jnp

    from cleanrl_utils.checkpoint import restore_like

    template = jax.jit(lambda: {"step": 0, "w": jnp.zeros(3, jnp.float32), "key": jax.random.PRNGKey(0)})()
    assert template["step"].weak_type
    trained = {"step": jnp.asarray(7), "w": jnp.arange(3, dtype=jnp.float32), "key": jax.random.PRNGKey(5)}
    state = flax.serialization.msgpack_restore(flax.serialization.msgpack_serialize(trained))
    restored = restore_like(template, state)
    assert restored["step"].weak_type and int(restored["step"]) == 7
    np.testing.assert_array_equal(restored["w"], trained["w"])
    np.testing.assert_array_equal(restored["key"], trained["key"])
    step = jax.jit(lambda s: jax.tree.map(lambda x: x + 1, s))
    step(template)
    compiled = step._cache_size()
    step(restored)
    assert step._cache_size() == compiled  # the same input types as a fresh run
    step({**restored, "step": jnp.asarray(np.int32(7))})  # a strong type: what restore_like avoids
    assert step._cache_size() == compiled + 1
    with pytest.raises(ValueError, match=r"saved float32\[4\] where this run has float32\[3\]"):
        restore_like(template, {**state, "w": np.zeros(4, np.float32)})
    with pytest.raises(ValueError, match=r"saved float64\[3\]"):
        restore_like(template, {**state, "w": np.zeros(3, np.float64)})


def test_resumed_env_seed_gives_new_non_overlapping_seed_ranges():
    assert resumed_env_seed(5, 0) == 5  # a fresh run
    assert all(RESEED_STRIDE % d for d in range(2, int(RESEED_STRIDE**0.5) + 1))  # prime
    num_envs = 64
    ranges = [set(range(resumed_env_seed(1, i), resumed_env_seed(1, i) + num_envs)) for i in range(50)]
    assert all(not (a & b) for i, a in enumerate(ranges) for b in ranges[i + 1 :])


def test_a_resumed_seed_stays_in_envpools_int32_range():
    # a large --seed resumed late used to give EnvPool a seed past int32: an AssertionError traceback
    import envpool

    seed = 2**31 - 100
    env_seed = resumed_env_seed(seed, 1000)
    assert 0 <= env_seed < 2**31 - 1 and env_seed != seed
    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=env_seed)
    envs.reset()
    envs.close()


def test_a_twin_frameworks_checkpoint_is_named_as_such(tmp_path):
    """A torch script's checkpoint given to its JAX twin (or the reverse) was 'not a readable checkpoint'."""
    import flax.serialization

    from cleanrl_utils.checkpoint import load_msgpack

    torch_file, jax_file = tmp_path / "checkpoint.pt", tmp_path / "checkpoint.msgpack"
    torch.save({"script": "ppo_atari_envpool", "iteration": 3, "optimizer_state_dict": {}}, torch_file)
    jax_state = {"script": "ppo_atari_envpool_xla_jax", "iteration": 3, "train_state": {"opt_state": {"count": 1}}}
    jax_file.write_bytes(flax.serialization.msgpack_serialize(jax_state))
    one_line_exit(
        lambda: load_msgpack(str(torch_file), "ppo_atari_envpool_xla_jax", {}),
        "is a torch checkpoint of 'ppo_atari_envpool', not one of 'ppo_atari_envpool_xla_jax'; resume it with ppo_atari_envpool.py",
    )
    one_line_exit(
        lambda: load_torch(str(jax_file), "ppo_atari_envpool"),
        "is a JAX (flax msgpack) checkpoint of 'ppo_atari_envpool_xla_jax', not one of 'ppo_atari_envpool'",
    )
    # a model file (weights to evaluate) is named as such, not as a checkpoint to resume elsewhere (trial 18)
    torch_model, jax_model = tmp_path / "ppo.cleanrl_model", tmp_path / "jax.cleanrl_model"
    torch.save({"script": "ppo", "model_state_dict": {}}, torch_model)
    jax_model.write_bytes(
        flax.serialization.msgpack_serialize({"script": "ppo_atari_envpool_xla_jax", "model_state_dict": {}})
    )
    one_line_exit(
        lambda: load_msgpack(str(torch_model), "ppo_atari_envpool_xla_jax", {}),
        "is a torch model file of 'ppo' (weights to evaluate), not a checkpoint of 'ppo_atari_envpool_xla_jax'",
    )
    one_line_exit(
        lambda: load_torch(str(jax_model), "ppo_atari_envpool"),
        "is a JAX (flax msgpack) model file of 'ppo_atari_envpool_xla_jax' (weights to evaluate), not a checkpoint of",
    )
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    one_line_exit(lambda: load_torch(str(tmp_path / "junk.pt"), "ppo_atari_envpool"), "is not a readable checkpoint")


MODEL_ON_A_FULL_DISK = """
import builtins, runpy, sys
real_open = builtins.open
def open_on_a_full_disk(file, mode="r", *args, **kwargs):  # the model file's write lands on a full disk
    if isinstance(file, str) and file.endswith(".cleanrl_model.tmp"):
        return real_open("/dev/full", mode, *args, **kwargs)
    return real_open(file, mode, *args, **kwargs)
builtins.open = open_on_a_full_disk
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
def test_a_full_disk_under_save_model_is_one_line_and_the_printed_resume_writes_the_model(tmp_path):
    """Trial 23, A1: `--save-model` on a full disk printed torch's zip-writer traceback and left a truncated
    `ppo.cleanrl_model` under its final name. Real ppo.py, two iterations, its model's write sent to /dev/full."""
    script = os.path.join(REPO, "cleanrl", "ppo.py")
    flags = ["--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "256", "--torch-threads", "1"]
    command = [sys.executable, "-c", MODEL_ON_A_FULL_DISK, script, *flags, "--save-model", "--log-dir", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    (run_dir,) = tmp_path.iterdir()
    checkpoint = run_dir / "checkpoint.pt"
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        f"error: could not write {run_dir / 'ppo.cleanrl_model'} (No space left on device, after 0 bytes); no earlier "
        f"file of that name was there. Free space there and continue with --resume {checkpoint} (with --save-model it "
        "writes the model)"
    )
    assert sorted(os.listdir(run_dir)) == ["checkpoint.pt", *[n for n in os.listdir(run_dir) if n.startswith("events")]]
    # the printed command, the disk freed: the finished run only writes its model, which evaluates
    resumed = subprocess.run(
        [sys.executable, script, "--resume", str(checkpoint), "--save-model"], capture_output=True, text=True, cwd=REPO
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"model saved to {run_dir / 'ppo.cleanrl_model'}" in resumed.stdout
    from cleanrl_utils.evaluate import evaluate

    assert len(evaluate(str(run_dir / "ppo.cleanrl_model"), episodes=1, seed=1)) == 1


SNAPSHOT_ON_A_FULL_DISK = MODEL_ON_A_FULL_DISK.replace(
    'file.endswith(".cleanrl_model.tmp")', 'file.endswith(os.path.join("iteration-2", "model.cleanrl_model.tmp"))'
).replace("import builtins, runpy, sys", "import builtins, os, runpy, sys")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails with ENOSPC")
def test_a_full_disk_under_the_last_video_of_a_finished_run_says_how_to_film_it(tmp_path):
    """Trial 28: the snapshot model of a finished run's last video on a full disk advised "continue with --resume",
    which only says the run already ran its iterations and films nothing. Real ppo.py, two iterations, the last
    video's snapshot sent to /dev/full; then both printed commands, the disk freed."""
    script = os.path.join(REPO, "cleanrl", "ppo.py")
    flags = ["--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "256", "--torch-threads", "1"]
    flags += ["--capture-video", "--video-every", "100", "--save-model", "--log-dir", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-c", SNAPSHOT_ON_A_FULL_DISK, script, *flags], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    (run_dir,) = tmp_path.iterdir()
    checkpoint, video_dir = run_dir / "checkpoint.pt", run_dir / "videos" / "iteration-2"
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    film = f"python -m cleanrl_utils.evaluate --model-path {checkpoint} --episodes 1 --capture-video --video-dir {video_dir}"
    assert result.stderr.strip() == (
        f"error: could not write {video_dir / 'model.cleanrl_model'} (No space left on device, after 0 bytes); no "
        "earlier file of that name was there. Free space there and film it from the run's last checkpoint, which "
        f"holds every iteration: {film} (and --resume {checkpoint} --save-model writes the model file, if the run was "
        "to save one)"
    )
    assert torch.load(checkpoint, weights_only=True)["iteration"] == 2
    filmed = subprocess.run([sys.executable, *film.split()[1:]], capture_output=True, text=True, cwd=tmp_path)
    assert filmed.returncode == 0, filmed.stderr
    assert os.listdir(video_dir) == ["eval-episode-0.mp4"]
    resumed = subprocess.run(
        [sys.executable, script, "--resume", str(checkpoint), "--save-model"], capture_output=True, text=True, cwd=REPO
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"model saved to {run_dir / 'ppo.cleanrl_model'}" in resumed.stdout


class Ring:
    """The smallest frame-ring replay: what `ring_state` and `load_ring_state` read and write."""

    ARRAYS = ("frames", "dones")

    def __init__(self, capacity: int, num_envs: int = 2):
        self.capacity, self.num_obs, self.env_steps = capacity, 0, 0
        self.frames = np.zeros((capacity, num_envs, 3), np.uint8)
        self.dones = np.zeros((capacity, num_envs), bool)

    def write(self, count: int) -> None:
        for _ in range(count):
            slot = self.num_obs % self.capacity
            self.frames[slot], self.dones[slot] = self.num_obs % 256, self.num_obs % 3 == 0
            self.num_obs, self.env_steps = self.num_obs + 1, self.env_steps + 2


def test_a_ring_saves_its_filled_slots_and_a_full_one_is_taken_over_without_a_copy(tmp_path):
    young = Ring(8)
    young.write(5)
    state = ring_state(young, Ring.ARRAYS)
    assert state["frames"].shape == (5, 2, 3) and (state["num_obs"], state["env_steps"], state["capacity"]) == (5, 10, 8)
    restored = Ring(8)
    assert load_ring_state(restored, state, Ring.ARRAYS)
    assert restored.frames.shape == (8, 2, 3) and not np.shares_memory(restored.frames, state["frames"].numpy())
    for name in Ring.ARRAYS:
        np.testing.assert_array_equal(getattr(restored, name), getattr(young, name))
    assert (restored.num_obs, restored.env_steps) == (5, 10)

    wrapped = Ring(8)
    wrapped.write(13)  # every slot written, five of them twice
    torch.save(ring_state(wrapped, Ring.ARRAYS), tmp_path / "ring.pt")
    state = torch.load(tmp_path / "ring.pt", weights_only=True)
    restored = Ring(8)
    load_ring_state(restored, state, Ring.ARRAYS)
    assert np.shares_memory(restored.frames, state["frames"].numpy())  # one buffer in memory, not two
    np.testing.assert_array_equal(restored.frames, wrapped.frames)
    restored.write(1)  # and it goes on like the original
    wrapped.write(1)
    np.testing.assert_array_equal(restored.frames, wrapped.frames)
    assert load_ring_state(Ring(8), {}, Ring.ARRAYS) is False  # saved with --no-checkpoint-buffer: left empty


@pytest.mark.parametrize("change", ["capacity", "dtype", "shape", "rows"])
def test_a_ring_that_does_not_fit_raises_before_anything_changes(change):
    saved = Ring(8)
    saved.write(6)
    state = ring_state(saved, Ring.ARRAYS)
    if change == "dtype":
        state["dones"] = state["dones"].to(torch.uint8)
    elif change == "shape":
        state["frames"] = torch.zeros(6, 2, 4, dtype=torch.uint8)
    elif change == "rows":  # more rows than the ring has slots
        state["frames"], state["dones"] = torch.zeros(9, 2, 3, dtype=torch.uint8), torch.zeros(9, 2, dtype=torch.bool)
    target = Ring(16 if change == "capacity" else 8)
    target.write(2)
    before = {name: getattr(target, name).copy() for name in Ring.ARRAYS}
    expected = "saved ring of 8 slots per env, this run's 16" if change == "capacity" else "saved (frames|dones) "
    with pytest.raises(ValueError, match=expected):
        load_ring_state(target, state, Ring.ARRAYS)
    assert target.num_obs == 2 and all(np.array_equal(getattr(target, name), before[name]) for name in Ring.ARRAYS)

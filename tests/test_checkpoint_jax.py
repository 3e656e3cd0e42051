"""Checkpoint, resume, Ctrl-C, SIGTERM, divergence, evaluation videos and progress output of the two
JAX twins (cleanrl/ppo_atari_envpool_xla_jax.py and cleanrl/ppo_continuous_action_envpool_xla_jax.py),
with real runs: a subprocess sent SIGINT (Atari) or SIGTERM (continuous) mid-run, its resumption with
new flags, forced divergences, bad resume files, Ctrl-C during start-up, a filmed run under a
pseudo-terminal. Each script's runs are module-scoped fixtures shared between tests."""

import hashlib
import importlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training.train_state import TrainState
from helpers import REPO, decoded_video, only_run_dir, read_scalars, run_in_terminal, run_interrupted, run_script

from cleanrl_utils.checkpoint import (
    load_msgpack,
    msgpack_rng_states,
    restore_like,
    resume_args,
    save_msgpack,
    set_msgpack_rng_states,
)

ATARI = "ppo_atari_envpool_xla_jax"
CONTINUOUS = "ppo_continuous_action_envpool_xla_jax"
# A total no machine finishes in a test: a signal always lands mid-run. The interrupted run is then
# resumed with a smaller --total-timesteps (a flag a resumed run may change) to finish it.
ENDLESS_TOTAL = 100_000_000


@dataclass(frozen=True)
class Case:
    script: str
    small: list[str]  # the interrupted / resumed / diverged runs, without --total-timesteps
    iterations: int  # of `small` with --total-timesteps iterations * batch
    batch: int  # of `small`
    learning_rate: float  # the default
    anneal: bool  # whether `small` anneals the learning rate
    signum: int  # what the interrupted run is sent
    checkpoint_keys: dict  # what a checkpoint holds beyond the common keys (for load_msgpack)
    filmed: list[str]  # 2 iterations, filmed with --video-every 2 (so only iteration 2), stdout on a terminal
    filmed_batch: int

    @property
    def total(self) -> list[str]:
        return ["--total-timesteps", str(self.iterations * self.batch)]

    def lr(self, iteration: int, iterations: int) -> float:
        """The learning rate of `iteration` in a run planned for `iterations`."""
        return self.learning_rate * (1 - (iteration - 1) / iterations if self.anneal else 1.0)


CASES = {
    # 10 iterations of 4 envs x 16 steps (2 epochs of 2 minibatches): the CNN is the cost on a CPU.
    # Annealed: a resume with a smaller --total-timesteps recomputes the schedule for the new length.
    # Sent SIGINT, as Ctrl-C in a terminal.
    "atari": Case(
        ATARI,
        ["--env-id", "Pong-v5", "--num-envs", "4", "--num-steps", "16"]
        + ["--num-minibatches", "2", "--update-epochs", "2", "--max-episode-steps", "30"],
        10,
        64,
        2.5e-4,
        True,
        signal.SIGINT,
        {"train_state": dict, "key": np.ndarray},
        ["--env-id", "Pong-v5", "--total-timesteps", "128", "--num-envs", "4", "--num-steps", "16"]
        + ["--num-minibatches", "2", "--update-epochs", "2", "--max-episode-steps", "30"],
        64,
    ),
    # 16 iterations of 8 envs x 16 steps; HalfCheetah never terminates, so with the 50-step limit
    # the stale steps (and so the reward scaler's count) are known exactly. Hopper, filmed, falls
    # over quickly: short evaluation episodes. With --no-anneal-lr the rate lives in the optimiser
    # state, not in the traced schedule. Sent SIGTERM, as schedulers (SLURM, docker stop) send.
    "continuous": Case(
        CONTINUOUS,
        ["--env-id", "HalfCheetah-v4", "--num-envs", "8", "--num-steps", "16", "--max-episode-steps", "50"]
        + ["--no-anneal-lr"],
        16,
        128,
        0.00295,
        False,
        signal.SIGTERM,
        {"train_state": dict, "normalizers": dict, "key": np.ndarray},
        ["--env-id", "Hopper-v4", "--total-timesteps", "256", "--num-envs", "8", "--num-steps", "16"]
        + ["--max-episode-steps", "50"],
        128,
    ),
}


def non_stale_steps(steps_per_env: int, limit: int = 50) -> int:
    """Steps of one env that update the reward scaler in a run segment starting from a fresh reset
    with time limit `limit` and no terminations (HalfCheetah): every `limit + 1`-th step is stale."""
    return steps_per_env - steps_per_env // (limit + 1)


def read_checkpoint(path: str) -> dict:
    with open(path, "rb") as f:
        return flax.serialization.msgpack_restore(f.read())


def checkpoint_copy(checkpoint: dict, log_dir: str) -> str:
    """Write `checkpoint` into `log_dir`/<its run>/checkpoint.msgpack (a resume of it continues in
    that folder, away from the other tests' runs); its path."""
    path = os.path.join(str(log_dir), checkpoint["run_name"], "checkpoint.msgpack")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_msgpack(path, checkpoint)
    return path


def assert_same_leaves(restored, saved, template=None) -> None:
    """Same pytree, bit for bit the saved values and dtypes. With a template (a fresh state of jax
    arrays): restored leaves are jax arrays with the template's dtypes and weak types."""
    assert jax.tree.structure(restored) == jax.tree.structure(saved)
    for (path, leaf), saved_leaf in zip(jax.tree_util.tree_leaves_with_path(restored), jax.tree.leaves(saved)):
        assert np.asarray(leaf).dtype == np.asarray(saved_leaf).dtype, path
        assert np.array_equal(np.asarray(leaf), np.asarray(saved_leaf)), path
    if template is not None:
        assert jax.tree.structure(restored) == jax.tree.structure(template)
        for (path, leaf), fresh in zip(jax.tree_util.tree_leaves_with_path(restored), jax.tree.leaves(template)):
            assert isinstance(leaf, jax.Array) and leaf.dtype == fresh.dtype and leaf.shape == fresh.shape, path
            assert leaf.weak_type == fresh.weak_type, path  # jit tells weak from strong types


def optimiser(learning_rate: float, max_grad_norm: float) -> optax.GradientTransformation:
    """The scripts' optimiser: Adam behind global-norm clipping, its rate an injected hyperparameter."""
    return optax.inject_hyperparams(
        lambda learning_rate: optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    )(learning_rate=jnp.asarray(learning_rate, jnp.float32))


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request) -> Case:
    return CASES[request.param]


@pytest.fixture(scope="module")
def module(case):
    return importlib.import_module(f"cleanrl.{case.script}")


@pytest.fixture(scope="module")
def background_runs(case, tmp_path_factory):
    """The runs that need no checkpoint start with the interrupted run, each in a thread, and play
    alongside the others (2 cores; a run mostly keeps one busy): the filmed run and a fresh run with
    --learning-rate 1e30, both with their stdout on a terminal. Waited for at teardown."""
    filmed_dir = tmp_path_factory.mktemp(f"filmed_{case.script}")
    diverged_dir = tmp_path_factory.mktemp(f"diverged_{case.script}")
    filmed = [*case.filmed, "--capture-video", "--video-every", "2", "--log-dir", str(filmed_dir)]
    diverged = [*case.small, *case.total, "--learning-rate", "1e30", "--log-dir", str(diverged_dir)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {
            "filmed": (pool.submit(run_in_terminal, case.script, *filmed), filmed_dir),
            "diverged": (pool.submit(run_in_terminal, case.script, *diverged), diverged_dir),
        }


def test_checkpoint_round_trip_is_bit_exact(case, module, tmp_path):
    """A train state after real Adam steps (moments not zero, an adapted learning rate), the PRNG
    key, Python's and numpy's RNG states (a cached Gaussian included) and, for the continuous twin,
    the normalisers: saved with save_msgpack, read back with load_msgpack and restored with
    restore_like into a *fresh* state (other values), as the script's --resume does. Leaf for leaf
    equal, with the fresh state's dtypes and weak types; one more identical step of both gives
    identical states."""
    rng = np.random.default_rng(0)
    args = module.Args()
    agent = module.Agent(6)
    obs = rng.integers(0, 256, (8, 4, 84, 84), dtype=np.uint8) if case.script == ATARI else np.zeros((8, 17), np.float32)
    tx = optimiser(args.learning_rate, args.max_grad_norm)

    # jitted, as in the scripts: op by op, initialising the CNN and Adam compiles every op
    fresh_state = jax.jit(lambda key: TrainState.create(apply_fn=None, params=agent.init(key, obs), tx=tx))

    @jax.jit
    def adam_step(state: TrainState, shift: jax.Array) -> TrainState:
        # Gradients of an elementwise function: different for every weight and every step, and far
        # cheaper to compile than the CNN's backward pass; what is tested is the state they leave.
        def loss(params):
            return sum(jnp.sin(3.0 * p + shift).sum() for p in jax.tree.leaves(params))

        return state.apply_gradients(grads=jax.grad(loss)(state.params))

    state = fresh_state(jax.random.PRNGKey(0))
    for shift in range(3):
        state = adam_step(state, jnp.float32(shift))
    moments = [leaf for leaf in jax.tree.leaves(state.opt_state) if leaf.ndim > 0]  # Adam's mu and nu
    assert len(moments) == 2 * len(jax.tree.leaves(state.params)) and all(np.any(m != 0) for m in moments)
    state.opt_state.hyperparams["learning_rate"] = jnp.asarray(1.2345e-3, jnp.float32)  # not the initial rate
    key = jax.random.split(jax.random.PRNGKey(42))[1]
    random.seed(3)
    np.random.seed(4)
    random.gauss(0.0, 1.0), np.random.randn()  # both now hold a cached second Gaussian
    saved = {
        "script": case.script,
        "run_name": "run",
        "args": vars(args),
        "iteration": 3,
        "global_step": 3 * args.num_envs * args.num_steps,
        "train_state": flax.serialization.to_state_dict(state),
        "key": key,
        "rng": msgpack_rng_states(),
    }
    if case.script == CONTINUOUS:
        norms = module.Normalizers(
            module.RunningMeanStd.create((17,)), module.RewardScaler.create(4), module.RunningMeanStd.create(())
        )
        for _ in range(10):
            over, stale = rng.random(4) < 0.2, rng.random(4) < 0.2
            scaler, _ = norms.reward_scaler.scale(rng.normal(1.0, 2.0, 4).astype(np.float32), over, stale, 0.99, 10.0)
            norms = norms.replace(
                obs_rms=norms.obs_rms.update(rng.normal(3.0, 7.0, (4, 17)).astype(np.float32)),
                reward_scaler=scaler,
                value_rms=norms.value_rms.update(rng.normal(-5.0, 3.0, 37).astype(np.float32)),
            )
        saved["normalizers"] = flax.serialization.to_state_dict(norms)
    path = str(tmp_path / "checkpoint.msgpack")
    save_msgpack(path, saved)
    assert not os.path.exists(path + ".tmp")
    expected_draws = (random.random(), random.gauss(0.0, 1.0), np.random.rand(), np.random.randn())

    restored = load_msgpack(path, case.script, case.checkpoint_keys)
    assert restored["args"] == vars(args) and restored["iteration"] == 3 and restored["run_name"] == "run"
    template = fresh_state(jax.random.PRNGKey(1))
    assert template.step.weak_type
    assert not np.array_equal(jax.tree.leaves(template.params)[-1], jax.tree.leaves(state.params)[-1])
    state2 = restore_like(template, restored["train_state"])
    assert_same_leaves(state2, state, template)
    assert float(state2.opt_state.hyperparams["learning_rate"]) == np.float32(1.2345e-3)
    key2 = restore_like(jax.random.PRNGKey(0), restored["key"])
    assert key2.dtype == key.dtype and np.array_equal(key2, key)
    set_msgpack_rng_states(restored["rng"])
    assert (random.random(), random.gauss(0.0, 1.0), np.random.rand(), np.random.randn()) == expected_draws
    if case.script == CONTINUOUS:
        fresh_norms = module.Normalizers(
            module.RunningMeanStd.create((17,)), module.RewardScaler.create(4), module.RunningMeanStd.create(())
        )
        assert_same_leaves(restore_like(fresh_norms, restored["normalizers"]), norms, fresh_norms)
        assert float(norms.obs_rms.count) == 40 and float(norms.value_rms.count) == 370

    # the restored state continues exactly: one more identical step of both gives identical states
    assert_same_leaves(adam_step(state2, jnp.float32(3)), adam_step(state, jnp.float32(3)))
    # a state that does not fit is refused, not silently reshaped or cast
    for template, bad_state in [
        (jnp.zeros(3, jnp.float32), np.zeros(4, np.float32)),
        (jnp.zeros(3, jnp.float32), np.zeros(3, np.float64)),
        ({"kernel": jnp.zeros(3)}, {"bias": np.zeros(3, np.float32)}),
    ]:
        with pytest.raises(ValueError):
            restore_like(template, bad_state)


def test_bad_settings_give_one_clear_line(module):
    for changes, message in [
        ({"video_every": 0}, "error: --video-every must be a positive integer, got 0"),
        ({"checkpoint_every": -1}, "error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got -1"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            module.validate_args(module.Args(**changes))
        assert exit_info.value.code == message


@pytest.fixture(scope="module")
def interrupted_run(case, background_runs, tmp_path_factory):
    """A run with a total it cannot finish, sent SIGINT (Atari) or SIGTERM (continuous) after its first
    progress line; its checkpoint as it was then (the resume test rewrites the file in place)."""
    log_dir = tmp_path_factory.mktemp(f"interrupted_{case.script}")
    args = [*case.small, "--total-timesteps", str(ENDLESS_TOTAL)]
    returncode, stdout, stderr, run_dir = run_interrupted(case.script, args, log_dir, signum=case.signum)
    path = os.path.join(run_dir, "checkpoint.msgpack")
    checkpoint = read_checkpoint(path) if os.path.exists(path) else None
    return returncode, stdout, stderr, run_dir, checkpoint


def test_sigint_or_sigterm_writes_a_checkpoint_and_exits_zero(case, interrupted_run):
    """Ctrl-C (Atari twin) and SIGTERM (continuous twin, what SLURM, docker stop and Kubernetes send)
    mid-run: the iteration finishes, the checkpoint is written, exit 0, no traceback."""
    returncode, stdout, stderr, run_dir, checkpoint = interrupted_run
    assert returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    name = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}[case.signum]
    assert f"{name}: stopping after this iteration" in stderr, stderr
    checkpoint_path = os.path.join(run_dir, "checkpoint.msgpack")
    assert f"run folder: {run_dir}" in stdout
    stopped_at = checkpoint["iteration"]
    assert (
        f"stopped at iteration {stopped_at}; checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})"
        in stdout
    )
    assert 1 <= stopped_at < case.iterations
    assert checkpoint["global_step"] == stopped_at * case.batch
    assert checkpoint["script"] == case.script and checkpoint["run_name"] == os.path.basename(run_dir)
    args = checkpoint["args"]
    assert int(checkpoint["train_state"]["step"]) == stopped_at * args["update_epochs"] * args["num_minibatches"]
    lr = checkpoint["train_state"]["opt_state"]["hyperparams"]["learning_rate"]
    assert lr.dtype == np.float32
    assert lr == pytest.approx(case.lr(stopped_at, ENDLESS_TOTAL // case.batch), rel=1e-5)
    assert checkpoint["key"].dtype == np.uint32 and checkpoint["key"].shape == (2,)
    assert set(checkpoint["rng"]) == {"python", "numpy"}
    assert not os.path.exists(checkpoint_path + ".tmp")
    if case.script == CONTINUOUS:
        # the normaliser states are those of the run so far: the reset batch, then one batch per step
        norms = checkpoint["normalizers"]
        assert float(norms["obs_rms"]["count"]) == 8 * (16 * stopped_at + 1)
        assert float(norms["reward_scaler"]["return_rms"]["count"]) == 8 * non_stale_steps(16 * stopped_at)


def test_progress_is_plain_lines_in_a_pipe(interrupted_run):
    stdout = interrupted_run[1]
    assert "\r" not in stdout and "\x1b" not in stdout
    progress = [line for line in stdout.splitlines() if "SPS" in line]
    assert len(progress) >= 2 and all(line.startswith("step ") for line in progress)


@pytest.fixture(scope="module")
def diverging_resume(case, interrupted_run, tmp_path_factory):
    """Started before the resumed run, to play alongside it: a resume of the good checkpoint, copied
    into a run folder of its own, with --learning-rate 1e30 (a flag a resumed run may change, to
    rescue a run; here the next iteration overflows the weights). The good checkpoint and its digest."""
    log_dir = tmp_path_factory.mktemp(f"diverging_resume_{case.script}")
    good_path = checkpoint_copy(interrupted_run[4], log_dir)
    digest = hashlib.sha256(open(good_path, "rb").read()).hexdigest()
    process = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "cleanrl", f"{case.script}.py"), "--resume", good_path, "--learning-rate", "1e30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    yield process, good_path, digest
    if process.poll() is None:  # the test did not get to wait for it
        process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def resumed_run(case, interrupted_run, diverging_resume):
    """The interrupted run resumed with flags a resumed run may change: the smaller total that ends
    it, and a checkpoint interval."""
    checkpoint_path = os.path.join(interrupted_run[3], "checkpoint.msgpack")
    return run_script(case.script, "--resume", checkpoint_path, *case.total, "--checkpoint-every", "1000")


def test_resume_continues_step_counter_lr_schedule_and_compiles_once(case, interrupted_run, resumed_run):
    """The resumed run continues the step counter in the run's own folder and takes the new flags;
    the learning-rate schedule is that of the new --total-timesteps from the resumed iteration on
    (the jitted iteration is traced anew in each process)."""
    _, _, _, run_dir, stopped = interrupted_run
    checkpoint_path = os.path.join(run_dir, "checkpoint.msgpack")
    stopped_at = stopped["iteration"]
    result = resumed_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"run folder: {run_dir}" in result.stdout
    assert (
        f"resumed {os.path.basename(run_dir)} at iteration {stopped_at} (global step {stopped_at * case.batch:,})"
        in result.stdout
    )
    # a resumed run compiles its first iteration once, and nothing afterwards
    later = case.iterations - stopped_at - 1
    match = re.search(
        rf"XLA compilations: (\d+) in iteration {stopped_at + 1} .* (\d+) in the {later} later iterations", result.stdout
    )
    assert match, result.stdout[-3000:]
    assert int(match.group(1)) >= 1 and int(match.group(2)) == 0
    scalars = read_scalars(run_dir)
    lr_steps = [step for step, _ in scalars["charts/learning_rate"]]
    assert lr_steps == [case.batch * i for i in range(1, case.iterations + 1)]  # one point per iteration, none twice
    for step, lr in scalars["charts/learning_rate"]:
        iteration = step // case.batch
        planned = ENDLESS_TOTAL // case.batch if iteration <= stopped_at else case.iterations
        assert lr == pytest.approx(case.lr(iteration, planned), rel=1e-5)
    assert [step for step, _ in scalars["losses/value_loss"]] == lr_steps
    final = read_checkpoint(checkpoint_path)
    assert final["iteration"] == case.iterations and final["global_step"] == case.iterations * case.batch
    args = final["args"]
    assert int(final["train_state"]["step"]) == case.iterations * args["update_epochs"] * args["num_minibatches"]
    # saved args rule, except the flags given with --resume
    assert args["num_steps"] == 16 and args["max_episode_steps"] == stopped["args"]["max_episode_steps"]
    assert args["checkpoint_every"] == 1000 and args["resume"] == checkpoint_path
    assert args["total_timesteps"] == case.iterations * case.batch
    if case.script == CONTINUOUS:
        # statistics carried on across the restart: both segments' observations (each from a fresh
        # reset) and non-stale returns, not just the resumed segment's
        resumed_steps = 16 * (case.iterations - stopped_at)
        norms = final["normalizers"]
        assert float(norms["obs_rms"]["count"]) == 8 * (16 * stopped_at + 1) + 8 * (resumed_steps + 1)
        assert float(norms["reward_scaler"]["return_rms"]["count"]) == 8 * (
            non_stale_steps(16 * stopped_at) + non_stale_steps(resumed_steps)
        )


def test_resumed_state_equals_the_saved_one(case, interrupted_run, resumed_run, tmp_path):
    """The state the script's --resume builds equals the checkpoint's bit for bit. Observed without
    a test hook: resuming a run that is already complete runs no iteration, so the model file that
    --save-model (given with --resume: a flag a resumed run may change) writes holds the parameters
    exactly as the script restored them; for the continuous twin also the restored return and value
    statistics, and the observation statistics with the restarted simulators' one reset batch
    added. The optimiser state, PRNG key and RNG states go through the same load_msgpack /
    restore_like / set_msgpack_rng_states, checked leaf for leaf in
    test_checkpoint_round_trip_is_bit_exact; that the resumed real run compiles once shows they come
    back with a fresh state's types. The checkpoint is named by a path relative to the working
    folder: the run continues in the checkpoint's own folder, printed absolute."""
    assert resumed_run.returncode == 0, resumed_run.stderr[-3000:]
    complete = read_checkpoint(os.path.join(interrupted_run[3], "checkpoint.msgpack"))
    assert complete["iteration"] == case.iterations
    path = checkpoint_copy(complete, tmp_path)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    result = run_script(case.script, "--resume", os.path.relpath(path, REPO), "--save-model")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"run folder: {os.path.dirname(path)}\n" in result.stdout
    assert f"resumed {complete['run_name']} at iteration {case.iterations}" in result.stdout
    assert "already ran its" in result.stdout  # a finished run says so
    assert "XLA compilations" not in result.stdout  # no iteration ran
    model = read_checkpoint(os.path.join(os.path.dirname(path), f"{case.script}.cleanrl_model"))
    assert model["script"] == case.script
    assert_same_leaves(model["model_state_dict"], complete["train_state"]["params"])
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() == digest  # no iteration, no save
    assert sorted(os.listdir(os.path.dirname(path))) == sorted([os.path.basename(path), f"{case.script}.cleanrl_model"])
    if case.script == CONTINUOUS:
        norms = complete["normalizers"]
        for name, saved in [("return_rms", norms["reward_scaler"]["return_rms"]), ("value_rms", norms["value_rms"])]:
            assert_same_leaves(model[name], saved)
        assert float(model["obs_rms"]["count"]) == float(norms["obs_rms"]["count"]) + 8


def test_resume_applies_flags_that_may_change_and_refuses_the_others(case, module, interrupted_run, monkeypatch):
    """The command line of a resume, parsed as the script does: the flags a resumed run may change
    are applied over the saved args, any other that differs stops the run with one line naming it."""
    checkpoint, path = interrupted_run[4], "run/checkpoint.msgpack"
    flags = ["--total-timesteps", "4096", "--learning-rate", "0.001", "--save-model", "--checkpoint-every", "3"]
    monkeypatch.setattr(sys, "argv", [case.script, "--resume", path, *flags])
    args = resume_args(module.Args, checkpoint, path)
    assert (args.total_timesteps, args.learning_rate, args.save_model, args.checkpoint_every) == (4096, 0.001, True, 3)
    assert {**vars(args), "total_timesteps": 0, "learning_rate": 0, "save_model": 0, "checkpoint_every": 0} == {
        **checkpoint["args"],
        "resume": path,
        "total_timesteps": 0,
        "learning_rate": 0,
        "save_model": 0,
        "checkpoint_every": 0,
    }
    monkeypatch.setattr(sys, "argv", [case.script, "--resume", path, "--num-steps", "8", "--seed", "2"])
    with pytest.raises(SystemExit) as exit_info:
        resume_args(module.Args, checkpoint, path)
    message = exit_info.value.code
    assert message.startswith("error: --num-steps 8 (saved: 16), --seed 2 (saved: 1) cannot change on --resume"), message
    assert "\n" not in message


def test_divergence_stops_before_any_checkpoint(case, interrupted_run, diverging_resume, background_runs):
    """A resume of a good checkpoint with --learning-rate 1e30, and a fresh run with --learning-rate
    1e30 (stdout on a terminal): each stops at the first iteration it runs, naming it, and exits
    non-zero without a traceback; the good checkpoint is left byte for byte as it was, and the
    fresh run writes none. The resume diverging shows that the new rate reaches the jitted
    iteration (Atari: the annealed schedule traced in; continuous, --no-anneal-lr: the optimiser
    state's rate)."""
    stopped_at = interrupted_run[4]["iteration"]
    process, good_path, digest = diverging_resume
    _, stderr = process.communicate(timeout=600)
    assert process.returncode != 0 and "Traceback" not in stderr
    step = f"{(stopped_at + 1) * case.batch:,}"
    assert (
        f"error: non-finite loss or parameters at iteration {stopped_at + 1} (global step {step}); "
        f"last good checkpoint: {good_path}" in stderr
    )
    assert hashlib.sha256(open(good_path, "rb").read()).hexdigest() == digest

    future, log_dir = background_runs["diverged"]
    returncode, stdout, stderr = future.result(timeout=600)
    assert returncode != 0 and "Traceback" not in stderr
    step = f"{case.batch:,}"
    assert f"error: non-finite loss or parameters at iteration 1 (global step {step}); no checkpoint was written" in stderr
    assert stdout.endswith("\n")  # on a terminal, the live line (if any) is ended before the error
    assert not os.path.exists(os.path.join(only_run_dir(log_dir), "checkpoint.msgpack"))


def test_bad_resume_files_give_one_clear_line(case, tmp_path):
    """Each bad file through load_msgpack with the script's keys (what --resume calls first), and
    one of them through a real run: one error line on stderr, a non-zero exit, no traceback."""
    import torch

    other_script = CONTINUOUS if case.script == ATARI else ATARI
    junk = tmp_path / "junk.msgpack"
    junk.write_bytes(b"\x00not a checkpoint")
    torch_checkpoint = tmp_path / "checkpoint.pt"  # the torch twin's format
    torch.save({"script": case.script.removesuffix("_xla_jax"), "optimizer_state_dict": {}}, torch_checkpoint)
    saved_model = tmp_path / f"{case.script}.cleanrl_model"  # the --save-model file: weights, no optimiser
    saved_model.write_bytes(
        flax.serialization.msgpack_serialize({"script": case.script, "model_state_dict": {"w": np.zeros(3)}, "args": {}})
    )
    other = tmp_path / "other.msgpack"
    other.write_bytes(flax.serialization.msgpack_serialize({"script": other_script, "train_state": {"opt_state": {}}}))
    no_key = tmp_path / "no_key.msgpack"  # hand-edited: the PRNG key taken out
    common = {"run_name": "run", "args": {}, "iteration": 3, "global_step": 3, "rng": {"python": {}}}
    state = {"train_state": {"opt_state": {}}, "normalizers": {}}
    no_key.write_bytes(flax.serialization.msgpack_serialize({"script": case.script, **common, **state}))
    for path, fragment in [
        (tmp_path / "missing.msgpack", "does not exist"),
        (junk, "is not a readable checkpoint"),
        (torch_checkpoint, f"is a torch checkpoint of '{case.script.removesuffix('_xla_jax')}', not one of '{case.script}'"),
        (saved_model, "is not a resumable checkpoint (no optimiser state)"),
        (other, f"is a checkpoint of '{other_script}', not of '{case.script}'"),
        (no_key, "has no 'key' entry"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            load_msgpack(str(path), case.script, case.checkpoint_keys)
        message = exit_info.value.code
        assert isinstance(message, str) and "\n" not in message, message
        assert message.startswith(f"error: --resume {str(path)!r} ") and fragment in message, message

    result = run_script(case.script, "--resume", str(junk), timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [f"error: --resume {str(junk)!r} is not a readable checkpoint (ExtraData)"], result.stderr


def test_ctrl_c_during_start_up_always_stops_with_one_line(tmp_path):
    """Ctrl-C while the libraries load (EnvPool imports JAX), while the envs, the network and Adam
    are set up and compiled: the process ends promptly with one line, never "Exception ignored" (a
    KeyboardInterrupt raised inside JAX's GC callback is swallowed there and the run would carry
    on), never a traceback, never training. The Atari twin stands for both: same set-up, same calls."""
    for delay in (0.5, 1.5, 2.5, 4.0):
        process = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "cleanrl", f"{ATARI}.py"), *CASES["atari"].small, "--total-timesteps", "64000"]
            + ["--log-dir", str(tmp_path / str(delay))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        signalled = time.time()
        stdout, stderr = process.communicate(timeout=120)
        if "step " in stdout:  # training had begun (a fast machine): then it is the checkpoint-and-exit-0 path
            assert process.returncode == 0 and "Ctrl-C: stopping after this iteration" in stderr, (delay, stderr)
            continue
        assert time.time() - signalled < 30, delay  # promptly: at most a compilation under way finishes first
        assert process.returncode == 128 + signal.SIGINT, (delay, process.returncode, stderr)
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("Ctrl-C during start-up: exiting before training began"), stderr
        # once its run folder was made, the line says it removed it (trial 15, S5): no empty folder is left either way
        assert lines[0] == "Ctrl-C during start-up: exiting before training began" or "removed its run folder" in lines[0]
        assert not os.path.exists(tmp_path / str(delay)) or os.listdir(tmp_path / str(delay)) == []


@pytest.fixture(scope="module")
def filmed_run(background_runs):
    """The 2-iteration run with --capture-video --video-every 2, its stdout on a terminal."""
    future, log_dir = background_runs["filmed"]
    returncode, stdout, stderr = future.result(timeout=600)
    return returncode, stdout, stderr, only_run_dir(log_dir)


def test_capture_video_films_evaluation_episodes(case, filmed_run):
    returncode, stdout, stderr, run_dir = filmed_run
    assert returncode == 0, stderr[-3000:]
    assert os.listdir(os.path.join(run_dir, "videos")) == ["iteration-2"]  # every 2 iterations and the last, not 1
    video_dir = os.path.join(run_dir, "videos", "iteration-2")
    assert f"evaluation video written: {video_dir}" in stdout
    frames = decoded_video(os.path.join(video_dir, "eval-episode-0.mp4"))
    if case.script == ATARI:
        assert frames.shape[1:] == (210, 160, 3)
    from cleanrl_utils.evaluate import load_checkpoint

    model = load_checkpoint(os.path.join(video_dir, "model.cleanrl_model"))  # the --save-model format
    assert model["script"] == case.script and model["args"]["env_id"] == case.filmed[1]


def test_progress_is_one_live_line_on_a_terminal(case, filmed_run):
    """On a terminal the progress line is rewritten in place ("\\r\\x1b[K": column 0, clear the
    line) and only the final one ends with a newline; the compilation count follows it."""
    returncode, stdout, stderr, _ = filmed_run
    assert returncode == 0, stderr[-3000:]
    segments = stdout.split("\r\x1b[K")
    assert len(segments) == 3, stdout  # the live line after iteration 1, rewritten by the final one
    assert segments[1].startswith("step ") and "\n" not in segments[1]
    total = f"{2 * case.filmed_batch:,}"
    final_line, rest = segments[2].split("\n", 1)
    assert final_line.startswith(f"step {total}/{total}  SPS "), final_line
    assert re.match(r"XLA compilations: \d+ in iteration 1 \(.*\), 0 in the 1 later iterations\n", rest), rest

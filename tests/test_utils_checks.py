"""cleanrl_utils.checks: every check's one line, `error: ...`, naming the bad value and what is allowed."""

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers import REPO

from cleanrl_utils import checks
from cleanrl_utils.checks import (
    MAX_SEED,
    available_memory_bytes,
    check_continuous_envpool_id,
    check_envpool_id,
    check_epsilon_schedule,
    check_gymnasium_env,
    check_memory,
    check_non_negative,
    check_positive,
    check_replay_args,
    check_rollout_shape,
    check_run_args,
    flag,
)

CORES = len(os.sched_getaffinity(0))
THREADS_ERROR = (
    f"error: --torch-threads must be in 0..{4 * CORES} (0 = auto; at most 4 per core, and this machine gives {CORES}: "
    "past the cores, threads only wait for one another), got {}"
)


def one_line_exit(call, expected: str) -> str:
    """`call()` exits with exactly the one line `expected`."""
    with pytest.raises(SystemExit) as exit_info:
        call()
    message = exit_info.value.code
    assert isinstance(message, str) and "\n" not in message
    assert message == expected
    return message


def run_args(**overrides):
    defaults = dict(seed=1, total_timesteps=1000, learning_rate=2.5e-4, video_every=10, gamma=0.99, gae_lambda=0.95) | dict(
        checkpoint_every=0, torch_threads=0
    )
    return SimpleNamespace(**(defaults | overrides))


def test_flag():
    assert flag("num_envs") == "--num-envs"


def test_valid_run_args_pass():
    check_run_args(run_args())
    check_run_args(run_args(max_episode_steps=2**30, v_min=-10.0, v_max=10.0, n_atoms=10_000))  # the widest allowed
    check_run_args(run_args(seed=0))
    check_run_args(run_args(seed=MAX_SEED, gamma=1.0, gae_lambda=0.0))
    check_run_args(SimpleNamespace(**{k: v for k, v in vars(run_args()).items() if k not in ("gae_lambda", "torch_threads")}))


@pytest.mark.parametrize("seed", [-1, 2**31, 2**32, 2**40])
def test_seed_bounds(seed):
    one_line_exit(
        lambda: check_run_args(run_args(seed=seed)),
        f"error: --seed must be in 0..2147483647 (seeds are 32-bit signed integers in every script here), got {seed}",
    )
    assert MAX_SEED == 2**31 - 1


def test_a_support_float32_places_to_a_percent_of_its_spacing_is_accepted():
    """Trial 15, S3: [0, 1] with 10,000 atoms (1e-4 apart, about 840 float32 steps) was refused as "closer than
    float32 keeps apart"."""
    check_run_args(run_args(v_min=0.0, v_max=1.0, n_atoms=10_000))
    check_run_args(run_args(v_min=-10.0, v_max=10.0, n_atoms=51))


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"total_timesteps": 0}, "error: --total-timesteps must be a positive integer, got 0"),
        ({"learning_rate": -1e-3}, "error: --learning-rate must be positive and finite, got -0.001"),
        ({"learning_rate": 0.0}, "error: --learning-rate must be positive and finite, got 0.0"),
        ({"learning_rate": float("nan")}, "error: --learning-rate must be a finite number, got nan"),
        ({"learning_rate": float("inf")}, "error: --learning-rate must be a finite number, got inf"),
        ({"gae_lambda": float("nan")}, "error: --gae-lambda must be a finite number, got nan"),
        ({"video_every": -2}, "error: --video-every must be a positive integer, got -2"),
        ({"gamma": 0.0}, "error: --gamma must be in (0, 1], got 0.0"),
        ({"gamma": 1.5}, "error: --gamma must be in (0, 1], got 1.5"),
        ({"gamma": float("nan")}, "error: --gamma must be a finite number, got nan"),
        ({"gae_lambda": -0.1}, "error: --gae-lambda must be in [0, 1], got -0.1"),
        (
            {"checkpoint_every": -1},
            "error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got -1",
        ),
        ({"torch_threads": -2}, THREADS_ERROR.format(-2)),
        ({"torch_threads": 100_000}, THREADS_ERROR.format(100_000)),  # trial 11 N4: was a segmentation fault, no line
        (  # trial 14: EnvPool's 32-bit step count gave a 22-line TypeError, and an empty run folder
            {"max_episode_steps": 2**31 - 1},
            "error: --max-episode-steps must be at most 1,073,741,824 (episode steps are counted in 32 bits), got 2147483647",
        ),
        # trial 15, S6: 2^63 and 10^20 env steps were accepted and trained
        (
            {"total_timesteps": 2**63},
            "error: --total-timesteps must be at most 1,000,000,000,000 (10^12 env steps), got 9223372036854775808",
        ),
        # trial 14: atoms too close for float32 collapse (a traceback, or a run that learnt nothing); trial 15, S3: the
        # line now states the rule it applies (100 float32 steps), not "closer than float32 keeps apart"
        (
            {"v_min": 0.0, "v_max": 1e-45, "n_atoms": 51},
            "error: --v-min 0.0, --v-max 1e-45 and --n-atoms 51 put the atoms 2e-47 apart, too close for float32 at this "
            "scale (one float32 step at max(1, |v-min|, |v-max|) is 1.19e-07; the atoms must be at least 100 steps, 1.19e-05, apart): widen the "
            "support or use fewer atoms",
        ),
        (
            {"v_min": 100_000.0, "v_max": 100_010.0, "n_atoms": 1001},
            "error: --v-min 100000.0, --v-max 100010.0 and --n-atoms 1001 put the atoms 0.01 apart, too close for float32 "
            "at this scale (one float32 step at max(1, |v-min|, |v-max|) is 0.0119; the atoms must be at least 100 steps, 1.19, apart): widen the "
            "support or use fewer atoms",
        ),
    ],
)
def test_run_arg_errors(overrides, expected):
    one_line_exit(lambda: check_run_args(run_args(**overrides)), expected)


def test_omp_num_threads_that_auto_would_follow_is_bounded_as_the_flag_is(monkeypatch):
    """Trial 12, P2: --torch-threads 100000 was refused, but OMP_NUM_THREADS=100000 with --torch-threads 0 (auto)
    still reached torch: a segfault with no line, or an EnvPool traceback. An explicit flag overrides the variable."""
    monkeypatch.setenv("OMP_NUM_THREADS", "100000")
    message = "error: OMP_NUM_THREADS=100000 (which --torch-threads 0, auto, follows) must be at most"
    with pytest.raises(SystemExit) as exit_info:
        check_run_args(run_args(torch_threads=0))
    assert str(exit_info.value.code).startswith(message)
    check_run_args(run_args(torch_threads=1))
    monkeypatch.setenv("OMP_NUM_THREADS", str(4 * CORES))
    check_run_args(run_args(torch_threads=0))


def test_a_script_without_gae_lambda_is_not_told_about_it():
    """REINFORCE has --gamma and no --gae-lambda: its gamma error must not name a flag it does not have."""
    args = run_args(gamma=0.0)
    del args.gae_lambda
    one_line_exit(lambda: check_run_args(args), "error: --gamma must be in (0, 1], got 0.0")
    args.gamma = 0.99
    check_run_args(args)


def test_check_non_negative_allows_zero_and_names_the_flag():
    check_non_negative(SimpleNamespace(noise_clip=0.0, policy_noise=0.2), "noise_clip", "policy_noise")
    one_line_exit(
        lambda: check_non_negative(SimpleNamespace(policy_noise=-0.1), "policy_noise"),
        "error: --policy-noise must be >= 0 and finite (0 = off), got -0.1",
    )
    for bad in ("nan", "inf"):  # NaN passes `value < 0`; an infinite noise scale is no noise scale
        one_line_exit(
            lambda: check_non_negative(SimpleNamespace(noise_clip=float(bad)), "noise_clip"),
            f"error: --noise-clip must be >= 0 and finite (0 = off), got {bad}",
        )


def test_check_positive_skips_none_and_names_the_flag():
    check_positive(SimpleNamespace(max_episode_steps=None, target_kl=0.01), "max_episode_steps", "target_kl")
    check_positive(SimpleNamespace(), "learning_rate")  # a flag the script does not have (SAC: --policy-lr, --q-lr)
    one_line_exit(
        lambda: check_positive(SimpleNamespace(max_episode_steps=0), "max_episode_steps"),
        "error: --max-episode-steps must be a positive integer, got 0",
    )
    one_line_exit(
        lambda: check_positive(SimpleNamespace(target_kl=-0.5), "target_kl"),
        "error: --target-kl must be positive and finite, got -0.5",
    )
    for bad in ("nan", "inf", "-inf"):  # NaN passes `value <= 0`: --max-kl nan trained nothing and exited 0
        one_line_exit(
            lambda: check_positive(SimpleNamespace(max_kl=float(bad)), "max_kl"),
            f"error: --max-kl must be positive and finite, got {bad}",
        )


@pytest.mark.parametrize(
    "shape,expected",
    [
        ((0, 128, 4, 4, 1000), "error: --num-envs must be a positive integer, got 0"),
        ((8, -1, 4, 4, 1000), "error: --num-steps must be a positive integer, got -1"),
        ((8, 128, 0, 4, 1000), "error: --num-minibatches must be a positive integer, got 0"),
        ((8, 128, 4, 0, 1000), "error: --update-epochs must be a positive integer, got 0"),
        (
            (8, 128, 3, 4, 10_000),
            "error: --num-minibatches 3 does not divide the batch size 1024 (= --num-envs 8 x --num-steps 128)",
        ),
        (  # issue 16, defect 13: one row per minibatch has no standard deviation
            (1, 8, 8, 4, 64),
            "error: --num-minibatches 8 leaves 1 row per minibatch (batch size 8); a minibatch needs at least 2 rows",
        ),
        ((8, 128, 4, 4, 1000), "error: --total-timesteps 1000 is smaller than one rollout (1024 steps)"),
    ],
)
def test_rollout_shape_errors(shape, expected):
    one_line_exit(lambda: check_rollout_shape(*shape), expected)


def test_valid_rollout_shapes_pass():
    check_rollout_shape(8, 128, 4, 4, 1024)
    check_rollout_shape(1, 8, 4, 1, 64)  # two rows per minibatch: enough


def test_check_memory_counts_a_loaded_buffer_once(monkeypatch):
    """#9: a resumed run holds its buffer already (the loaded checkpoint's arrays, which the new buffer takes over).
    With 7 GiB needed, 6 of them loaded and 3 GiB free, the run fits; counting the loaded 6 again it would not."""
    gib = 2**30
    monkeypatch.setattr(checks, "available_memory_bytes", lambda: 3 * gib)
    check_memory(7 * gib, "the replay buffer", "--buffer-size", held=6 * gib)
    check_memory(3 * gib, "the replay buffer", "--buffer-size")
    one_line_exit(
        lambda: check_memory(7 * gib, "the replay buffer", "--buffer-size", held=3 * gib),
        "error: the replay buffer needs 7.0 GiB (3.0 GiB of it loaded already), more than the 3.0 GiB of memory "
        "available; lower --buffer-size",
    )
    one_line_exit(
        lambda: check_memory(7 * gib, "the replay buffer", "--buffer-size"),
        "error: the replay buffer needs 7.0 GiB, more than the 3.0 GiB of memory available; lower --buffer-size",
    )


def test_envpool_envs_beyond_the_address_space_limit_are_refused_in_one_line(tmp_path):
    """Trial 29: under `ulimit -v 12000000`, 30,000 Pong envs passed the check against the free memory (19.6 GiB);
    EnvPool's std::bad_alloc then aborted the run (SIGABRT, no line) and left an empty run folder. Under a 6 GiB
    limit, 16,384 Pong envs (8 GiB at 512 KiB each) are refused against what the process may still map."""
    import resource

    if available_memory_bytes() < 10 * 2**30:
        pytest.skip("needs more than 8 GiB free, so that the limit and not the free memory is what refuses")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, resource.RLIM_INFINITY))

    command = [sys.executable, "cleanrl/ppo_atari_envpool.py", "--env-id", "Pong-v5", "--num-envs", "16384", "--num-steps"]
    command += ["2", "--num-minibatches", "1", "--total-timesteps", "10000000", "--log-dir", str(tmp_path / "runs")]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, preexec_fn=limit, timeout=300)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
    assert re.fullmatch(
        r"error: EnvPool's 16,384 simulators \(at least\) needs 8\.0 GiB, more than the [\d.]+ GiB this process may "
        r"still map \(ulimit -v\); lower --num-envs\n",
        result.stderr,
    ), result.stderr
    assert not (tmp_path / "runs").exists()


def test_check_memory():
    available = available_memory_bytes()
    assert 2**20 < available < 2**50
    check_memory(2**20, "the rollout storage", "--num-envs or --num-steps")
    with pytest.raises(SystemExit) as exit_info:
        check_memory(2**60, "the rollout storage", "--num-envs or --num-steps")
    message = exit_info.value.code
    assert "\n" not in message
    assert re.fullmatch(
        r"error: the rollout storage needs 1,073,741,824\.0 GiB, more than the [\d,]+\.\d GiB of memory available; "
        r"lower --num-envs or --num-steps",
        message,
    ), message


# ---- EnvPool ids ----


def family_ids(family: str) -> set[str]:
    from envpool.registration import registry

    return {env_id for env_id, spec in registry.specs.items() if spec[0] == family}


def test_envpool_ids_of_the_family_pass():
    check_envpool_id("Pong-v5", "envpool.atari")
    check_envpool_id("Hopper-v4", "envpool.mujoco.gym")
    check_envpool_id("CheetahRun-v1", "envpool.mujoco.dmc")


def test_an_id_of_another_family_is_named_as_such_without_a_suggestion():
    # issue 16: "Pong-v5 ... did you mean Ant-v5?"
    message = one_line_exit(
        lambda: check_envpool_id("Pong-v5", "envpool.mujoco.gym"),
        "error: --env-id 'Pong-v5' is an EnvPool Atari environment; this script takes MuJoCo ones, "
        "e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4",
    )
    assert "did you mean" not in message
    one_line_exit(
        lambda: check_envpool_id("Hopper-v4", "envpool.atari"),
        "error: --env-id 'Hopper-v4' is an EnvPool MuJoCo environment; this script takes Atari ones, "
        "e.g. Pong-v5, Breakout-v5, BeamRider-v5",
    )
    one_line_exit(
        lambda: check_envpool_id("CartPole-v1", "envpool.mujoco.gym"),
        "error: --env-id 'CartPole-v1' is an EnvPool classic control environment; this script takes MuJoCo ones, "
        "e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4",
    )


@pytest.mark.parametrize(
    "env_id,family,expected_first",
    [
        ("Pongg-v5", "envpool.atari", "Pong-v5"),
        ("Hoper-v4", "envpool.mujoco.gym", "Hopper-v4"),
        ("Pnog-v5", "envpool.atari", None),
    ],
)
def test_close_matches_come_from_the_scripts_family_only(env_id, family, expected_first):
    with pytest.raises(SystemExit) as exit_info:
        check_envpool_id(env_id, family)
    message = exit_info.value.code
    assert "\n" not in message
    assert message.startswith(f"error: --env-id {env_id!r} is not an EnvPool ")
    if "did you mean" in message:
        suggestions = message.split("did you mean ")[1].rstrip("?").split(", ")
        assert set(suggestions) <= family_ids(family), suggestions
        if expected_first:
            assert suggestions[0] == expected_first
    else:
        assert expected_first is None and message.endswith("; e.g. Pong-v5, Breakout-v5, BeamRider-v5")


def test_the_off_policy_continuous_scripts_take_mujoco_ids_and_pendulum():
    check_continuous_envpool_id("Hopper-v4")
    check_continuous_envpool_id("Pendulum-v1")
    one_line_exit(
        lambda: check_continuous_envpool_id("CartPole-v1"),
        "error: --env-id 'CartPole-v1' is an EnvPool classic control environment; this script takes MuJoCo ones, "
        "e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4 (or Pendulum-v1)",
    )
    one_line_exit(
        lambda: check_continuous_envpool_id("Pendulm-v1"),
        "error: --env-id 'Pendulm-v1' is not an EnvPool MuJoCo environment; did you mean Pendulum-v1, InvertedPendulum-v5, "
        "InvertedPendulum-v4?",
    )


def test_an_id_nothing_like_any_gives_examples():
    one_line_exit(
        lambda: check_envpool_id("xyzzy", "envpool.mujoco.gym"),
        "error: --env-id 'xyzzy' is not an EnvPool MuJoCo environment; e.g. HalfCheetah-v4, Hopper-v4, Walker2d-v4, Ant-v4",
    )


def test_gymnasium_env_spaces_and_close_matches():
    observation_space, action_space = check_gymnasium_env("CartPole-v1", "CartPole-v1")
    assert observation_space.shape == (4,) and action_space.n == 2
    one_line_exit(
        lambda: check_gymnasium_env("CartPol-v1", "CartPole-v1"),
        "error: --env-id 'CartPol-v1' is not a registered Gymnasium environment; did you mean CartPole-v1, CartPole-v0, phys2d/CartPole-v1?",
    )
    one_line_exit(
        lambda: check_gymnasium_env("Nothing-like-it-v9", "CartPole-v1, Acrobot-v1"),
        "error: --env-id 'Nothing-like-it-v9' is not a registered Gymnasium environment; e.g. CartPole-v1, Acrobot-v1",
    )


def test_a_gymnasium_env_that_cannot_be_built_is_one_line():
    import gymnasium as gym

    def broken(**kwargs):
        raise RuntimeError("no simulator here\nsecond line")

    gym.register("BrokenForTest-v0", entry_point=broken)
    try:
        one_line_exit(
            lambda: check_gymnasium_env("BrokenForTest-v0", "CartPole-v1"),
            "error: --env-id 'BrokenForTest-v0' could not be created (RuntimeError: no simulator here)",
        )
    finally:
        del gym.registry["BrokenForTest-v0"]


def replay_args(**changes):
    defaults = dict(num_envs=2, buffer_size=1000, batch_size=32, total_timesteps=10_000, learning_starts=500, tau=1.0)
    return SimpleNamespace(**{**defaults, **changes})


def test_check_replay_args():
    check_replay_args(replay_args())
    check_replay_args(replay_args(learning_starts=0, tau=0.005, batch_size=1000))
    cases = [
        (dict(batch_size=0), "error: --batch-size must be a positive integer, got 0"),
        (dict(batch_size=1001), "error: --batch-size 1001 is larger than --buffer-size 1000"),
        (dict(num_envs=8, buffer_size=100, batch_size=8), None),
        (dict(total_timesteps=1), "error: --total-timesteps 1 is less than one step of --num-envs 2 envs"),
        (
            dict(learning_starts=10_000),
            "error: --learning-starts 10000 must be in [0, --total-timesteps 10000) (else the run never trains)",
        ),
        (
            dict(learning_starts=-1),
            "error: --learning-starts -1 must be in [0, --total-timesteps 10000) (else the run never trains)",
        ),
        (dict(tau=0.0), "error: --tau must be in (0, 1] (1 = copy the weights), got 0.0"),
    ]
    for changes, expected in cases:
        if expected is None:
            check_replay_args(replay_args(**changes))  # 12 per env: enough by default ...
            one_line_exit(  # ... not for a script that asks for 16
                lambda: check_replay_args(replay_args(**changes), min_per_env=16),
                "error: --buffer-size 100 leaves fewer than 16 transitions per env (--num-envs 8): set --buffer-size >= 128",
            )
        else:
            one_line_exit(lambda: check_replay_args(replay_args(**changes)), expected)


def test_a_resumed_run_may_end_at_or_before_learning_starts():
    """A fresh run that would never train is refused; a resumed one may be shortened to any length (it may have
    trained already, and one that has not asked to stop)."""
    check_replay_args(replay_args(total_timesteps=400), resumed=True)
    check_replay_args(replay_args(total_timesteps=500), resumed=True)
    one_line_exit(
        lambda: check_replay_args(replay_args(total_timesteps=500)),
        "error: --learning-starts 500 must be in [0, --total-timesteps 500) (else the run never trains)",
    )
    one_line_exit(
        lambda: check_replay_args(replay_args(learning_starts=-1), resumed=True),
        "error: --learning-starts -1 must be in [0, --total-timesteps 10000) (else the run never trains)",
    )


def test_check_epsilon_schedule():
    args = lambda **changes: SimpleNamespace(**{"start_e": 1.0, "end_e": 0.05, "exploration_fraction": 0.5, **changes})  # noqa: E731
    check_epsilon_schedule(args())
    check_epsilon_schedule(args(start_e=0.3, end_e=0.3, exploration_fraction=1.0))
    one_line_exit(
        lambda: check_epsilon_schedule(args(start_e=1.5)), "error: --start-e must be in [0, 1] (a probability), got 1.5"
    )
    one_line_exit(
        lambda: check_epsilon_schedule(args(end_e=-0.1)), "error: --end-e must be in [0, 1] (a probability), got -0.1"
    )
    one_line_exit(
        lambda: check_epsilon_schedule(args(start_e=0.1, end_e=0.2)),
        "error: --end-e 0.2 must be <= --start-e 0.1 (epsilon decays from start to end)",
    )
    one_line_exit(
        lambda: check_epsilon_schedule(args(exploration_fraction=0.0)),
        "error: --exploration-fraction must be in (0, 1], got 0.0",
    )


# The NaN, infinite and wrongly signed flags of real scripts are in each script's BAD_INPUT (tests/bad_input.py).


def test_every_float_flag_is_finite_and_loss_coefficients_have_a_usable_sign():
    from dataclasses import replace

    from cleanrl.ppo import Args

    for name, value, line in [
        ("clip_coef", -0.2, "error: --clip-coef must be positive and finite, got -0.2"),
        ("max_grad_norm", -1.0, "error: --max-grad-norm must be positive and finite, got -1.0"),  # flips the gradient
        ("target_kl", float("nan"), "error: --target-kl must be a finite number, got nan"),  # no early stop, silently
        ("vf_coef", -1.0, "error: --vf-coef must be >= 0 and finite (0 = off), got -1.0"),  # ascends the value error
        ("ent_coef", float("inf"), "error: --ent-coef must be a finite number, got inf"),
        ("gae_lambda", float("nan"), "error: --gae-lambda must be a finite number, got nan"),
    ]:
        one_line_exit(lambda: check_run_args(replace(Args(), **{name: value})), line)
    check_run_args(replace(Args(), ent_coef=0.0, vf_coef=0.0, target_kl=None))  # 0 turns a term off; None: no stop


def test_suggestions_are_only_envs_the_script_takes():
    """`dqn.py --env-id Ant` must not suggest Ant-v5 (continuous actions); without a filter it is the closest match."""
    import gymnasium as gym

    discrete = lambda obs, action: isinstance(action, gym.spaces.Discrete)  # noqa: E731
    one_line_exit(
        lambda: check_gymnasium_env("Ant", "CartPole-v1, Acrobot-v1", fits=discrete),
        "error: --env-id 'Ant' is not a registered Gymnasium environment; e.g. CartPole-v1, Acrobot-v1",
    )
    with pytest.raises(SystemExit, match="did you mean Ant-v5"):
        check_gymnasium_env("Ant", "CartPole-v1, Acrobot-v1")
    with pytest.raises(SystemExit, match="did you mean CartPole-v1, CartPole-v0"):
        check_gymnasium_env("CartPol", "CartPole-v1", fits=discrete)


def test_pendulum_spaces_build_without_precision_warnings():
    """EnvPool's Pendulum spec gives float32 Boxes float64 bounds; once the id is checked, building its spaces
    (as the off-policy scripts do) warns nothing to the user."""
    code = "from cleanrl_utils.checks import check_continuous_envpool_id; import envpool\n"
    code += "check_continuous_envpool_id('Pendulum-v1'); spec = envpool.make_spec('Pendulum-v1')\n"
    code += "spec.action_space, spec.observation_space; print('built')"
    result = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.stdout == "built\n" and "precision" not in result.stderr, result.stderr


def test_the_rollout_shape_line_names_the_scripts_own_env_flag():
    # the distributed script has --local-num-envs, no --num-envs
    one_line_exit(
        lambda: check_rollout_shape(4, 128, 3, 4, 10**6, "local_num_envs"),
        "error: --num-minibatches 3 does not divide the batch size 512 (= --local-num-envs 4 x --num-steps 128)",
    )


def test_suggestions_are_only_envs_this_install_can_create():
    """Trial Q7: 'Hoppr-v4' suggested Hopper-v3, which Gymnasium registers but refuses to make (mujoco-py moved to
    gymnasium-robotics); the suggestions keep the ids that build here."""
    with pytest.raises(SystemExit) as error:
        check_gymnasium_env("Hoppr-v4", "HalfCheetah-v4, Hopper-v5, Walker2d-v5")
    suggestions = str(error.value).split("did you mean ")[1].rstrip("?").split(", ")
    assert "Hopper-v4" in suggestions and "Hopper-v5" in suggestions
    assert not {"Hopper-v3", "Hopper-v2"} & set(suggestions), suggestions

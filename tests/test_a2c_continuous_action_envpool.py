"""Tests of cleanrl/a2c_continuous_action_envpool.py: the loss on a tiny hand-made batch (stale rows contribute
nothing), real short runs (determinism, resume), a learning run on InvertedPendulum and its saved-model evaluation
through the command line, bad input. Its GAE, normalisers and masking are the PPO script's, tested there."""

import os
import shutil
import sys

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import assert_one_error_line, evaluate_cli_returns, only_run_dir, read_scalars, run_python, run_script

import cleanrl.a2c_continuous_action_envpool as a2c
from cleanrl.a2c_continuous_action_envpool import Agent, Args, a2c_loss, validate_args

SCRIPT = "a2c_continuous_action_envpool"


def test_advantages_are_in_raw_reward_units_and_targets_in_the_critics():
    """Tianshou's A2C units, by hand: one env, a termination at row 0 (row 1 stale), then a truncation at row 3. With
    values v in the critic's units (returns over std): A_0 = r_0 - std v_0; A_2 = r_2 + gamma std v_3 - std v_2 +
    gamma lambda A_3 with A_3 = r_3 + gamma std v_4 - std v_3 (a truncation bootstraps from the stale row's value);
    targets A / std + v. Scaling every raw reward and the std by k scales the advantages by k and leaves the targets."""
    args = a2c.Args(gamma=0.9, gae_lambda=0.5)
    values = torch.tensor([[0.5], [9.0], [0.2], [-0.4], [0.3]])
    rewards = torch.tensor([[2.0], [0.0], [1.0], [3.0]])
    flags = dict(
        terminations=torch.tensor([[True], [False], [False], [False]]),
        truncations=torch.tensor([[False], [False], [False], [True]]),
        prev_episode_over=torch.tensor([False]),
    )
    std = 4.0
    advantages, targets, valid = a2c.advantages_and_targets(values, rewards, rewards / 100, **flags, return_std=std, args=args)
    a3 = 3.0 + 0.9 * std * 0.3 - std * -0.4
    a2 = 1.0 + 0.9 * std * -0.4 - std * 0.2 + 0.9 * 0.5 * a3
    expected = torch.tensor([[2.0 - std * 0.5], [0.0], [a2], [a3]])
    assert valid[:, 0].tolist() == [True, False, True, True]
    torch.testing.assert_close(advantages, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(targets[valid], (expected / std + values[:-1])[valid], rtol=1e-5, atol=1e-6)
    k = 7.0
    advantages_k, targets_k, _ = a2c.advantages_and_targets(
        values, rewards * k, rewards / 100, **flags, return_std=std * k, args=args
    )
    torch.testing.assert_close(advantages_k, advantages * k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(targets_k, targets, rtol=1e-5, atol=1e-6)


def test_loss_on_a_hand_made_batch_ignores_stale_rows():
    """Three rows, the middle one stale. With the actor's mean and the critic pinned by hand, every term is known in
    closed form: a Gaussian of std e^-0.5 at mean 0, value 0.25 everywhere."""
    torch.manual_seed(0)
    agent = Agent(2, 1)
    with torch.no_grad():
        for net, bias in ((agent.actor_mean, 0.0), (agent.critic, 0.25)):
            net[-1].weight.zero_()
            net[-1].bias.fill_(bias)
    args = Args(ent_coef=0.01, vf_coef=0.5)
    obs = torch.tensor([[0.1, 0.2], [9.0, -9.0], [0.3, -0.4]])
    actions = torch.tensor([[0.5], [7.0], [-1.0]])
    advantages, returns = torch.tensor([2.0, 1e3, -1.0]), torch.tensor([1.25, -1e3, 0.25])
    valid = torch.tensor([True, False, True])
    loss, stats = a2c_loss(agent, obs, actions, advantages, returns, valid, args)

    std = np.exp(-0.5)
    logprob = lambda a: -(a**2) / (2 * std**2) - np.log(std) - 0.5 * np.log(2 * np.pi)  # noqa: E731
    policy_loss = -(logprob(0.5) * 2.0 + logprob(-1.0) * -1.0) / 2
    value_loss = ((0.25 - 1.25) ** 2 + 0.0) / 2  # mean squared error, no 1/2 (Tianshou)
    entropy = 0.5 + 0.5 * np.log(2 * np.pi) + np.log(std)
    assert stats["policy_loss"].item() == pytest.approx(policy_loss, rel=1e-5)
    assert stats["value_loss"].item() == pytest.approx(value_loss, rel=1e-5)
    assert stats["entropy"].item() == pytest.approx(entropy, rel=1e-5)
    assert loss.item() == pytest.approx(policy_loss + 0.5 * value_loss - 0.01 * entropy, rel=1e-5)

    # the stale row's contents change neither the loss nor its gradient
    def grads(obs, actions, advantages, returns):
        agent.zero_grad()
        loss, _ = a2c_loss(agent, obs, actions, advantages, returns, valid, args)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in agent.parameters()]

    base_loss, base_grads = grads(obs, actions, advantages, returns)
    other = [x.clone() for x in (obs, actions, advantages, returns)]
    other[0][1], other[1][1], other[2][1], other[3][1] = torch.tensor([-50.0, 3.0]), -4.0, -7e3, 5e3
    other_loss, other_grads = grads(*other)
    torch.testing.assert_close(other_loss, base_loss, rtol=1e-5, atol=1e-5)
    for g, g0 in zip(other_grads, base_grads):
        torch.testing.assert_close(g, g0, rtol=1e-5, atol=1e-5)


SHORT_RUN = ["--env-id", "HalfCheetah-v4", "--num-envs", "4", "--num-steps", "16", "--max-episode-steps", "50"]


@pytest.fixture(scope="module")
def two_short_runs(tmp_path_factory):
    """The same seeded short HalfCheetah run (8 iterations, 50-step time limit so episodes end) twice."""
    dirs = []
    for i in range(2):
        log_dir = tmp_path_factory.mktemp(f"cheetah{i}")
        result = run_script(SCRIPT, *SHORT_RUN, "--total-timesteps", "512", "--seed", "5", "--log-dir", str(log_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        dirs.append(only_run_dir(log_dir))
    return dirs


def test_same_seed_gives_identical_losses(two_short_runs):
    first, second = (read_scalars(d) for d in two_short_runs)
    tags = {"losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/explained_variance"}
    assert tags | {"charts/episodic_return", "charts/learning_rate"} <= set(first)
    assert len(first["losses/value_loss"]) == 8
    for tag in sorted(set(first) - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_resume_continues_step_counter_and_normalisers(two_short_runs, tmp_path):
    """The finished run's final checkpoint, resumed (in a copy of its folder) with a larger --total-timesteps: the
    step counter and the lr schedule continue, the saved normalisers keep counting."""
    run_dir = str(shutil.copytree(two_short_runs[0], tmp_path / "run"))
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    before = torch.load(checkpoint_path, weights_only=True)
    assert before["iteration"] == 8 and before["global_step"] == 512
    assert "optimizer_state_dict" in before and "square_avg" in str(before["optimizer_state_dict"])  # RMSprop
    assert before["obs_rms"]["count"] == 4 * (8 * 16 + 1)  # the reset batch and one batch per step
    # returns enter the reward scaler once per non-stale step: 128 steps per env, one stale after the 50th and 101st
    assert before["return_rms"]["count"] == 4 * (128 - 2)
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "1024")
    assert result.returncode == 0, result.stderr[-3000:]
    after = torch.load(checkpoint_path, weights_only=True)
    assert after["iteration"] == 16 and after["global_step"] == 1024
    assert after["obs_rms"]["count"] == before["obs_rms"]["count"] + 4 * (8 * 16 + 1)  # carried on, a new reset
    assert after["return_rms"]["count"] == before["return_rms"]["count"] + 4 * (128 - 2)
    scalars = read_scalars(run_dir)
    assert [step for step, _ in scalars["losses/value_loss"]] == list(range(64, 1025, 64))
    lrs = [value for _, value in scalars["charts/learning_rate"]]
    np.testing.assert_allclose(lrs[8:], [7e-4 * (1 - i / 16) for i in range(8, 16)], rtol=1e-5, atol=1e-6)


def test_a_checkpoint_from_before_raw_advantages_resumes_with_scaled_ones(two_short_runs, tmp_path):
    """Trial 7, R1: a checkpoint written before --raw-advantages existed trained on scaled advantages; a plain resume
    must keep them (not switch to today's default), and saying so with --no-raw-advantages is no change."""
    run_dir = str(shutil.copytree(two_short_runs[0], tmp_path / "run"))
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")
    old = torch.load(checkpoint_path, weights_only=False)
    del old["args"]["raw_advantages"]
    torch.save(old, checkpoint_path)
    result = run_script(SCRIPT, "--resume", checkpoint_path, "--total-timesteps", "768", "--no-raw-advantages")
    assert result.returncode == 0, result.stderr[-3000:]
    assert torch.load(checkpoint_path, weights_only=False)["args"]["raw_advantages"] is False


# Calibration, last-20 training-episode means at this budget: 1000.0 on seeds 1, 2 and 3, both with advantages in raw
# reward units (the default since the campaign's HalfCheetah finding, docs) and in scaled units
# (`cleanrl/a2c_continuous_action_envpool.py --env-id InvertedPendulum-v4 --total-timesteps 100000 --seed S`).
LEARNING_RUN = ["--env-id", "InvertedPendulum-v4", "--total-timesteps", "100000", "--seed", "1"]
LEARNING_RUN += ["--checkpoint-every", "400", "--keep-checkpoints"]  # 1,250 iterations of 80 steps: 4 kept
THRESHOLD = 900.0


def test_inverted_pendulum_learns(pendulum_run):
    returns = [value for _, value in read_scalars(pendulum_run)["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 50, returns[:20]
    final = np.mean(returns[-20:])
    assert final >= THRESHOLD, (final, returns[-40:])


EVAL_FLAGS = ["--no-cuda", "--torch-threads", "1"]


def test_saved_model_evaluates_from_the_command_line(pendulum_run):
    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    saved = torch.load(model_path, weights_only=True)
    assert saved["script"] == SCRIPT and {"model_state_dict", "args", "obs_rms", "return_rms"} <= set(saved)
    assert len(evaluate_cli_returns(model_path, "--episodes", "2", *EVAL_FLAGS)) == 2


def test_kept_checkpoints_evaluate_one_by_one_and_name_the_best(pendulum_run):
    """--keep-checkpoints leaves one file per save under its step; `evaluate --model-path <run folder>` plays each
    and names the best (Tianshou's "best test return during training")."""
    kept = sorted(name for name in os.listdir(pendulum_run) if name.startswith("checkpoint-"))
    steps = [32_000, 64_000, 96_000, 100_000]
    assert kept == [f"checkpoint-{step:09d}.pt" for step in steps]
    states = [torch.load(os.path.join(pendulum_run, name), weights_only=True) for name in kept]
    assert [state["global_step"] for state in states] == steps  # each file is its own save, not the last one
    assert [state["iteration"] for state in states] == [400, 800, 1200, 1250]
    last = torch.load(os.path.join(pendulum_run, "checkpoint.pt"), weights_only=True)
    assert all(torch.equal(last["model_state_dict"][k], v) for k, v in states[-1]["model_state_dict"].items())
    assert not torch.equal(states[0]["model_state_dict"]["actor_logstd"], states[-1]["model_state_dict"]["actor_logstd"])
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", pendulum_run, "--episodes", "2", "--greedy"]
    result = run_python(command[1:] + EVAL_FLAGS, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    means = {int(line.split()[1][:-1].replace(",", "")): float(line.split()[-3]) for line in lines[:-1]}
    assert sorted(means) == steps, result.stdout
    best_step = max(means, key=means.get)
    assert lines[-1] == f"best: step {best_step:,}, mean return {means[best_step]:.2f} (of 4 kept checkpoints)"


def test_an_older_kept_checkpoint_resumes_only_as_a_branch(pendulum_run, tmp_path):
    """Resuming checkpoint-000032000.pt in place would overwrite the run that went on to 100,000 steps: one line,
    every file as it was. The branch the line describes (a copy in a new folder) resumes from step 32,000."""
    files = {name: open(os.path.join(pendulum_run, name), "rb").read() for name in os.listdir(pendulum_run)}
    older = os.path.join(pendulum_run, "checkpoint-000032000.pt")
    result = run_script(SCRIPT, "--resume", older, "--total-timesteps", "33600")
    assert_one_error_line(result, [f"error: --resume {older!r} is an older checkpoint", f"mkdir {pendulum_run}-from-32000"])
    assert {name: open(os.path.join(pendulum_run, name), "rb").read() for name in os.listdir(pendulum_run)} == files
    branch = tmp_path / "branch"
    branch.mkdir()
    shutil.copy(older, branch / "checkpoint.pt")
    result = run_script(SCRIPT, "--resume", str(branch / "checkpoint.pt"), "--total-timesteps", "33600")
    assert result.returncode == 0, result.stderr[-3000:]
    assert torch.load(branch / "checkpoint.pt", weights_only=True)["global_step"] == 33_600


def test_checkpoint_pt_rolled_back_by_hand_to_an_older_kept_one_is_refused(pendulum_run, tmp_path):
    """Trial 13, Q6: the older kept checkpoint copied over checkpoint.pt resumed at its step and overwrote the newer
    kept ones. The step the checkpoint records is compared with the kept ones: one line, every file as it was."""
    run_dir = tmp_path / os.path.basename(pendulum_run)
    shutil.copytree(pendulum_run, run_dir)
    os.remove(run_dir / "checkpoint.pt")
    shutil.copy(run_dir / "checkpoint-000032000.pt", run_dir / "checkpoint.pt")
    files = {name: open(run_dir / name, "rb").read() for name in os.listdir(run_dir)}
    result = run_script(SCRIPT, "--resume", str(run_dir / "checkpoint.pt"), "--total-timesteps", "200000")
    assert_one_error_line(result, ["holds step 32,000, older than the kept checkpoints", f"mkdir {run_dir}-from-32000"])
    assert {name: open(run_dir / name, "rb").read() for name in os.listdir(run_dir)} == files


BAD_INPUT = [
    (["--env-id", "Pong-v5"], ["'Pong-v5'", "an EnvPool Atari environment"]),
    # trial 28: the kernel killed it (exit 137, no line, an empty run folder); at least 4.8 TiB here
    (["--num-envs", "10000000", "--total-timesteps", "10000000000"], ["EnvPool's 10,000,000 simulators", "--num-envs"]),
    (["--num-steps", "0"], ["--num-steps", "0"]),
    (["--max-grad-norm", "-1"], ["--max-grad-norm", "-1"]),
    (
        ["--vf-coef", "nan"],
        ["--vf-coef must be", "finite", "got nan"],
    ),  # was: the divergence line after the run folder was made
]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({"gae_lambda": 1.5}, ["--gae-lambda", "1.5"]),
        ({"reward_clip": 0.0}, ["--reward-clip", "0"]),
        ({"seed": -1}, ["--seed", "-1"]),
        ({"total_timesteps": 40}, ["--total-timesteps 40"]),
        # trial 31: the std exp(1e12) diverged at the first update, and the line blamed --learning-rate
        ({"init_logstd": 1e12}, ["--init-logstd must be in [-10, 5]", "got 1000000000000.0"]),
        ({"init_logstd": float("nan")}, ["--init-logstd must be a finite number", "got nan"]),
    ],
)
def test_validate_args_names_the_bad_value(overrides, expected):
    with pytest.raises(SystemExit) as error:
        validate_args(Args(**overrides))
    message = str(error.value.code)
    assert message.startswith("error: ") and "\n" not in message
    for fragment in expected:
        assert fragment in message, (fragment, message)
    validate_args(Args())  # the defaults pass

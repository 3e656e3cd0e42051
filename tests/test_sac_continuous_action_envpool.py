"""Tests of cleanrl/sac_continuous_action_envpool.py: the soft TD target and the actor/entropy losses computed by hand,
the squashed Gaussian's log-probability against torch's own transformed distribution, the batched critics against
two plain MLPs, Pendulum learning, the saved model evaluated and filmed, short real runs (tags, determinism,
checkpoint and resume with and without the buffer, divergence, Ctrl-C) and bad input. The replay rules are in
test_off_policy_replay.py."""

import math
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import (
    assert_one_error_line,
    decoded_video,
    only_run_dir,
    read_scalars,
    run_interrupted,
    run_python,
    run_script,
)

from cleanrl.sac_continuous_action_envpool import Actor, EntropyCoefficient, QNetworks, actor_loss, critic_loss

SCRIPT = "sac_continuous_action_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/qf1_loss", "losses/qf2_loss"}
TAGS |= {"losses/qf1_values", "losses/qf2_values", "losses/qf_loss", "losses/actor_loss", "losses/alpha", "losses/alpha_loss"}


# ---- the losses, by hand ----


class Fixed:
    """A stand-in network with fixed outputs: `get_action` for an actor, a call for the critics."""

    def __init__(self, actions=None, log_pi=None, q_values=None):
        self.actions, self.log_pi, self.q_values = actions, log_pi, q_values

    def get_action(self, obs):
        return self.actions, self.log_pi, self.actions

    def __call__(self, obs, actions, frozen=False):
        return self.q_values


def test_soft_td_target_by_hand():
    """y = r + gamma (1 - done) (min(Q1', Q2') - alpha log pi(a'|s')): row 0 a termination (no bootstrap), row 1 a
    truncation or a regular step (done 0: bootstraps from its real last observation)."""
    obs, actions = torch.zeros(2, 3), torch.zeros(2, 1)
    rewards, dones = torch.tensor([1.0, -2.0]), torch.tensor([1.0, 0.0])
    next_log_pi = torch.tensor([-1.5, 0.5])
    target_q = torch.tensor([[10.0, 4.0], [7.0, 6.0]])  # (critic, row): min over critics = [7, 4]
    q_now = torch.tensor([[0.5, 1.0], [2.0, -1.0]])
    actor, target_critic, critic = Fixed(torch.zeros(2, 1), next_log_pi), Fixed(q_values=target_q), Fixed(q_values=q_now)
    batch = (obs, actions, rewards, obs, dones)
    loss, stats = critic_loss(actor, critic, target_critic, batch, torch.tensor(0.2), 0.9)
    y = [1.0, -2.0 + 0.9 * (4.0 - 0.2 * 0.5)]  # row 0: 1 + 0; row 1: -2 + 0.9 * (min(4, 6) - 0.2 * 0.5) = 1.51
    qf1_loss = ((0.5 - y[0]) ** 2 + (1.0 - y[1]) ** 2) / 2
    qf2_loss = ((2.0 - y[0]) ** 2 + (-1.0 - y[1]) ** 2) / 2
    assert stats["qf1_loss"].item() == pytest.approx(qf1_loss) and stats["qf2_loss"].item() == pytest.approx(qf2_loss)
    assert loss.item() == pytest.approx(qf1_loss + qf2_loss)
    assert stats["qf1_values"].item() == pytest.approx(0.75) and stats["qf2_values"].item() == pytest.approx(0.5)


def test_actor_and_entropy_losses_by_hand_and_their_gradients_stay_apart():
    torch.manual_seed(0)
    actor = Actor(3, np.array([-2.0]), np.array([2.0]))
    critic = QNetworks(3, 1)
    entropy = EntropyCoefficient(0.2, autotune=True)
    with torch.no_grad():
        entropy.log_alpha.fill_(math.log(0.5))
    obs = torch.randn(8, 3)
    torch.manual_seed(1)
    policy_loss, alpha_loss = actor_loss(actor, critic, entropy, obs, target_entropy=-1.0)
    torch.manual_seed(1)  # the same sample again, for the hand computation
    actions, log_pi, _ = actor.get_action(obs)
    min_q = critic(obs, actions).min(dim=0).values
    assert policy_loss.item() == pytest.approx((0.5 * log_pi - min_q).mean().item(), rel=1e-6)
    assert alpha_loss.item() == pytest.approx((-0.5 * (log_pi + -1.0)).mean().item(), rel=1e-6)
    policy_loss.backward(retain_graph=True)
    assert entropy.log_alpha.grad is None  # alpha is a constant in the actor's loss
    assert all(p.grad is None for p in critic.parameters())  # frozen critics: dQ/da only
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.trunk.parameters())
    actor.zero_grad(set_to_none=True)
    alpha_loss.backward()
    assert all(p.grad is None for p in actor.parameters())  # log pi is a constant in alpha's loss
    assert entropy.log_alpha.grad.item() == pytest.approx((-0.5 * (log_pi.detach() - 1.0)).mean().item(), rel=1e-6)


def test_squashed_gaussian_log_prob_matches_torchs_transformed_distribution():
    """log pi(a) of a = scale * tanh(u) + bias, u ~ N(mean, std), against torch.distributions' own change of variables
    (which has no 1e-6 guard: the actions are kept away from the bounds here)."""
    torch.manual_seed(0)
    actor = Actor(4, np.array([-1.0, 0.0]), np.array([3.0, 0.5]))
    obs = torch.randn(64, 4) * 0.1
    torch.manual_seed(2)
    actions, log_pi, deterministic = actor.get_action(obs)
    mean, log_std = actor(obs)
    transforms = [
        torch.distributions.TanhTransform(),
        torch.distributions.AffineTransform(actor.action_bias, actor.action_scale),
    ]
    reference = torch.distributions.TransformedDistribution(torch.distributions.Normal(mean, log_std.exp()), transforms)
    np.testing.assert_allclose(log_pi.detach(), reference.log_prob(actions).sum(-1).detach(), rtol=1e-3, atol=1e-3)
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([3.0, 0.5])
    assert ((actions >= low) & (actions <= high)).all() and ((deterministic >= low) & (deterministic <= high)).all()
    assert (log_std >= -5).all() and (log_std <= 2).all()


def test_batched_critics_are_two_plain_mlps_and_frozen_keeps_weights_out():
    torch.manual_seed(0)
    critics = QNetworks(5, 2)
    obs, actions = torch.randn(16, 5), torch.randn(16, 2)
    q = critics(obs, actions)
    assert q.shape == (2, 16)
    for i in range(2):  # member i as a plain MLP: F.linear with the transposed stacked weights
        x = torch.cat([obs, actions], dim=1)
        for k, (w, b) in enumerate(zip(critics.weights, critics.biases)):
            x = F.linear(x, w[i].T, b[i, 0])
            x = F.relu(x) if k < 2 else x
        torch.testing.assert_close(q[i], x.squeeze(-1))
    assert not torch.equal(q[0], q[1])  # two independently initialised critics
    bound = 1 / math.sqrt(7)  # nn.Linear's default init, fan_in = 5 + 2
    assert critics.weights[0].abs().max() <= bound and critics.weights[0].abs().max() > 0.9 * bound
    actions.requires_grad_(True)
    critics(obs, actions, frozen=True).sum().backward()
    assert all(p.grad is None for p in critics.parameters()) and actions.grad.abs().sum() > 0


# ---- learning, evaluation, video ----

# Pendulum-v1 (200-step episodes, truncated), learning from step 1,000 (CleanRL: 5,000) and batch 128 (about half
# the update's cost), otherwise the defaults. Calibrated on seeds 1, 2, 3: last-10 means -137.9, -153.2, -166.6 (the
# SAC section of docs/sac_td3_ddpg.md).
LEARNING_RUN = ["--env-id", "Pendulum-v1", "--total-timesteps", "10000", "--learning-starts", "1000", "--batch-size", "128"]
LEARNING_RUN += ["--torch-threads", "1", "--precision", "fp32", "--seed", "1"]  # fp32: as calibrated, on every CPU kind


def test_pendulum_learns(pendulum_run):
    scalars = read_scalars(pendulum_run)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:5]) < -900  # random actions swing the pendulum about
    assert np.mean(returns[-10:]) >= -250, returns[-10:]
    alphas = [value for _, value in scalars["losses/alpha"]]
    assert alphas[-1] < alphas[0] < 1.0  # autotuned down from 1


def test_saved_model_evaluates_its_deterministic_policy(pendulum_run):
    from cleanrl_utils.evaluate import evaluate

    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    checkpoint = torch.load(model_path, weights_only=True)
    assert checkpoint["script"] == SCRIPT and checkpoint["script_path"] == f"cleanrl/{SCRIPT}.py"
    assert set(checkpoint) == {"script", "script_path", "model_state_dict", "args"}
    returns = evaluate(model_path, episodes=5, seed=1, cuda=False)
    assert np.mean(returns) >= -300, returns
    assert evaluate(model_path, episodes=5, seed=1, cuda=False) == returns  # deterministic policy, seeded envs


def test_evaluate_cli_films_an_episode(pendulum_run, tmp_path):
    model_path = os.path.join(pendulum_run, f"{SCRIPT}.cleanrl_model")
    command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1"]
    command += ["--capture-video", "--video-dir", str(tmp_path), "--no-cuda"]
    result = run_python(command[1:], timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "mean return over 1 episode" in result.stdout
    decoded_video(str(tmp_path / "eval-episode-0.mp4"))


# ---- determinism, levers ----

# Hopper with 2 envs and a 50-step limit (truncations and terminations), 1,200 steps, learning from step 500.
SHORT = ["--env-id", "Hopper-v4", "--num-envs", "2", "--max-episode-steps", "50", "--total-timesteps", "1200"]
SHORT += ["--learning-starts", "500", "--seed", "3", "--torch-threads", "1", "--buffer-size", "5000", "--precision", "fp32"]


def short_run(log_dir, *flags: str) -> dict:
    result = run_script(SCRIPT, *SHORT, *flags, "--log-dir", str(log_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return read_scalars(only_run_dir(log_dir))


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    return [short_run(tmp_path_factory.mktemp(f"short{i}")) for i in range(2)]


def test_short_run_logs_every_tag_every_1000_steps(short_runs):
    scalars = short_runs[0]
    assert TAGS <= set(scalars), TAGS - set(scalars)
    assert [step for step, _ in scalars["losses/qf1_loss"]] == [1000]  # first multiple of 1,000 after learning starts
    assert [step for step, _ in scalars["charts/SPS"]] == [1000]
    assert all(length <= 50 for _, length in scalars["charts/episodic_length"])


def test_same_seed_gives_identical_losses(short_runs):
    first, second = short_runs
    for tag in sorted(TAGS - {"charts/SPS"}):
        assert first[tag] == second[tag], tag


def test_levers_keep_the_losses_close(short_runs, tmp_path):
    """--no-fused-adam is the same Adam: both runs see the same episodes until the first update (step 500), then
    their losses stay close."""
    reference = short_runs[0]
    scalars = short_run(tmp_path / "plain-adam", "--no-fused-adam")
    for tag in ("losses/qf1_loss", "losses/actor_loss", "losses/alpha"):
        assert scalars[tag][0][1] == pytest.approx(reference[tag][0][1], rel=0.2, abs=0.05), tag


def test_bf16_changes_the_rounding_not_the_function():
    """--precision bf16 (auto where the CPU has native bf16) runs the hidden layers of training batches in bf16: the
    same weights give the same Q-values and actions up to bf16's rounding. (Learning, seeds 1-3, the Pendulum check
    below at bf16 on an EPYC Zen 4: last-10 means -124.5, -153.3, -166.7, against -137.9, -153.2, -166.6 in fp32.)"""
    torch.manual_seed(0)
    obs, actions = torch.randn(256, 11) * 2, torch.rand(256, 3) * 2 - 1
    fp32, bf16 = QNetworks(11, 3), QNetworks(11, 3, bf16=True)
    bf16.load_state_dict(fp32.state_dict())
    with torch.no_grad():
        q, q16 = fp32(obs, actions), bf16(obs, actions)
    assert q16.dtype == torch.float32
    scale = q.abs().max().item()
    assert (q16 - q).abs().max().item() <= 0.03 * scale  # bf16 keeps 8 bits of mantissa: ~0.4% per rounding
    assert (q16 - q).abs().max().item() > 0  # and it did run in bf16
    low, high = -np.ones(3, dtype=np.float32), np.ones(3, dtype=np.float32)
    actor, actor16 = Actor(11, low, high), Actor(11, low, high, bf16=True)
    actor16.load_state_dict(actor.state_dict())
    with torch.no_grad():
        mean, mean16 = actor(obs)[0], actor16(obs)[0]
    assert (mean16 - mean).abs().max().item() <= 0.03 * mean.abs().max().item() + 1e-3


# ---- checkpoint and resume ----

RESUME = [
    "--env-id",
    "Pendulum-v1",
    "--learning-starts",
    "300",
    "--seed",
    "2",
    "--torch-threads",
    "1",
    "--batch-size",  # not 256: the update is most of a run's time, and these tests count steps, updates and rows
    "32",
    "--buffer-size",  # last: test_resume_with_the_buffer_continues replaces it
    "2000",
]


def test_resume_with_the_buffer_continues(tmp_path):
    """A 601-step run resumed to 1,200: same run folder, counters, networks, Adam states, alpha and buffer restored,
    then training goes on from where it stopped. It stops after an odd number of critic updates (301): the actor's
    schedule (2 updates every 2nd critic update) must go on from there, not restart. The buffer's capacity is 1M
    rows (36 MB): the checkpoint holds the 599 filled ones only (#6), and the resumed buffer has its full capacity."""
    big_buffer = [*RESUME[:-2], "--buffer-size", "1000000"]
    result = run_script(SCRIPT, *big_buffer, "--total-timesteps", "601", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    path = os.path.join(run_dir, "checkpoint.pt")
    half = torch.load(path, weights_only=True)
    assert half["replay_buffer"]["rows"].untyped_storage().nbytes() == 599 * 9 * 4
    assert os.path.getsize(path) < 5_000_000  # networks and Adam states about 3 MB; the whole capacity 36 MB more
    # Pendulum's 200-step episodes (truncated at steps 200 and 401): steps 201 and 402 are stale, not stored; a row is
    # obs 3 | action 1 | reward | obs 3 | done
    assert half["replay_buffer"]["rows"].shape == (599, 9) and half["replay_buffer"]["env_steps"] == 601
    assert half["entropy_state_dict"]["log_alpha"] < 0  # tuned below alpha = 1
    adam_steps = lambda state: int(state["state"][0]["step"])  # noqa: E731
    assert half["num_updates"] == adam_steps(half["q_optimizer_state_dict"]) == 301  # steps 301..601
    assert adam_steps(half["optimizer_state_dict"]) == 300  # the actor: 2 updates at each even critic update
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1200")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replay buffer: 599 transitions restored" in result.stdout and f"run folder: {run_dir}" in result.stdout
    final = torch.load(path, weights_only=True)
    assert (final["iteration"], final["global_step"], final["num_updates"]) == (1200, 1200, 900)
    assert adam_steps(final["q_optimizer_state_dict"]) == 900
    assert adam_steps(final["optimizer_state_dict"]) == 900  # 898 if the schedule restarted at the resume
    assert final["replay_buffer"]["rows"].shape == (1196, 9)  # new episodes from step 602: 802 and 1003 stale
    assert torch.equal(final["replay_buffer"]["rows"][:599], half["replay_buffer"]["rows"])


def test_resume_without_the_buffer_refills_it(tmp_path):
    result = run_script(SCRIPT, *RESUME, "--total-timesteps", "600", "--no-checkpoint-buffer", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    path = os.path.join(only_run_dir(tmp_path), "checkpoint.pt")
    assert torch.load(path, weights_only=True)["replay_buffer"] == {}
    result = run_script(SCRIPT, "--resume", path, "--total-timesteps", "1200", "--checkpoint-buffer")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replay buffer: refilled from empty" in result.stdout
    final = torch.load(path, weights_only=True)
    # 300 critic updates before the stop; after it, 300 steps refill the buffer, then steps 901-1200 train again
    assert int(final["q_optimizer_state_dict"]["state"][0]["step"]) == 300 + 300
    assert final["replay_buffer"]["env_steps"] == 600


def test_divergence_stops_before_saving(tmp_path):
    """Critic lr 1e30: the weights blow up within a few updates (learning starts at step 300). The run stops with one
    line and keeps the last good checkpoint (200) as it was. It stops at the first NaN action, before the env runs
    it (trial 9 T1: MuJoCo warned of an unstable simulation on every step until the periodic check, here at 400)."""
    flags = [*RESUME, "--total-timesteps", "3000", "--q-lr", "1e30", "--checkpoint-every", "200", "--log-dir", str(tmp_path)]
    result = run_script(SCRIPT, *flags)
    fragments = ["non-finite", "last good checkpoint", "try a lower --q-lr or --policy-lr"]
    assert_one_error_line(result, fragments, ignore_warnings=True)
    stopped_at = int(result.stderr.split("at iteration ")[1].split()[0])
    assert 300 < stopped_at < 400 and f"(global step {stopped_at})" in result.stderr  # 1 env: a step per iteration
    assert torch.load(os.path.join(only_run_dir(tmp_path), "checkpoint.pt"), weights_only=True)["iteration"] == 200


def test_ctrl_c_saves_and_exits_cleanly(tmp_path):
    returncode, stdout, stderr, run_dir = run_interrupted(SCRIPT, [*RESUME, "--total-timesteps", "100000"], tmp_path)
    assert returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    checkpoint = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert 0 < checkpoint["global_step"] < 100000 and "stopped at iteration" in stdout


# ---- bad input ----


BAD_INPUT = [
    (["--env-id", "Pong-v5"], ["'Pong-v5'", "Atari", "MuJoCo", "Pendulum-v1"]),
    (["--alpha", "1e300", "--no-autotune"], ["--alpha must be in (0, 1000]", "got 1e+300"]),  # trial 9 T3: inf in float32
    (["--alpha", "0"], ["--alpha must be in (0, 1000]", "got 0"]),
    (["--env-id", "Hoper-v4"], ["'Hoper-v4'", "Hopper-v4"]),
    (["--env-id", "CartPole-v1"], ["'CartPole-v1'", "classic control"]),
    (["--batch-size", "512", "--buffer-size", "100"], ["--batch-size 512", "--buffer-size 100"]),
    (["--learning-starts", "2000000"], ["--learning-starts 2000000"]),
    (["--tau", "0"], ["--tau", "(0, 1]"]),
    (["--policy-frequency", "0"], ["--policy-frequency", "0"]),
    (["--updates-per-step", "-1"], ["--updates-per-step", "-1"]),
    (["--q-lr", "0"], ["--q-lr", "0"]),
    (["--no-autotune", "--alpha", "-0.1"], ["--alpha", "-0.1"]),
    (["--buffer-size", "100000000000"], ["replay buffer", "GiB", "--buffer-size"]),
    (["--q-lr", "inf"], ["--q-lr must be", "finite", "got inf"]),
    (["--capture-video", "--video-every", "0"], ["--video-every must be a positive integer, got 0"]),
]

"""cleanrl/ppo_atari_lstm_envpool.py: where the recurrent state restarts, proven on real EnvPool rollouts against a
brute-force walk that unrolls each episode alone from a zero state; the update's recomputed log-probs and values
against the rollout's at unchanged weights; stale rows that change nothing in the loss; evaluation restarting the
state as training does; learning a memory task on marked frames; a short run's tags, model and resume; bad input."""

import inspect

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from helpers import only_run_dir, read_scalars, run_on_marked_frames, run_script

import cleanrl.ppo_atari_envpool as ppo_atari
import cleanrl.ppo_atari_lstm_envpool as lstm

SCRIPT = "ppo_atari_lstm_envpool"
NUM_ENVS, NUM_STEPS, ROLLOUTS, LIMIT = 4, 32, 12, 150  # Breakout: life losses, game overs and truncations


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The step-at-a-time unrolls here are small: on 2 cores shared with another test worker, torch's 2 threads
    spend more time waiting for each other than computing (40 s against 8 s for the evaluation test)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def brute_force_outputs(agent: lstm.Agent, obs, actions, terminations, truncations) -> dict[str, np.ndarray]:
    """Log-probs, values and most likely actions (T, N) of a stream of rows, each episode unrolled alone from a zero state by nn.LSTM over
    the whole episode at once. An episode runs from its first real step through the row after its boundary (the
    stale row sees the episode's last observation, with the episode's memory); the next begins the row after that."""
    num_rows, num_envs = terminations.shape
    found = {name: np.full((num_rows, num_envs), np.nan) for name in ("logprobs", "values", "greedy")}
    with torch.no_grad():
        for env in range(num_envs):
            start = 0
            while start < num_rows:
                boundary = start
                while boundary < num_rows and not (terminations[boundary, env] or truncations[boundary, env]):
                    boundary += 1
                rows = np.arange(start, min(boundary + 2, num_rows))
                features = agent.features(torch.as_tensor(obs[rows, env]))
                output, _ = agent.lstm(features[:, None, :])  # no state given: zeros
                logits = agent.actor(output[:, 0])
                logprob = torch.log_softmax(logits, dim=-1)[torch.arange(len(rows)), torch.as_tensor(actions[rows, env])]
                found["logprobs"][rows, env] = logprob.numpy()
                found["values"][rows, env] = agent.critic(output[:, 0]).squeeze(-1).numpy()
                found["greedy"][rows, env] = logits.argmax(dim=-1).numpy()
                start = boundary + 2
    return found


@pytest.fixture(scope="module")
def rollouts():
    """ROLLOUTS consecutive rollouts of real Breakout through the script's collect_rollout, with a fresh fp32 agent
    (weights never change): each rollout's storage copied, and the games that ended."""
    torch.manual_seed(3)
    envs = lstm.make_env("Breakout-v5", NUM_ENVS, seed=7, max_episode_steps=LIMIT)
    agent = lstm.Agent(envs.single_action_space.n)
    storage = lstm.Rollout.zeros(NUM_STEPS, agent, envs, torch.uint8, torch.device("cpu"))
    obs, _ = envs.reset()
    carry = lstm.Carry(
        obs=torch.from_numpy(obs),
        state=agent.initial_state(NUM_ENVS, torch.device("cpu")),
        resets=lstm.StateResets(NUM_ENVS, torch.device("cpu")),
        game_returns=np.zeros(NUM_ENVS),
    )
    stored, games = [], []
    for i in range(ROLLOUTS):
        games += lstm.collect_rollout(agent, envs, carry, storage, i * NUM_STEPS * NUM_ENVS)
        copy = {name: value.clone() for name, value in vars(storage).items() if isinstance(value, torch.Tensor)}
        copy["initial_state"] = lstm.RecurrentState(*(x.clone() for x in storage.initial_state))
        stored.append(copy)
    envs.close()
    return agent, stored, games


def stream(stored: list[dict], name: str) -> np.ndarray:
    return np.concatenate([rollout[name][:NUM_STEPS].numpy() for rollout in stored])


def test_the_stream_has_every_boundary_kind(rollouts):
    _, stored, games = rollouts
    terminations, truncations = stream(stored, "terminations"), stream(stored, "truncations")
    game_overs = sum(game.length < LIMIT for game in games)
    assert game_overs >= 2 and terminations.sum() >= game_overs + 8  # game overs, and life losses beside them
    assert truncations.sum() >= 2 and sum(game.length == LIMIT for game in games) == truncations.sum()
    stale = np.concatenate([np.zeros((1, NUM_ENVS), bool), (terminations | truncations)[:-1]])
    assert not (stale & (terminations | truncations)).any()  # a stale row is never a boundary itself
    # episodes cross rollout edges: a boundary in the last two rows of a rollout
    ends = (terminations | truncations).reshape(ROLLOUTS, NUM_STEPS, NUM_ENVS)
    assert ends[:, -2:].any()


def test_rollout_outputs_match_each_episode_unrolled_alone(rollouts):
    agent, stored, _ = rollouts
    names = ("obs", "actions", "terminations", "truncations")
    expected = brute_force_outputs(agent, *(stream(stored, name) for name in names))
    np.testing.assert_allclose(stream(stored, "logprobs"), expected["logprobs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stream(stored, "values"), expected["values"], rtol=1e-5, atol=1e-5)


def test_the_bootstrap_row_is_the_next_rollouts_first_value(rollouts):
    _, stored, _ = rollouts
    for before, after in zip(stored, stored[1:]):
        np.testing.assert_allclose(before["values"][-1].numpy(), after["values"][0].numpy(), rtol=1e-5, atol=1e-6)


def test_the_update_recomputes_the_rollouts_log_probs_and_values(rollouts):
    """At the first epoch, with the weights unchanged, unrolling each minibatch of whole env sequences from the
    rollout's stored initial state with its stored resets gives back what the rollout saw, on every row."""
    agent, stored, _ = rollouts
    for rollout in stored:
        for mb_envs in (torch.tensor([0, 2]), torch.tensor([3, 1])):
            initial_state = lstm.RecurrentState(*(x.index_select(1, mb_envs) for x in rollout["initial_state"]))
            select = {name: rollout[name].index_select(1, mb_envs) for name in ("obs", "resets", "actions")}
            with torch.no_grad():
                out = agent.get_action_and_value(select["obs"], initial_state, select["resets"], select["actions"])
            expected = {name: rollout[name][:NUM_STEPS].index_select(1, mb_envs) for name in ("logprobs", "values")}
            np.testing.assert_allclose(out.logprob.numpy(), expected["logprobs"].numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out.value.numpy(), expected["values"].numpy(), rtol=1e-5, atol=1e-5)


def loss_and_grads(agent: lstm.Agent, rollout: dict, args: lstm.Args) -> tuple[float, list[np.ndarray], dict]:
    advantages, valid = lstm.compute_gae(
        rollout["values"],
        rollout["rewards"],
        rollout["terminations"],
        rollout["truncations"],
        rollout["prev_episode_over"],
        args.gamma,
        args.gae_lambda,
    )
    agent.zero_grad()
    loss, stats = lstm.ppo_loss(
        agent,
        obs=rollout["obs"],
        initial_state=rollout["initial_state"],
        resets=rollout["resets"],
        actions=rollout["actions"],
        old_logprobs=rollout["logprobs"],
        advantages=advantages,
        returns=advantages + rollout["values"][:-1],
        old_values=rollout["values"][:-1],
        valid=valid,
        args=args,
    )
    loss.backward()
    return loss.item(), [p.grad.numpy().copy() for p in agent.parameters()], stats


def test_stale_rows_change_nothing_in_the_loss(rollouts):
    """A stale row's observation is the episode's last; its action is ignored. With the state restarted after it,
    nothing of it may reach a valid row: replacing its observation, action and advantage inputs changes neither the
    loss nor a gradient (and at unchanged weights the ratios are 1: no KL, nothing clipped)."""
    agent, stored, _ = rollouts
    args = lstm.Args()
    checked = 0
    for rollout in stored:
        stale = torch.cat([rollout["prev_episode_over"][None], (rollout["terminations"] | rollout["truncations"])[:-1]])
        if not stale.any():
            continue
        loss, grads, stats = loss_and_grads(agent, rollout, args)
        assert abs(stats["approx_kl"].item()) < 1e-6 and stats["clipfrac"].item() == 0
        changed = dict(rollout)
        changed["obs"] = torch.where(stale[:, :, None, None, None], 255 - rollout["obs"], rollout["obs"])
        changed["actions"] = torch.where(stale, (rollout["actions"] + 1) % 4, rollout["actions"])
        changed["rewards"] = torch.where(stale, rollout["rewards"] + 5, rollout["rewards"])
        changed_loss, changed_grads, _ = loss_and_grads(agent, changed, args)
        np.testing.assert_allclose(changed_loss, loss, rtol=1e-5, atol=1e-6)
        for grad, changed_grad in zip(grads, changed_grads):
            np.testing.assert_allclose(changed_grad, grad, rtol=1e-4, atol=1e-6)
        checked += 1
    assert checked >= 3


def test_gae_is_ppo_atari_envpools_whose_rules_are_proven_there():
    assert inspect.getsource(lstm.compute_gae) == inspect.getsource(ppo_atari.compute_gae)


def test_reset_flags_lag_the_boundaries_by_two_steps():
    resets = lstm.StateResets(3, torch.device("cpu"))
    episode_over = torch.tensor([[1, 0, 0], [0, 1, 0], [0, 0, 0], [1, 0, 1], [0, 0, 0]], dtype=torch.bool)
    seen = [resets.reset.clone()]
    for row in episode_over:
        resets.after_step(row)
        seen.append(resets.reset.clone())
    expected = torch.cat([torch.ones(2, 3, dtype=torch.bool), episode_over[:-1]])  # reset[k] = episode_over[k - 2]
    expected[1] = False  # no step before the first is stale
    assert torch.equal(torch.stack(seen), expected)


def test_evaluation_restarts_the_state_as_training_does():
    """The greedy player's actions, step by step through cleanrl_utils.evaluate's player, against each episode
    unrolled alone (whole games, every life lost, and the time limit)."""
    torch.manual_seed(4)
    agent = lstm.Agent(4)
    with torch.no_grad():
        # A fresh LSTM's output barely moves from frame to frame (std 0.008 about a mean of 0.075), so greedy play
        # would repeat one action: scale the actor up and centre it on the mean output of a short game.
        envs = lstm.make_env("Breakout-v5", 1, seed=9)
        obs = torch.as_tensor(np.stack([envs.step(np.array([t % 4]))[0] for t in range(60)]))
        mean_output = agent.unroll(obs, agent.initial_state(1, torch.device("cpu")), torch.zeros(60, 1, dtype=torch.bool))[0]
        agent.actor.weight.normal_(0.0, 300.0)
        agent.actor.bias.copy_(-agent.actor.weight @ mean_output.mean(dim=(0, 1)))
    args = dict(vars(lstm.Args(env_id="Breakout-v5", max_episode_steps=90)), channels_last="off", precision="fp32")
    saved = {"args": args, "model_state_dict": agent.state_dict()}
    player = lstm.evaluation_player(
        saved, num_envs=3, seed=2, device=torch.device("cpu"), greedy=True, epsilon=0.0, render=False
    )
    obs, _ = player.envs.reset()
    rows = {"obs": [], "actions": [], "terminations": [], "truncations": []}
    for _ in range(240):
        action = player.act(obs)
        rows["obs"].append(obs)
        rows["actions"].append(action)
        obs, _, terminated, truncated, _ = player.envs.step(action)
        rows["terminations"].append(terminated)
        rows["truncations"].append(truncated)
    rows = {name: np.stack(values) for name, values in rows.items()}
    assert rows["terminations"].sum() >= 3 and rows["truncations"].sum() >= 3
    expected = brute_force_outputs(agent, **rows)
    assert (rows["actions"] == expected["greedy"]).mean() > 0.99  # float ties aside, every one
    counts = np.bincount(rows["actions"].ravel(), minlength=4)
    assert (counts >= 5).sum() >= 3, counts  # play that depends on the frames and the memory


# ---- learning ----

# A memory task on marked Pong frames (tests/marked_frames.py, MARKED_FRAMES_LAG=1), one frame per observation: +1
# for RIGHT when the frame *before* the one the action was chosen on had a white band, LEFT for a black one. That band
# is no longer in the observation: random play earns 63/6 = 10.5 in a 64-step game, any policy without memory at most
# 32, one that carries the band in its LSTM state 63. lr 1e-3 and 8 envs x 32 steps (4x the updates per step of the
# defaults), --actor-init-std 1, fp32, one thread (as calibrated, on every CPU kind). Calibration on the 2-core AMD
# EPYC (Zen 4), 10,240 steps: last-20-game means 51.5, 51.7, 49.5 on seeds 1, 2, 3 (first-20 11.7, 12.8, 12.7),
# 65-92 s each beside other work. With CleanRL's actor gain 0.01 it stalls at the memoryless bound (seed 1: 31.6
# after 20,480 steps, 32.2 after 40,960; docs/ppo.md). Without the memory (lag 0) the same settings reached 58.1,
# 57.6, 56.6 with the default gain.
MARKED = ["--env-id", "Pong-v5", "--max-episode-steps", "64", "--total-timesteps", "10240", "--num-steps", "32"]
MARKED += ["--learning-rate", "1e-3", "--actor-init-std", "1", "--precision", "fp32", "--torch-threads", "1"]


def test_learns_a_task_that_needs_memory(tmp_path):
    result = run_on_marked_frames(SCRIPT, *MARKED, "--seed", "1", "--log-dir", str(tmp_path), lag=1)
    assert result.returncode == 0, result.stderr[-3000:]
    returns = [value for _, value in read_scalars(only_run_dir(tmp_path))["charts/episodic_return"]]
    assert np.mean(returns[:20]) < 20, returns[:20]  # random play first
    assert np.mean(returns[-20:]) > 40, returns[-20:]  # far above any policy without memory (32)


# ---- a short run: tags, saved model, evaluation, resume ----

SHORT = ["--env-id", "Breakout-v5", "--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2"]
SHORT += ["--max-episode-steps", "60", "--torch-threads", "1", "--seed", "2"]
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate"}
TAGS |= {f"losses/{name}" for name in ("value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac")}


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("short")
    result = run_script(SCRIPT, *SHORT, "--total-timesteps", "512", "--save-model", "--log-dir", str(log_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    return only_run_dir(log_dir)


def test_short_run_logs_every_tag_and_its_model_evaluates(short_run):
    from cleanrl_utils.evaluate import evaluate

    scalars = read_scalars(short_run)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    assert len(scalars["losses/value_loss"]) == 4
    returns = evaluate(f"{short_run}/{SCRIPT}.cleanrl_model", episodes=2, seed=1)
    assert len(returns) == 2 and all(r == int(r) and r >= 0 for r in returns), returns


def test_a_resume_continues_the_run(short_run):
    result = run_script(SCRIPT, "--resume", f"{short_run}/checkpoint.pt", "--total-timesteps", "768")
    assert result.returncode == 0, result.stderr[-3000:]
    losses = read_scalars(short_run)["losses/value_loss"]
    assert [step for step, _ in losses] == [128, 256, 384, 512, 640, 768] and np.isfinite(losses[-1][1])


BAD_INPUT = [
    (["--num-minibatches", "3"], ["--num-minibatches 3"]),
    (["--actor-init-std", "0"], ["--actor-init-std must be in (0, 10], got 0.0"]),
    (["--actor-init-std", "4e38"], ["--actor-init-std must be in (0, 10], got 4e+38"]),  # trial 7, R4: a traceback
    (["--num-envs", "6", "--num-minibatches", "4"], ["--num-minibatches 4 does not divide --num-envs 6"]),
    (["--lstm-size", "0"], ["--lstm-size must be in [1, 8192], got 0"]),
    (["--lstm-size", "100000000"], ["--lstm-size must be in [1, 8192], got 100000000"]),  # trial 6, Q1: a traceback
    (["--learning-rate", "nan"], ["--learning-rate", "nan"]),
    (["--env-id", "Hopper-v4"], ["MuJoCo", "Atari"]),
    (["--num-steps", "100000000", "--total-timesteps", "10000000000"], ["rollout storage", "GiB"]),
]

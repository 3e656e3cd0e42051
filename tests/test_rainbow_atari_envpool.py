"""cleanrl/rainbow_atari_envpool.py: n-step targets of the prioritised replay against a per-episode brute force over a
next-step autoreset stream (stale steps, life losses, game overs, truncations, a resumed run's cut), the sum tree's
sampling frequencies, a corrupt tree failing loudly, the importance weights, the projection with per-sample
discounts, the double-Q loss, noisy layers, learning on marked Pong frames (real EnvPool), a resume that restores the
buffer and its priorities, bad input."""

import numpy as np
import pytest
import torch
from bad_input import test_bad_input_gives_one_clear_line_and_writes_nothing  # noqa: F401 (collected here)
from c51_reference import brute_force_projection
from helpers import evaluate_cli_returns, only_run_dir, read_scalars, run_on_marked_frames, run_script
from rainbow_reference import NextStepStream, importance_weights, n_step_targets, proportional_probabilities
from scipy import stats

import cleanrl.rainbow_atari_envpool as rainbow

SCRIPT = "rainbow_atari_envpool"
TAGS = {"charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/beta", "charts/torch_threads"}
TAGS |= {"losses/td_loss", "losses/q_values"}


def fill(rb: "rainbow.ReplayBuffer", stream: NextStepStream, steps: int, seed: int) -> None:
    """Feed `steps` steps of `stream` through the script's storage path: the calls its main loop makes."""
    rng = np.random.default_rng(seed)
    prev_episode_over = np.zeros(stream.num_envs, dtype=bool)
    for _ in range(steps):
        actions = rng.integers(0, 6, stream.num_envs)
        next_obs, rewards, terminations, truncations, elapsed = stream.step(actions)
        rb.add(actions, rewards, terminations, prev_episode_over, next_obs, elapsed == 0)
        prev_episode_over = terminations | truncations


def sampleable(rb: "rainbow.ReplayBuffer") -> tuple[np.ndarray, np.ndarray]:
    """(t, env) of every transition with a priority: every one the buffer can draw."""
    leaves = np.flatnonzero(rb.tree.priorities(np.arange(rb.tree.size)))
    return rb.leaf_transitions(leaves)


@pytest.mark.parametrize("n_step", [1, 3, 5])
@pytest.mark.parametrize("buffer_size", [3 * 700, 3 * 60])  # the whole stream; a ring that wraps many times
def test_n_step_targets_match_a_per_episode_brute_force(n_step, buffer_size):
    """Every drawable transition's (n-step return, bootstrap discount, bootstrap observation) against a walk over the
    true episodes, across a resumed run's cut (the end of the stored stream). The drawable set is exactly the true
    transitions (never a stale step) from t = num_obs - capacity + 3 (all 4 frames of the stack in the ring) to
    num_obs - 1 - n (their windows written), and the windows met every kind of boundary."""
    gamma, num_envs = 0.9, 3
    stream = NextStepStream(num_envs, seed=n_step)
    rb = rainbow.ReplayBuffer(buffer_size, num_envs, n_step, gamma, alpha=0.5, frame_shape=(2, 2))
    rb.start_games(stream.reset())
    fill(rb, stream, 300, seed=1)
    resumed = rainbow.ReplayBuffer(buffer_size, num_envs, n_step, gamma, alpha=0.5, frame_shape=(2, 2))
    resumed.load_state_dict(rb.state_dict())  # what a checkpoint keeps; EnvPool then plays new games
    resumed.start_games(stream.reset())
    fill(resumed, stream, 300, seed=2)

    expected = n_step_targets(stream.episodes, n_step, gamma)
    low, high = resumed.num_obs - resumed.capacity + 3, resumed.num_obs - 1 - n_step
    in_ring = {key for key, target in expected.items() if low <= target["t"] <= high}
    t, env = sampleable(resumed)
    returns, discounts, end = resumed.n_step_window(t, env)
    obs, bootstrap = resumed.stacks(t, env), resumed.stacks(end, env)
    keys = [(e, o.tobytes()) for e, o in zip(env.tolist(), obs)]
    assert set(keys) == in_ring and len(keys) == len(in_ring)
    for i, key in enumerate(keys):
        target = expected[key]
        assert resumed.actions[t[i] % resumed.capacity, env[i]] == target["action"]
        np.testing.assert_allclose(returns[i], target["ret"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(discounts[i], target["discount"], rtol=1e-5, atol=1e-6)
        if target["discount"]:
            np.testing.assert_array_equal(bootstrap[i], target["bootstrap"])
    cuts = {expected[key]["cut"] for key in keys}
    if buffer_size > 3 * 600:  # the whole stream is drawable: each kind of window is there
        kinds = {"life", "game over", "truncated", "stream end"} | ({"full"} if n_step > 1 else set())
        assert kinds <= cuts, cuts
        crossing = [key for key in keys if expected[key]["cut"] == "stream end" and expected[key]["discount"] < gamma]
        assert crossing or n_step == 1  # a window of 2+ steps that ran into the resumed run's cut


def test_sample_returns_the_windows_of_the_leaves_it_draws():
    stream = NextStepStream(2, seed=7)
    rb = rainbow.ReplayBuffer(2 * 200, 2, 3, 0.9, alpha=0.5, frame_shape=(2, 2))
    rb.start_games(stream.reset())
    fill(rb, stream, 150, seed=3)
    np.random.seed(0)
    (obs, actions, returns, next_obs, discounts, weights), leaves = rb.sample(64, 0.4, torch.device("cpu"))
    expected = n_step_targets(stream.episodes, 3, 0.9)
    for i in range(64):
        target = expected[(int(leaves[i] % 2), obs[i].numpy().tobytes())]
        assert actions[i] == target["action"]
        np.testing.assert_allclose([returns[i], discounts[i]], [target["ret"], target["discount"]], rtol=1e-5, atol=1e-6)
        if target["discount"]:
            np.testing.assert_array_equal(next_obs[i].numpy(), target["bootstrap"])


def chi_square_p_value(counts: np.ndarray, priorities: np.ndarray) -> float:
    expected = counts.sum() * priorities / priorities.sum()
    drawn = priorities > 0
    assert counts[~drawn].sum() == 0  # a zero priority is never drawn
    return float(stats.chisquare(counts[drawn], expected[drawn]).pvalue)


def test_sum_tree_draws_in_proportion_to_priorities_also_after_updates():
    """Leaves drawn 400,000 times by uniform masses: a chi-square test of the counts against p_j / total at the 0.001
    level (seeded), before and after a priority update; the root equals the sum of the leaves."""
    rng = np.random.default_rng(0)
    tree = rainbow.SumTree(37)  # not a power of two: the last leaves of the padded tree stay 0
    priorities = rng.random(37) * (rng.random(37) > 0.2)
    tree.set(np.arange(37), priorities)
    for round_ in range(2):
        np.testing.assert_allclose(tree.total(), priorities.sum(), rtol=1e-12)
        assert tree.count == np.count_nonzero(priorities)
        leaves = tree.find(rng.random(400_000) * tree.total())
        assert chi_square_p_value(np.bincount(leaves, minlength=37), priorities) > 1e-3
        changed = rng.choice(37, 10, replace=False)
        priorities[changed] = rng.random(10) * 5  # larger ones, and some zeros become drawable
        tree.set(changed, priorities[changed])


def test_replay_draws_in_proportion_to_priorities_and_new_transitions_enter_at_the_max():
    """The buffer's stratified draws against (loss + eps)^alpha of the priorities it was given (chi-square, 0.001
    level, 200,000 draws), and a transition that enters later gets the largest priority so far."""
    alpha, eps, num_envs = 0.6, 1e-6, 2
    stream = NextStepStream(num_envs, seed=11)
    rb = rainbow.ReplayBuffer(num_envs * 40, num_envs, 3, 0.99, alpha=alpha, frame_shape=(2, 2))
    rb.start_games(stream.reset())
    fill(rb, stream, 30, seed=4)
    leaves = np.flatnonzero(rb.tree.priorities(np.arange(rb.tree.size)))
    losses = np.random.default_rng(1).random(len(leaves)) * 3
    rb.update_priorities(leaves, losses, eps)
    np.random.seed(2)
    drawn = np.concatenate([rb.sample_leaves(32, 0.4)[0] for _ in range(200_000 // 32)])
    counts = np.bincount(drawn, minlength=rb.tree.size)[leaves]
    probabilities = proportional_probabilities(dict(enumerate(losses + eps)), alpha)
    assert chi_square_p_value(counts, np.array([probabilities[i] for i in range(len(leaves))])) > 1e-3
    before = set(leaves.tolist())
    fill(rb, stream, 1, seed=5)
    new = [leaf for leaf in np.flatnonzero(rb.tree.priorities(np.arange(rb.tree.size))) if leaf not in before]
    np.testing.assert_allclose(rb.tree.priorities(new), (losses.max() + eps) ** alpha, rtol=1e-12)


def test_importance_weights_match_the_formula():
    alpha, beta, eps = 0.5, 0.7, 1e-6
    stream = NextStepStream(3, seed=5)
    rb = rainbow.ReplayBuffer(3 * 50, 3, 3, 0.99, alpha=alpha, frame_shape=(2, 2))
    rb.start_games(stream.reset())
    fill(rb, stream, 40, seed=6)
    leaves = np.flatnonzero(rb.tree.priorities(np.arange(rb.tree.size)))
    losses = np.random.default_rng(3).random(len(leaves)) * 2
    rb.update_priorities(leaves, losses, eps)
    np.random.seed(4)
    drawn, weights = rb.sample_leaves(32, beta)
    probabilities = proportional_probabilities(dict(zip(leaves.tolist(), losses + eps)), alpha)
    expected = importance_weights([probabilities[leaf] for leaf in drawn.tolist()], len(leaves), beta)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-6)
    assert weights.max() == 1.0 and len(set(weights.tolist())) > 1


def test_a_corrupt_sum_tree_raises_instead_of_redrawing_forever():
    """A root that claims a total over leaves that are all 0 (a state a correct tree never reaches): every draw lands
    on a zero leaf, and sampling fails loudly after its bounded redraws instead of spinning."""
    rb = rainbow.ReplayBuffer(2 * 8, 2, frame_shape=(2, 2))
    rb.tree.nodes[1], rb.tree.count = 1.0, 1
    np.random.seed(0)
    with pytest.raises(RuntimeError, match="internal error"):
        rb.sample_leaves(4, 0.4)


def test_projection_with_per_sample_discounts_matches_the_brute_force():
    rng = np.random.default_rng(5)
    batch, n_atoms, v_min, v_max = 64, 51, -10.0, 10.0
    next_pmfs = rng.dirichlet(np.ones(n_atoms), size=batch)
    returns = rng.choice([-2.71, -1.0, 0.0, 0.4, 1.9, 2.8, 12.0, -11.0], size=batch)  # past both ends too
    discounts = rng.choice([0.0, 0.99, 0.99**2, 0.99**3, 0.5], size=batch)
    target = rainbow.project_distribution(
        torch.as_tensor(next_pmfs, dtype=torch.float32),
        torch.as_tensor(returns, dtype=torch.float32),
        torch.as_tensor(discounts, dtype=torch.float32),
        torch.linspace(v_min, v_max, n_atoms),
    ).numpy()
    for i in range(batch):  # the brute force one row at a time: gamma = this row's discount, 0 = done
        row = brute_force_projection(next_pmfs[i : i + 1], returns[i : i + 1], [discounts[i] == 0], discounts[i], v_min, v_max)
        np.testing.assert_allclose(target[i], row[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(target.sum(axis=1), 1.0, rtol=1e-5)


def test_loss_picks_the_next_action_with_the_online_network_and_weights_each_sample():
    """Double Q: the online network's greedy next action, the target network's distribution of it; each sample's
    cross-entropy (the priority) and their importance-weighted mean, against a computation by hand."""
    torch.manual_seed(0)
    online, target_net = (rainbow.QNetwork(6, 51, -10.0, 10.0).eval() for _ in range(2))  # means only: fixed
    obs, next_obs = torch.randint(0, 255, (2, 16, 4, 84, 84), dtype=torch.uint8)
    actions, returns = torch.randint(0, 6, (16,)), torch.randn(16)
    discounts, weights = torch.tensor([0.0, 0.9, 0.81, 0.729] * 4), torch.rand(16)
    loss, cross_entropy, _ = rainbow.td_loss(online, target_net, obs, actions, returns, next_obs, discounts, weights)
    with torch.no_grad():
        online_next, target_next = online(next_obs).argmax(1), target_net(next_obs).argmax(1)
        assert (online_next != target_next).any()  # else the test could not tell the two apart
        next_pmfs = target_net.pmfs(next_obs)[torch.arange(16), online_next].numpy()
        pmfs = online.pmfs(obs)[torch.arange(16), actions].clamp(1e-5, 1 - 1e-5).numpy()
    expected = np.array(
        [
            -(brute_force_projection(next_pmfs[i : i + 1], [returns[i].item()], [discounts[i] == 0], discounts[i].item(), -10, 10)[0] * np.log(pmfs[i])).sum()
            for i in range(16)
        ]
    )  # fmt: skip
    np.testing.assert_allclose(cross_entropy.numpy(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss.item(), (expected * weights.numpy()).mean(), rtol=1e-4, atol=1e-5)


def test_noisy_layers_resample_in_training_and_evaluate_on_their_means():
    """Training: the same noise gives the same outputs, a resample other ones, and the noise is factorised (each
    row of the weight noise is f(eps_out_i) f(eps_in)). Evaluation (`eval()`, how evaluation_player plays): the
    means, identical whatever the noise."""
    torch.manual_seed(0)
    network = rainbow.QNetwork(6, 51, -10.0, 10.0)
    obs = torch.randint(0, 255, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        first, again = network.pmfs(obs), network.pmfs(obs)
        network.reset_noise()
        resampled = network.pmfs(obs)
        network.eval()
        evaluated = network.pmfs(obs)
        network.reset_noise()
        np.testing.assert_array_equal(network.pmfs(obs).numpy(), evaluated.numpy())
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert (resampled - first).abs().max() > 1e-3
    assert (evaluated - resampled).abs().max() > 1e-3
    np.testing.assert_allclose(network.pmfs(obs).detach().sum(dim=2).numpy(), 1.0, rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 32])
def test_a_noisy_layer_is_the_linear_layer_of_its_noisy_weight(batch):
    """The layer never forms its noisy weight (forward multiplies by the noise's two factors instead): its outputs
    and its gradients are those of a plain linear layer on w = mu_w + sigma_w * f(eps_out) f(eps_in)^T and
    b = mu_b + sigma_b * f(eps_out), formed here in float64, with each factor f(x) = sign(x) sqrt(|x|) of a standard
    normal draw (the same draws, replayed from the seed)."""
    torch.manual_seed(5)
    layer = rainbow.NoisyLinear(300, 40, std_init=2.0)  # sigma_0 2.0: the noise's share is not lost in the means'
    torch.manual_seed(6)
    layer.reset_noise()
    torch.manual_seed(6)
    draws = [torch.randn(300).double(), torch.randn(40).double()]  # in reset_noise's order: eps_in, eps_out
    f_in, f_out = (draw.sign() * draw.abs().sqrt() for draw in draws)
    x = torch.randn(batch, 300)
    y = layer(x)
    y.square().sum().backward()
    params = {name: p.detach().double().requires_grad_() for name, p in layer.named_parameters()}
    weight = params["weight_mu"] + params["weight_sigma"] * torch.outer(f_out, f_in)
    expected = x.double() @ weight.T + params["bias_mu"] + params["bias_sigma"] * f_out
    expected.square().sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), params[name].grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
    noise_share = (expected - (x.double() @ params["weight_mu"].T + params["bias_mu"])).abs().max()
    assert noise_share > 0.1  # the noise moves the outputs: a layer that ignored it would fail above


# Marked Pong frames (tests/marked_frames.py): +1 for RIGHT on a white band, LEFT on a black one. Random play earns
# 64/6 = 10.7 in a 64-step game, a policy that ignores the band at most 32, one that reads it 64. The noise is the only
# exploration: a fresh network plays one action everywhere (0 or about 32 a game). At the default sigma_0 0.5 the
# untried action on one band kept a Q-value about 0.1 under the tried one, too close for the noise to flip: seeds 2
# and 3 stayed at about 32 through 3,000 steps whatever n, gamma or the support; sigma_0 1.0 freed seed 3 only;
# sigma_0 2.0 all three. n = 3 (the default), gamma 0.5 and the support [-2, 4] (a game is worth at most 2
# discounted: finer atoms), 4 envs, learning from step 500, batch 16, lr 1e-3, target copied every 500 steps, fp32
# and one thread. Calibration, seeds 1, 2, 3 at 3,000 steps: first-8-game means 28.8, 0.0, 0.1; last-20-game means
# 64.0, 64.0, 64.0 (seed 1: one game of 63 among its last 12, the rest 64), with the noisy layers' factored product
# (2026-11-27, Xeon); with the noisy weight formed, as before, 64.0, 64.0, 53.5 (batch 32: 64.0, 64.0, 60.2, but 189 s
# against 142 s a run, three at once beside other runs on the 2-core EPYC).
MARKED = ["--env-id", "Pong-v5", "--max-episode-steps", "64", "--total-timesteps", "3000", "--learning-starts", "500"]
MARKED += ["--buffer-size", "3000", "--num-envs", "4", "--precision", "fp32", "--target-network-frequency", "500"]
MARKED += ["--learning-rate", "1e-3", "--gamma", "0.5", "--v-min", "-2", "--v-max", "4", "--noisy-std", "2.0"]
MARKED += ["--batch-size", "16", "--torch-threads", "1"]


def test_learns_to_read_the_newest_frame_and_evaluates_its_model(tmp_path):
    result = run_on_marked_frames(SCRIPT, *MARKED, "--seed", "1", "--save-model", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    scalars = read_scalars(run_dir)
    assert TAGS <= set(scalars), TAGS - set(scalars)
    returns = [value for _, value in scalars["charts/episodic_return"]]
    assert np.mean(returns[:8]) < 36, returns[:8]  # blind play first (at most 32 expected; 8 games of coin flips)
    assert np.mean(returns[-20:]) > 48, returns[-20:]  # far above any policy that cannot see the band
    ((step, beta),) = scalars["charts/beta"][-1:]  # the last iteration's: from step 2,996 (4 envs) toward 1 at 3,000
    assert step == 3000 and abs(beta - (0.4 + 0.6 * 2996 / 3000)) < 1e-6
    # The script's own evaluation_player plays the saved model (real Pong, 64-step games: it only has to play them).
    assert len(evaluate_cli_returns(f"{run_dir}/{SCRIPT}.cleanrl_model", "--greedy", "--episodes", "2")) == 2


SHORT = ["--env-id", "Breakout-v5", "--num-envs", "2", "--max-episode-steps", "200", "--learning-starts", "300"]
SHORT += ["--buffer-size", "2000", "--target-network-frequency", "200", "--torch-threads", "1", "--seed", "3"]
SHORT += ["--precision", "fp32", "--train-frequency", "8", "--batch-size", "8"]  # the update is most of the time


def test_a_resume_restores_the_replay_buffer_and_its_priorities(tmp_path):
    result = run_script(SCRIPT, *SHORT, "--total-timesteps", "600", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    saved = torch.load(f"{run_dir}/checkpoint.pt", weights_only=True)["replay_buffer"]
    priorities = saved["priorities"].numpy()
    assert saved["env_steps"] == 600 and len(set(priorities[priorities > 0].tolist())) > 10  # trained: updated
    restored = rainbow.ReplayBuffer(2000, 2, 3, 0.99)
    restored.load_state_dict(saved)
    np.testing.assert_array_equal(restored.tree.priorities(np.arange(len(priorities))), priorities)
    np.testing.assert_allclose(restored.tree.total(), priorities.sum(), rtol=1e-12)
    assert restored.max_priority == saved["max_priority"] > 1.0
    result = run_script(SCRIPT, "--resume", f"{run_dir}/checkpoint.pt", "--total-timesteps", "1000")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replay buffer: 600 env steps restored" in result.stdout, result.stdout
    losses = read_scalars(run_dir)["losses/td_loss"]
    assert [step for step, _ in losses] == [1000] and np.isfinite(losses[0][1])
    final = torch.load(f"{run_dir}/checkpoint.pt", weights_only=True)["replay_buffer"]
    rows = len(saved["frames"])  # the first run's rows, still in the resumed run's ring
    for name in ("frames", "actions", "rewards", "dones", "valid"):
        assert torch.equal(final[name][: rows - 1], saved[name][: rows - 1]), name


BAD_INPUT = [
    (["--n-step", "0"], ["--n-step must be a positive integer, got 0"]),
    (["--prioritized-replay-alpha", "1.5"], ["--prioritized-replay-alpha must be in [0, 1], got 1.5"]),
    (["--prioritized-replay-beta", "-0.1"], ["--prioritized-replay-beta must be in [0, 1], got -0.1"]),
    (["--prioritized-replay-alpha", "nan"], ["--prioritized-replay-alpha must be a finite number, got nan"]),
    (["--prioritized-replay-eps", "0"], ["--prioritized-replay-eps must be positive and finite, got 0.0"]),
    (["--noisy-std", "-1"], ["--noisy-std must be in [0, 10]", "got -1.0"]),
    (["--noisy-std", "1e30"], ["--noisy-std must be in [0, 10]", "got 1e+30"]),  # trial 6, Q5: trained until it diverged
    (["--gamma", "inf"], ["--gamma must be a finite number, got inf"]),
    (
        ["--n-step", "100", "--buffer-size", "200", "--num-envs", "2"],
        [
            "--buffer-size 200 leaves fewer than 116 transitions per env (16 + --n-step 100; --num-envs 2): set --buffer-size >= 232"
        ],
    ),
    (["--n-step", "100000", "--buffer-size", "5000"], ["--n-step must be in [1, 1000], got 100000"]),  # trial 6, Q6
    (["--n-atoms", "1"], ["--n-atoms must be in [2, 10000], got 1"]),
    (["--v-min", "5", "--v-max", "5"], ["--v-min 5.0 and --v-max 5.0 must hold -1,000,000 <= v-min < v-max <= 1,000,000"]),
    (["--v-min", "-3e38", "--v-max", "3e38"], ["--v-min -3e+38 and --v-max 3e+38 must hold"]),  # trial 13, Q5
    (["--v-min", "5", "--v-max", "5.0000001"], ["too close for float32 at this scale"]),  # trial 14: atoms collapse
    (["--env-id", "Hopper-v4"], ["MuJoCo", "Atari"]),
    (["--learning-starts", "20000", "--total-timesteps", "10000"], ["--learning-starts 20000", "10000"]),
    (["--buffer-size", "100000000"], ["replay buffer", "GiB", "--buffer-size"]),
]


def test_a_noisy_layer_loads_the_noise_matrix_of_an_older_file():
    """Files written before the factored layer saved the noise as the matrix f(eps_out) f(eps_in)^T and the vector
    f(eps_out): they still load, and the layer then computes with that very noise (a resumed run acts on the same
    sample; an older model file still evaluates)."""
    torch.manual_seed(2)
    layer = rainbow.NoisyLinear(30, 8, std_init=2.0)
    eps_in, eps_out = torch.randn(30), torch.randn(8)
    old = {name: value for name, value in layer.state_dict().items() if not name.startswith("epsilon")}
    old["weight_epsilon"], old["bias_epsilon"] = torch.outer(eps_out, eps_in), eps_out
    layer.load_state_dict(old)
    x = torch.randn(5, 30)
    weight = layer.weight_mu + layer.weight_sigma * old["weight_epsilon"]
    expected = x @ weight.T + layer.bias_mu + layer.bias_sigma * eps_out
    np.testing.assert_allclose(layer(x).detach().numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)

# PPO for Atari through EnvPool, next-step autoreset done right.
# Hyperparameters: CleanRL's Atari table (EnvPool paper, appendix F, Table 3).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), next-step mode.
import difflib
import os
import random
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import tyro
from torch.distributions.categorical import Categorical


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy, python and the EnvPool simulators)"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be used when available"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases (works with WANDB_MODE=offline)"""
    wandb_project_name: str = "cleanRL"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    save_model: bool = False
    """whether to save the model weights and args to `runs/{run_name}/{exp_name}.cleanrl_model`"""
    log_dir: str = "runs"
    """the folder the run's tensorboard events (and saved model) go under"""
    checkpoint_every: int = 0
    """save a resumable checkpoint to `runs/{run_name}/checkpoint.pt` every N iterations (0: only at Ctrl-C and at the end)"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser and RNG states"""
    capture_video: bool = False
    """film an evaluation game to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 1000
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (EnvPool paper, Table 3)
    env_id: str = "Breakout-v5"
    """the id of the environment (any EnvPool Atari id, e.g. Pong-v5, Breakout-v5, BeamRider-v5)"""
    total_timesteps: int = 10_000_000
    """total timesteps of the experiments (agent steps, counting every env; frames = 4x)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel game environments"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 4
    """the number of mini-batches"""
    update_epochs: int = 4
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization (per minibatch, over valid rows only)"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold (early stop of the update epochs)"""
    max_episode_steps: int = 27_000
    """time limit per game in agent steps (27,000 = 108,000 frames); reaching it truncates"""

    # Speed levers: each keeps the learning curve (see README); `--no-<flag>` turns one off
    bf16: bool = True
    """run the network trunk under bfloat16 autocast (CPU with AMX, or CUDA); heads stay fp32"""
    channels_last: bool = True
    """use channels-last memory format for the convolutions"""
    uint8_obs: bool = True
    """store rollout observations as uint8 and scale to [0, 1] inside the network (else float32)"""
    torch_threads: int = 0
    """torch intra-op threads on CPU (0: one per core)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings."""
    for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "max_episode_steps"):
        if getattr(args, name) <= 0:
            sys.exit(f"error: --{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.learning_rate <= 0:
        sys.exit(f"error: --learning-rate must be positive, got {args.learning_rate}")
    if not (0 < args.gamma <= 1 and 0 <= args.gae_lambda <= 1):
        sys.exit(f"error: need 0 < --gamma <= 1 and 0 <= --gae-lambda <= 1, got {args.gamma} and {args.gae_lambda}")
    if args.video_every <= 0:
        sys.exit(f"error: --video-every must be a positive integer, got {args.video_every}")
    if args.checkpoint_every < 0:
        sys.exit(f"error: --checkpoint-every must be >= 0 (0 = only at Ctrl-C and at the end), got {args.checkpoint_every}")
    if args.torch_threads < 0:
        sys.exit(f"error: --torch-threads must be >= 0 (0 = one per core), got {args.torch_threads}")
    batch_size = args.num_envs * args.num_steps
    if batch_size % args.num_minibatches != 0:
        sys.exit(
            f"error: --num-minibatches {args.num_minibatches} does not divide the batch size "
            f"{batch_size} (= --num-envs {args.num_envs} x --num-steps {args.num_steps})"
        )
    if batch_size > args.total_timesteps:
        sys.exit(f"error: --total-timesteps {args.total_timesteps} is smaller than one rollout ({batch_size} steps)")
    atari_ids = [env_id for env_id, spec in envpool.registration.registry.specs.items() if spec[0] == "envpool.atari"]
    if args.env_id not in atari_ids:
        close = difflib.get_close_matches(args.env_id, atari_ids, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; e.g. Pong-v5, Breakout-v5, BeamRider-v5"
        sys.exit(f"error: --env-id {args.env_id!r} is not an EnvPool Atari environment{hint}")


def make_env(env_id: str, num_envs: int, seed: int, max_episode_steps: int = 27_000, render_mode: str | None = None):
    """EnvPool Atari with the standard DeepMind preprocessing (84x84 grey, 4-frame stack,
    frame-skip 4, up to 30 no-ops, fire on reset), life loss as termination and clipped rewards.
    `info["reward"]` keeps the unclipped reward and `info["terminated"]` marks game over.
    `render_mode="rgb_array"` (evaluation videos only) makes `render()` return full RGB frames."""
    envs = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        seed=seed,
        episodic_life=True,
        reward_clip=True,
        max_episode_steps=max_episode_steps,
        render_mode=render_mode,
    )
    return envs


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    """Nature CNN trunk shared by a categorical actor and a value head."""

    def __init__(self, num_actions: int, bf16: bool = False, channels_last: bool = False):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, num_actions), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)
        self.bf16 = bf16
        self.channels_last = channels_last
        if channels_last:
            self.network.to(memory_format=torch.channels_last)

    def hidden(self, obs: torch.Tensor) -> torch.Tensor:
        # Observations arrive as uint8 0..255 (or float32 with --no-uint8-obs). Integers up to 256
        # are exact in bf16, so under --bf16 we cast once, straight to the compute dtype and
        # layout: no full-size float32 copy of the batch is ever made.
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        x = obs.to(dtype=dtype, memory_format=memory_format) * (1.0 / 255.0)
        with torch.autocast(x.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext():
            h = self.network(x)
        # The heads run in fp32: log-probs and values feed ratios and returns, where bf16's
        # 8-bit mantissa would add noise to importance ratios that should start at exactly 1.
        return h.float()

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.hidden(obs)).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.hidden(obs)
        probs = Categorical(logits=self.actor(hidden), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden).squeeze(-1)


def compute_gae(
    values: torch.Tensor,  # (T+1, N): V(obs_t), last row V(obs after the rollout)
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    prev_episode_over: torch.Tensor,  # (N,) bool: the step before row 0 ended an episode
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE for next-step autoreset rollouts. Returns (advantages, valid_mask), both (T, N).

    In next-step mode the observation returned at a boundary step is the last one of the episode,
    and the step after a boundary is stale: the env ignores its action and returns the reset
    observation. So (seed 000, "How does Autoreset-Mode Affect GAE"):
      - a termination bootstraps 0; a truncation bootstraps V(next obs) = values[t + 1], the
        value of the episode's real last observation (partial-episode bootstrapping);
      - the accumulation stops at every boundary, so nothing flows back across episodes;
      - a stale row is invalid: valid_mask is False there and its advantage is 0.
    A stale row never leaks into a valid one: the row before it is a boundary, which cuts the
    accumulation. Fixes of the seed's listing: valid rows are the *negation* of the previous
    step's episode_over (the seed puts initial_episode_over itself in row 0), the buffers are
    real zeros, and flags are read from the arguments.
    """
    num_steps = rewards.shape[0]
    episode_over = terminations | truncations
    bootstrap = (~terminations).to(values.dtype)
    keep_accumulating = (~episode_over).to(values.dtype)
    advantages = torch.zeros_like(rewards, dtype=values.dtype)
    last_gae = torch.zeros_like(values[0])
    for t in reversed(range(num_steps)):
        delta = rewards[t] + gamma * bootstrap[t] * values[t + 1] - values[t]
        last_gae = delta + gamma * gae_lambda * keep_accumulating[t] * last_gae
        advantages[t] = last_gae
    valid_mask = torch.cat([~prev_episode_over[None], ~episode_over[:-1]], dim=0)
    return advantages * valid_mask, valid_mask


def save_checkpoint(path: str, state: dict) -> None:
    """Write, then rename: a crash or Ctrl-C mid-write never leaves a torn checkpoint behind."""
    tmp_path = path + ".tmp"
    torch.save(state, tmp_path)
    os.replace(tmp_path, path)


def rng_states() -> dict:
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (np_name, np_keys.tolist(), np_pos, np_has_gauss, np_cached),  # plain types: loads with weights_only
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np_name, np_keys, np_pos, np_has_gauss, np_cached = states["numpy"]
    np.random.set_state((np_name, np.array(np_keys, dtype=np.uint32), np_pos, np_has_gauss, np_cached))
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def load_checkpoint(path: str, script: str) -> dict:
    """A checkpoint of this script, or one clear line and exit."""
    if not os.path.isfile(path):
        sys.exit(f"error: --resume {path!r} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        sys.exit(f"error: --resume {path!r} is not a readable checkpoint ({type(error).__name__})")
    if not isinstance(checkpoint, dict) or "optimizer_state_dict" not in checkpoint:
        sys.exit(f"error: --resume {path!r} is not a resumable checkpoint (no optimiser state)")
    if checkpoint.get("script") != script:
        sys.exit(f"error: --resume {path!r} is a checkpoint of {checkpoint.get('script')!r}, not of {script!r}")
    return checkpoint


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1)


def ppo_loss(
    agent: Agent,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    valid: torch.Tensor,
    args: Args,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped PPO loss on one minibatch. Stale rows (valid == False) contribute nothing: every
    mean, including the advantage normalisation statistics, runs over valid rows only."""
    mask = valid.to(torch.float32)
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    logratio = newlogprob - old_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = masked_mean(-logratio, mask)
        approx_kl = masked_mean((ratio - 1) - logratio, mask)
        clipfrac = masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), mask)

    if args.norm_adv:
        count = mask.sum().clamp_min(2)
        mean = masked_mean(advantages, mask)
        std = (((advantages - mean) ** 2 * mask).sum() / (count - 1)).sqrt()
        advantages = (advantages - mean) / (std + 1e-8)

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mask)

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * masked_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)
    else:
        v_loss = 0.5 * masked_mean((newvalue - returns) ** 2, mask)

    entropy_loss = masked_mean(entropy, mask)
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = {
        "policy_loss": pg_loss.detach(),
        "value_loss": v_loss.detach(),
        "entropy": entropy_loss.detach(),
        "old_approx_kl": old_approx_kl,
        "approx_kl": approx_kl,
        "clipfrac": clipfrac,
    }
    return loss, stats


if __name__ == "__main__":
    args = tyro.cli(Args)
    checkpoint = None
    if args.resume:
        # The run continues with the hyperparameters it started with (they define the batch shapes
        # and the lr schedule); only where to resume from and how often to checkpoint are new.
        checkpoint = load_checkpoint(args.resume, "ppo_atari_envpool")
        new_flags = {name: getattr(args, name) for name in ("resume", "checkpoint_every", "capture_video", "video_every")}
        args = Args(**{**checkpoint["args"], **new_flags})
    validate_args(args)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = checkpoint["run_name"] if checkpoint else f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"
    run_dir = os.path.join(args.log_dir, run_name)
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    if args.track:
        import wandb

        wandb.init(
            project=args.wandb_project_name,
            entity=args.wandb_entity,
            sync_tensorboard=True,
            config=vars(args),
            name=run_name,
            save_code=True,
        )
    from torch.utils.tensorboard import SummaryWriter

    # On resume, events the interrupted run logged after its checkpoint are dropped (purge_step).
    writer = SummaryWriter(run_dir, purge_step=checkpoint["global_step"] + 1 if checkpoint else None)
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n%s" % ("\n".join([f"|{key}|{value}|" for key, value in vars(args).items()])),
    )

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    if args.torch_threads > 0:
        torch.set_num_threads(args.torch_threads)

    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    # env setup. EnvPool's simulators cannot be snapshotted: a resumed run starts fresh games
    # (seeded from the seed and the iteration) and the unfinished games are never logged.
    env_seed = args.seed if checkpoint is None else args.seed + 7919 * checkpoint["iteration"]
    envs = make_env(args.env_id, args.num_envs, env_seed, args.max_episode_steps)

    agent = Agent(envs.single_action_space.n, bf16=args.bf16, channels_last=args.channels_last).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    start_iteration, global_step = 1, 0
    if checkpoint:
        agent.load_state_dict(checkpoint["model_state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
        set_rng_states(checkpoint["rng"])
        start_iteration, global_step = checkpoint["iteration"] + 1, checkpoint["global_step"]
        print(f"resumed {run_name} at iteration {checkpoint['iteration']} (global step {global_step:,})", flush=True)

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({"script": "ppo_atari_envpool", "model_state_dict": agent.state_dict(), "args": vars(args)}, path)
        return path

    def film(iteration: int) -> subprocess.Popen:
        """Evaluation video of the current policy, played by the evaluator in its own process."""
        video_dir = os.path.join(run_dir, "videos", f"iteration-{iteration}")
        model_path = model_file(os.path.join(video_dir, "model.cleanrl_model"))
        command = [sys.executable, "-m", "cleanrl_utils.evaluate", "--model-path", model_path, "--episodes", "1"]
        log = open(os.path.join(video_dir, "evaluate.log"), "w")
        return subprocess.Popen(command + ["--capture-video", "--video-dir", video_dir, "--no-cuda"], stdout=log, stderr=log)

    video_jobs: list[subprocess.Popen] = []

    def training_state(iteration: int) -> dict:
        return {
            "script": "ppo_atari_envpool",
            "run_name": run_name,
            "args": vars(args),
            "iteration": iteration,
            "global_step": global_step,
            "model_state_dict": agent.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "rng": rng_states(),
        }

    # Ctrl-C finishes the current iteration, writes a checkpoint and exits 0; a second one aborts.
    stop_requested = False

    def request_stop(signum, frame):
        global stop_requested
        stop_requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("\nCtrl-C: stopping after this iteration (press again to abort without saving)", flush=True)

    signal.signal(signal.SIGINT, request_stop)

    # ALGO Logic: Storage setup. Observations stay uint8 (4x less memory traffic than float32).
    obs_dtype = torch.uint8 if args.uint8_obs else torch.float32
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape, dtype=obs_dtype, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps + 1, args.num_envs), device=device)

    # Episode statistics per *game* (not per life), from the unclipped reward.
    episode_returns = np.zeros(args.num_envs, dtype=np.float64)
    recent_returns: list[float] = []

    # TRY NOT TO MODIFY: start the game
    start_global_step = global_step
    start_time = time.time()
    # Progress: on a terminal, one live line rewritten in place every second; otherwise (CI, log
    # files, pipes) a plain line every 10 s.
    live_progress = sys.stdout.isatty()
    last_print = 0.0
    next_obs_np, _ = envs.reset()
    next_obs = torch.from_numpy(next_obs_np).to(device, obs_dtype)
    # The step before the first one is not a boundary: row 0 of the first rollout is valid.
    prev_episode_over = torch.zeros(args.num_envs, dtype=torch.bool, device=device)

    for iteration in range(start_iteration, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow
        rollout_prev_episode_over = prev_episode_over

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            # On a stale step (the one after a boundary) EnvPool ignores the action and returns
            # the reset observation with reward 0; compute_gae masks that row.
            next_obs_np, reward, term, trunc, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.from_numpy(reward).to(device)
            terminations[step] = torch.from_numpy(term).to(device)
            truncations[step] = torch.from_numpy(trunc).to(device)
            next_obs = torch.from_numpy(next_obs_np).to(device, obs_dtype)

            # A game ends at game over (info["terminated"]; `term` is also set on every life
            # loss) or at the time limit. Its length is EnvPool's elapsed_step, which does not
            # count stale steps.
            episode_returns += info["reward"]
            game_over = info["terminated"].astype(bool) | trunc
            if game_over.any():
                for i in np.flatnonzero(game_over):
                    writer.add_scalar("charts/episodic_return", episode_returns[i], global_step)
                    writer.add_scalar("charts/episodic_length", info["elapsed_step"][i], global_step)
                    recent_returns.append(float(episode_returns[i]))
                episode_returns[game_over] = 0.0

        prev_episode_over = terminations[-1] | truncations[-1]

        # bootstrap value and GAE (see compute_gae for the autoreset rules)
        with torch.no_grad():
            values[args.num_steps] = agent.get_value(next_obs)
            advantages, valid_mask = compute_gae(
                values, rewards, terminations, truncations, rollout_prev_episode_over, args.gamma, args.gae_lambda
            )
            returns = advantages + values[:-1]

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values[:-1].reshape(-1)
        b_valid = valid_mask.reshape(-1)

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = ppo_loss(
                    agent,
                    b_obs[mb_inds],
                    b_actions[mb_inds],
                    b_logprobs[mb_inds],
                    b_advantages[mb_inds],
                    b_returns[mb_inds],
                    b_values[mb_inds],
                    b_valid[mb_inds],
                    args,
                )
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        valid_values = b_values[b_valid]
        valid_returns = b_returns[b_valid]
        var_y = valid_returns.var()
        explained_var = (1 - (valid_returns - valid_values).var() / var_y).item() if var_y > 0 else float("nan")

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        sps = int((global_step - start_global_step) / (time.time() - start_time))
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", stats["value_loss"].item(), global_step)
        writer.add_scalar("losses/policy_loss", stats["policy_loss"].item(), global_step)
        writer.add_scalar("losses/entropy", stats["entropy"].item(), global_step)
        writer.add_scalar("losses/old_approx_kl", stats["old_approx_kl"].item(), global_step)
        writer.add_scalar("losses/approx_kl", stats["approx_kl"].item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)

        # A diverged run stops here, before any checkpoint could be overwritten with its state.
        if not (torch.isfinite(loss) and all(torch.isfinite(p).all() for p in agent.parameters())):
            writer.close()
            if live_progress:
                print()  # end the live line before the error message
            saved = (
                f"last good checkpoint: {checkpoint_path}" if os.path.exists(checkpoint_path) else "no checkpoint was written"
            )
            sys.exit(f"error: non-finite loss or parameters at iteration {iteration} (global step {global_step:,}); {saved}")
        # Read the Ctrl-C flag once: a signal landing between two reads must not skip the save.
        stopping = stop_requested
        if (args.checkpoint_every and iteration % args.checkpoint_every == 0) or stopping or iteration == args.num_iterations:
            save_checkpoint(checkpoint_path, training_state(iteration))
        if args.capture_video and (iteration % args.video_every == 0 or iteration == args.num_iterations or stopping):
            video_jobs.append(film(iteration))

        now = time.time()
        final_line = iteration == args.num_iterations or stopping
        if now - last_print > (1 if live_progress else 10) or final_line:
            last_print = now
            recent = recent_returns[-20:]
            mean_return = f"{np.mean(recent):.2f}" if recent else "n/a"
            eta = (args.num_iterations - iteration) * args.batch_size / max(sps, 1)
            line = (
                f"step {global_step:,}/{args.num_iterations * args.batch_size:,}  SPS {sps:,}  "
                f"return(last {len(recent)}) {mean_return}  games {len(recent_returns):,}  ETA {eta / 60:.1f} min"
            )
            if live_progress:  # "\r\x1b[K": back to column 0 and clear the line, so it is rewritten in place
                line = f"\r\x1b[K{line}"
            print(line, end="\n" if final_line or not live_progress else "", flush=True)
        if stopping:
            print(
                f"stopped at iteration {iteration}; checkpoint: {checkpoint_path} (continue with --resume {checkpoint_path})"
            )
            break

    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    for job in video_jobs:
        video_dir = os.path.dirname(job.args[job.args.index("--model-path") + 1])
        status = "written" if job.wait() == 0 else f"FAILED (exit {job.returncode}, see {video_dir}/evaluate.log)"
        print(f"evaluation video {status}: {video_dir}")

    envs.close()
    writer.close()

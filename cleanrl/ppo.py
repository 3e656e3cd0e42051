# PPO for classic control on Gymnasium vector envs, same-step autoreset done right.
# Hyperparameters: CleanRL's classic-control defaults (its PPO for CartPole-v1).
# Autoreset semantics: "The Value of Autoresetting" (Gymnasium), same-step mode.
from cleanrl_utils.stop import StopAfterIteration, exit_at_once_on_signals, ignore_signals_in_worker, stopped_line

if __name__ == "__main__":
    exit_at_once_on_signals()  # Ctrl-C while the libraries below load: one line, no traceback

import atexit
import multiprocessing
import os
import random
import sys
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from torch.distributions.categorical import Categorical

from cleanrl_utils.checkpoint import load_torch, restore_torch, resume_args, resumed_env_seed, save_torch, torch_rng_states
from cleanrl_utils.checks import check_gymnasium_env, check_memory, check_positive, check_rollout_shape, check_run_args
from cleanrl_utils.evaluate import Player, written_by
from cleanrl_utils.hardware import choose_speed_levers, this_machine
from cleanrl_utils.run import (
    ProgressLine,
    checkpoint_due,
    exit_if_diverged,
    make_writer,
    record_end_step,
    run_folder,
    torch_all_finite,
)
from cleanrl_utils.steps import say_steps_run
from cleanrl_utils.vector_env_state import SavedVectorEnv
from cleanrl_utils.video import VideoJobs

# Every saved model and checkpoint records which script wrote it, and where: evaluate plays that file's player.
WRITTEN_BY = written_by(__file__)
SCRIPT = WRITTEN_BY["script"]  # a copy under a new name is a new script


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment (torch, numpy, python and the Gymnasium envs)"""
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
    keep_checkpoints: bool = False
    """keep every checkpoint as `checkpoint-{global_step}.pt` too, to evaluate the run's best point afterwards:
    `python -m cleanrl_utils.evaluate --model-path runs/{run_name} --greedy`"""
    resume: str | None = None
    """continue from a checkpoint: same run folder, args, step counter, lr schedule, optimiser, RNG and (sync) env states"""
    capture_video: bool = False
    """film an evaluation episode to `runs/{run_name}/videos/` every --video-every iterations and at the end, in a separate process (the training envs never render)"""
    video_every: int = 100
    """iterations between evaluation videos with --capture-video"""

    # Algorithm specific arguments (CleanRL's classic-control defaults)
    env_id: str = "CartPole-v1"
    """the id of the environment (a Gymnasium env with discrete actions and vector observations, e.g. CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3 with Box2D)"""
    total_timesteps: int = 500_000
    """total timesteps of the experiments (agent steps, counting every env)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer"""
    num_envs: int = 4
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
    """Toggles advantages normalization (per minibatch)"""
    clip_coef: float = 0.2
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
    max_episode_steps: int | None = None
    """time limit per episode in agent steps (default: the env's registered limit); reaching it truncates"""
    vector_mode: str = "sync"
    """`sync` (SyncVectorEnv, envs stepped in this process) or `async` (AsyncVectorEnv, one subprocess per env)"""
    torch_threads: int = 1
    """torch intra-op threads on CPU (0: auto, OMP_NUM_THREADS if set, else one per core); 1 is fastest for these tiny MLPs"""

    # to be filled in runtime (not flags)
    batch_size: tyro.conf.Suppress[int] = 0
    minibatch_size: tyro.conf.Suppress[int] = 0
    num_iterations: tyro.conf.Suppress[int] = 0


def validate_args(args: Args) -> None:
    """Exit with one clear line (no traceback) on impossible settings, before anything is written."""
    check_run_args(args)
    check_rollout_shape(args.num_envs, args.num_steps, args.num_minibatches, args.update_epochs, args.total_timesteps)
    check_positive(args, "max_episode_steps")
    if args.vector_mode not in ("sync", "async"):
        sys.exit(f"error: --vector-mode must be sync or async, got {args.vector_mode!r}")
    observation_space, action_space = check_gymnasium_env(
        args.env_id,
        "CartPole-v1, Acrobot-v1, MountainCar-v0",
        fits=lambda obs, action: isinstance(action, gym.spaces.Discrete),
    )
    if not isinstance(action_space, gym.spaces.Discrete):
        sys.exit(
            f"error: --env-id {args.env_id!r} has {action_space} actions; this script needs discrete ones (see ppo_continuous_action.py)"
        )
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        sys.exit(f"error: --env-id {args.env_id!r} has {observation_space} observations; this script needs a flat Box")
    obs_bytes = 4 * observation_space.shape[0]
    check_memory(args.num_steps * args.num_envs * (obs_bytes + 40), "the rollout storage", "--num-envs or --num-steps")


def make_env(
    env_id: str, num_envs: int, vector_mode: str = "sync", max_episode_steps: int | None = None
) -> gym.vector.VectorEnv:
    """`num_envs` copies of a Gymnasium env in one vector env with *same-step* autoreset, under Gymnasium's vector
    RecordEpisodeStatistics (`info["episode"]`, mask `info["_episode"]`, at every boundary; its same-step counting is
    checked against hand-counted episodes in the tests). Seed with `envs.reset(seed=...)`: sub-env i gets seed + i."""
    kwargs = (
        {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    )  # None (0 in older files): the registered limit

    def make_one() -> gym.Env:
        if multiprocessing.parent_process() is not None:
            ignore_signals_in_worker()  # an AsyncVectorEnv worker: Ctrl-C and SIGTERM are the main process's
        return gym.make(env_id, **kwargs)

    env_fns = [make_one for _ in range(num_envs)]
    vector_env = gym.vector.SyncVectorEnv if vector_mode == "sync" else gym.vector.AsyncVectorEnv
    envs = vector_env(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    if vector_mode == "async":  # the workers ignore SIGTERM, which multiprocessing's exit-time terminate() sends:
        atexit.register(envs.close)  # close them on every exit (a sys.exit included), or that exit would wait forever
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def layer_init(layer: nn.Module, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Module:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, out_dim: int, out_std: float) -> nn.Sequential:
    """64-64 tanh, orthogonal init (gain sqrt 2), the output layer's gain `out_std`."""
    hidden = [layer_init(nn.Linear(in_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh()]
    return nn.Sequential(*hidden, layer_init(nn.Linear(64, out_dim), std=out_std))


class Agent(nn.Module):
    """Separate 64-64 tanh MLPs for a categorical actor and the value function."""

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        self.critic = mlp(obs_dim, 1, out_std=1.0)
        self.actor = mlp(obs_dim, num_actions, out_std=0.01)

    def get_value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def get_action_and_value(self, obs: torch.Tensor, action: torch.Tensor | None = None):
        probs = Categorical(logits=self.actor(obs), validate_args=False)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(obs).squeeze(-1)


def evaluation_player(
    saved: dict, *, num_envs: int, seed: int, device: torch.device, greedy: bool, epsilon: float, render: bool
) -> Player:
    """How `cleanrl_utils.evaluate` plays a model this script saved (and films it during training): actions sampled
    from the policy, or its most likely one with `greedy`; videos are extra episodes in a Gymnasium env of the same
    id. `epsilon` is DQN's, unused here."""
    train_args = saved["args"]
    envs = make_env(train_args["env_id"], num_envs, "sync", train_args["max_episode_steps"])
    agent = Agent(envs.single_observation_space.shape[0], envs.single_action_space.n)
    agent.load_state_dict(saved["model_state_dict"])
    agent.to(device).eval()

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        obs = torch.as_tensor(obs, dtype=torch.float32, device=device)
        return (agent.actor(obs).argmax(dim=-1) if greedy else agent.get_action_and_value(obs)[0]).cpu().numpy()

    return Player(envs=envs, act=act, film_env_id=train_args["env_id"], reset_seed=seed)


def compute_gae_same_step(
    values: torch.Tensor,  # (T, N): V(obs_t)
    last_values: torch.Tensor,  # (N,): V(obs after the rollout)
    final_values: torch.Tensor,  # (T, N): V(info["final_obs"]) on truncated rows (truncation_values)
    rewards: torch.Tensor,  # (T, N)
    terminations: torch.Tensor,  # (T, N) bool
    truncations: torch.Tensor,  # (T, N) bool
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """GAE for same-step autoreset rollouts. Returns the advantages, (T, N).

    In same-step mode the env resets inside the step that ends an episode: the observation it returns is already
    the first one of the next episode, and the episode's real last observation is in info["final_obs"]. Every step
    is a real transition, so there is no stale row and no mask. So ("The Value of Autoresetting"):
      - a step bootstraps the value of the observation after it, values[t + 1] (last_values after the last row);
      - but a termination bootstraps 0, and a truncation V(final obs) = final_values[t] (partial-episode
        bootstrapping), never values[t + 1] = V(reset obs), the value of another episode's start; final_values
        is read on truncated rows only;
      - the accumulation stops at every boundary, so nothing flows back across episodes.
    A step both terminated and truncated counts as terminated.
    """
    next_values = torch.cat([values[1:], last_values[None]], dim=0)
    next_values = torch.where(truncations & ~terminations, final_values, next_values)
    num_steps = rewards.shape[0]
    episode_over = terminations | truncations
    bootstrap = (~terminations).to(values.dtype)
    keep_accumulating = (~episode_over).to(values.dtype)
    advantages = torch.zeros_like(rewards, dtype=values.dtype)
    last_gae = torch.zeros_like(values[0])
    for t in reversed(range(num_steps)):
        delta = rewards[t] + gamma * bootstrap[t] * next_values[t] - values[t]
        last_gae = delta + gamma * gae_lambda * keep_accumulating[t] * last_gae
        advantages[t] = last_gae
    return advantages


def truncation_values(agent: Agent, info: dict, term, trunc) -> torch.Tensor:
    """(N,): V(info["final_obs"]) on the rows this step truncated (and did not terminate), 0 elsewhere: what a
    truncation bootstraps (see compute_gae_same_step). One extra value call, for those rows only (the network does
    not change during the rollout, so now is as good as later)."""
    device = next(agent.parameters()).device
    final_values = torch.zeros(len(trunc), device=device)
    truncated = np.flatnonzero(trunc & ~term)
    if truncated.size:
        final_obs = torch.as_tensor(np.stack(info["final_obs"][truncated]), dtype=torch.float32, device=device)
        with torch.no_grad():
            final_values[truncated] = agent.get_value(final_obs)
    return final_values


def ppo_loss(
    agent: Agent, obs, actions, old_logprobs, advantages, returns, old_values, args: Args
) -> tuple[torch.Tensor, dict]:
    """Clipped PPO loss on one minibatch. In same-step mode every row is a real step: plain means."""
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs, actions)
    logratio = newlogprob - old_logprobs
    ratio = logratio.exp()

    with torch.no_grad():
        # http://joschu.net/blog/kl-approx.html
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

    if args.norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()

    if args.clip_vloss:
        v_loss_unclipped = (newvalue - returns) ** 2
        v_clipped = old_values + torch.clamp(newvalue - old_values, -args.clip_coef, args.clip_coef)
        v_loss_clipped = (v_clipped - returns) ** 2
        v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
    else:
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()

    entropy_loss = entropy.mean()
    loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
    stats = dict(policy_loss=pg_loss, value_loss=v_loss, entropy=entropy_loss, old_approx_kl=old_approx_kl)
    stats |= dict(approx_kl=approx_kl, clipfrac=clipfrac)
    return loss, {name: value.detach() for name, value in stats.items()}  # logged, not differentiated


if __name__ == "__main__":
    args = tyro.cli(Args)
    keys = dict(env_state=object, next_obs=torch.Tensor, recent_returns=list)  # besides weights, optimiser, counters
    checkpoint = load_torch(args.resume, SCRIPT, keys) if args.resume else None
    if checkpoint:  # the saved args, with the flags of this command that may change on resume applied
        args = resume_args(Args, checkpoint, args.resume)
    validate_args(args)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    threads = choose_speed_levers(args, this_machine(device), checkpoint)  # prints them; args keep the resolved values
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    say_steps_run(args.total_timesteps, args.batch_size, "--num-envs x --num-steps")
    run_name, run_dir = run_folder(args, args.resume)  # a resumed run continues in its checkpoint's folder
    checkpoint_path = os.path.join(run_dir, "checkpoint.pt")

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic

    # env setup. Sync envs are saved in the checkpoint and continue their episodes on resume; async ones
    # (subprocesses) cannot be snapshotted: a resumed async run plays new episodes, the unfinished ones go unlogged.
    env_seed = resumed_env_seed(args.seed, checkpoint["iteration"] if checkpoint else 0)
    envs = make_env(args.env_id, args.num_envs, args.vector_mode, args.max_episode_steps)
    obs_shape = envs.single_observation_space.shape

    agent = Agent(obs_shape[0], envs.single_action_space.n).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    start_iteration, global_step = 1, 0
    recent_returns: list[float] = []
    saved_envs = SavedVectorEnv(envs)  # its state_dict() is None where the envs cannot be saved (async, MuJoCo)
    if checkpoint:  # weights, Adam, RNG and env states (one line if they do not fit); prints where the run resumes
        extra = {"env_state": saved_envs}
        start_iteration, global_step = restore_torch(args.resume, checkpoint, agent, optimizer, args, extra=extra)
        recent_returns = list(checkpoint["recent_returns"])
    writer = make_writer(args, run_name, run_dir, checkpoint["global_step"] if checkpoint else None)  # after every check

    def model_file(path: str) -> str:
        """The `.cleanrl_model` format `cleanrl_utils.evaluate` reads: script name, args, weights."""
        save_torch(path, {**WRITTEN_BY, "model_state_dict": agent.state_dict(), "args": vars(args)})
        return path

    def training_state(iteration: int) -> dict:
        counters = WRITTEN_BY | dict(run_name=run_name, args=vars(args), iteration=iteration, global_step=global_step)
        weights = dict(model_state_dict=agent.state_dict(), optimizer_state_dict=optimizer.state_dict())
        envs_state = dict(env_state=saved_envs.state_dict(), next_obs=next_obs.cpu(), recent_returns=recent_returns)
        return counters | weights | {"rng": torch_rng_states()} | envs_state

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + obs_shape, device=device)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long, device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    terminations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    truncations = torch.zeros((args.num_steps, args.num_envs), dtype=torch.bool, device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)
    final_values = torch.zeros((args.num_steps, args.num_envs), device=device)  # V(info["final_obs"]) where truncated

    # and SPS from here; the restored returns are not counted as since the resume
    progress = ProgressLine(global_step, args.num_iterations * args.batch_size, episodes_before=len(recent_returns))
    videos = VideoJobs(run_dir, model_file)
    stop = StopAfterIteration()  # from here on Ctrl-C/SIGTERM finish the iteration, checkpoint, exit 0
    if checkpoint and checkpoint["env_state"] is not None:
        # The restored sync envs continue the very episodes the checkpoint interrupted: with the RNG
        # states restored, the resumed run logs exactly what the uninterrupted one would have.
        next_obs = checkpoint["next_obs"].to(device)
    else:
        next_obs_np, _ = envs.reset(seed=env_seed)
        next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)

    for iteration in range(start_iteration, args.num_iterations + 1):
        if args.anneal_lr:  # linearly, from --learning-rate at iteration 1 towards 0 after the last one
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / args.num_iterations) * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data. Same-step autoreset: at a boundary next_obs is
            # already the reset observation of the next episode; the episode's last one is info["final_obs"][i].
            next_obs_np, reward, term, trunc, info = envs.step(action.cpu().numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device)
            terminations[step] = torch.as_tensor(term, device=device)
            truncations[step] = torch.as_tensor(trunc, device=device)
            next_obs = torch.as_tensor(next_obs_np, dtype=torch.float32, device=device)
            final_values[step] = truncation_values(agent, info, term, trunc)

            if "episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    writer.add_scalar("charts/episodic_return", info["episode"]["r"][i], global_step)
                    writer.add_scalar("charts/episodic_length", info["episode"]["l"][i], global_step)
                    recent_returns.append(float(info["episode"]["r"][i]))

        # bootstrap value and GAE (see compute_gae_same_step for the autoreset rules)
        with torch.no_grad():
            last_values = agent.get_value(next_obs)
            advantages = compute_gae_same_step(
                values, last_values, final_values, rewards, terminations, truncations, args.gamma, args.gae_lambda
            )
            returns = advantages + values

        # flatten the batch: one named field per argument of the loss
        rollout = dict(obs=obs, actions=actions, old_logprobs=logprobs, advantages=advantages, returns=returns)
        rollout |= dict(old_values=values)
        batch = {name: x.reshape((args.batch_size,) + x.shape[2:]) for name, x in rollout.items()}

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                loss, stats = ppo_loss(agent, **{name: x[mb_inds] for name, x in batch.items()}, args=args)
                clipfracs.append(stats["clipfrac"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and stats["approx_kl"] > args.target_kl:
                break

        b_returns, b_values = batch["returns"], batch["old_values"]
        var_y = b_returns.var() if len(b_returns) > 1 else torch.tensor(0.0)  # one row: no variance, no warning
        explained_var = (1 - (b_returns - b_values).var() / var_y).item() if var_y > 0 else float("nan")

        sps = progress.sps(global_step)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        for name in ("value_loss", "policy_loss", "entropy", "old_approx_kl", "approx_kl"):  # the last minibatch's
            writer.add_scalar(f"losses/{name}", stats[name].item(), global_step)
        writer.add_scalar("losses/clipfrac", torch.stack(clipfracs).mean().item(), global_step)
        writer.add_scalar("losses/explained_variance", explained_var, global_step)
        writer.add_scalar("charts/SPS", sps, global_step)
        writer.add_scalar("charts/torch_threads", threads.count, global_step)
        threads.update()  # fewer threads while another process computes on these cores

        # Read the stop flag once: a signal landing between two reads must not skip the save.
        stopping = stop.requested
        finite = torch_all_finite(agent, loss)
        where = dict(iteration=iteration, global_step=global_step, checkpoint_path=checkpoint_path, writer=writer)
        exit_if_diverged(finite, **where, resumed_from=args.resume, progress=progress)
        if checkpoint_due(iteration, args.num_iterations, args.checkpoint_every, stopping):
            save_torch(checkpoint_path, training_state(iteration), keep=args.keep_checkpoints)
        last = iteration == args.num_iterations or stopping
        if args.capture_video and (iteration % args.video_every == 0 or last):
            videos.film(iteration, final=last)  # at most one evaluator at a time
        progress.show(global_step, sps, recent_returns, final=last)
        if stopping and iteration < args.num_iterations:  # in the last one, record_end_step says it finished
            print(stopped_line(iteration, checkpoint_path))
            break

    if args.save_model:
        print(f"model saved to {model_file(os.path.join(run_dir, f'{args.exp_name}.cleanrl_model'))}")
    videos.finish()
    envs.close()
    record_end_step(writer, global_step)
    writer.close()

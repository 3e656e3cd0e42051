"""Brute-force advantage references, written independently of the scripts' recursions.

Each env's rollout is cut into episode segments from the flags alone; for every valid step the
advantage is the explicit sum  A_t = sum_k (gamma * lambda)^(k - t) * delta_k  over the rest of
its segment, with delta_k = r_k + gamma * bootstrap_k - V_k. No backward recursion is shared
with the code under test.
"""

import numpy as np


def next_step_reference(values, rewards, terminations, truncations, prev_episode_over, gamma, gae_lambda):
    """Next-step autoreset (EnvPool): the row after a boundary is stale. Returns (adv, valid)."""
    values, rewards = np.asarray(values, np.float64), np.asarray(rewards, np.float64)
    terminations, truncations = np.asarray(terminations, bool), np.asarray(truncations, bool)
    num_steps, num_envs = rewards.shape
    advantages = np.zeros((num_steps, num_envs))
    valid = np.zeros((num_steps, num_envs), bool)
    for env in range(num_envs):
        # Rebuild the list of segments: consecutive valid steps of one episode.
        segments, current = [], []
        previous_over = bool(prev_episode_over[env])
        for t in range(num_steps):
            if previous_over:  # stale: the env ignored the action and returned a reset obs
                previous_over = False
                continue
            valid[t, env] = True
            current.append(t)
            if terminations[t, env] or truncations[t, env]:
                segments.append(current)
                current = []
                previous_over = True
        if current:
            segments.append(current)  # cut by the rollout's end: bootstrap from values[T]
        for segment in segments:
            deltas = []
            for k in segment:
                # the observation after step k is obs k+1 (the real last obs at a truncation)
                bootstrap = 0.0 if terminations[k, env] else values[k + 1, env]
                deltas.append(rewards[k, env] + gamma * bootstrap - values[k, env])
            for i, t in enumerate(segment):
                advantages[t, env] = sum((gamma * gae_lambda) ** j * d for j, d in enumerate(deltas[i:]))
    return advantages, valid


def script_gae(compute_gae, values, rewards, terminations, truncations, prev_episode_over, gamma=0.99, gae_lambda=0.95):
    """A script's torch `compute_gae` (next-step) on numpy arrays, in float64: (advantages, valid) as numpy."""
    import torch

    flags = (torch.as_tensor(x) for x in (terminations, truncations, prev_episode_over))
    values, rewards = (torch.as_tensor(x, dtype=torch.float64) for x in (values, rewards))
    advantages, valid = compute_gae(values, rewards, *flags, gamma, gae_lambda)
    return advantages.numpy(), valid.numpy()


def random_next_step_rollout(rng, num_steps, num_envs, p_term=0.08, p_trunc=0.05):
    """Random flags that respect next-step semantics: a stale row is never itself a boundary,
    and boundaries land on the first and last rows too."""
    terminations = rng.random((num_steps, num_envs)) < p_term
    truncations = rng.random((num_steps, num_envs)) < p_trunc
    prev_episode_over = rng.random(num_envs) < 0.3
    over = terminations | truncations
    for t in range(num_steps):
        stale = prev_episode_over if t == 0 else over[t - 1]
        terminations[t] &= ~stale
        truncations[t] &= ~stale
        over[t] = terminations[t] | truncations[t]
    rewards = rng.normal(size=(num_steps, num_envs))
    values = rng.normal(size=(num_steps + 1, num_envs))
    return values, rewards, terminations, truncations, prev_episode_over


def same_step_reference(values, last_values, final_values, rewards, terminations, truncations, gamma, gae_lambda):
    """Same-step autoreset (Gymnasium vector envs): every row is a real step, the observation
    returned at a boundary is already the next episode's first one. Built from the parts:
    values (T, N) = V(obs_t), last_values (N,) = V(obs after the rollout), final_values (T, N) =
    V(info["final_obs"]), read on truncated rows only. Returns the advantages, (T, N)."""
    values, rewards = np.asarray(values, np.float64), np.asarray(rewards, np.float64)
    last_values, final_values = np.asarray(last_values, np.float64), np.asarray(final_values, np.float64)
    terminations, truncations = np.asarray(terminations, bool), np.asarray(truncations, bool)
    num_steps, num_envs = rewards.shape
    advantages = np.zeros((num_steps, num_envs))
    for env in range(num_envs):
        segments, current = [], []
        for t in range(num_steps):
            current.append(t)
            if terminations[t, env] or truncations[t, env]:
                segments.append(current)
                current = []
        if current:
            segments.append(current)  # cut by the rollout's end: bootstrap from last_values
        for segment in segments:
            deltas = []
            for k in segment:
                if terminations[k, env]:
                    bootstrap = 0.0  # termination wins when both flags are set
                elif truncations[k, env]:
                    bootstrap = final_values[k, env]  # the episode's real last observation
                elif k + 1 < num_steps:
                    bootstrap = values[k + 1, env]
                else:
                    bootstrap = last_values[env]
                deltas.append(rewards[k, env] + gamma * bootstrap - values[k, env])
            for i, t in enumerate(segment):
                advantages[t, env] = sum((gamma * gae_lambda) ** j * d for j, d in enumerate(deltas[i:]))
    return advantages


def random_same_step_rollout(rng, num_steps, num_envs, p_term=0.08, p_trunc=0.05):
    """Random same-step rollout parts: any row may be a boundary (both flags at once too), and
    final_values is noise everywhere, so reading it off a truncated row would show."""
    terminations = rng.random((num_steps, num_envs)) < p_term
    truncations = rng.random((num_steps, num_envs)) < p_trunc
    rewards = rng.normal(size=(num_steps, num_envs))
    values = rng.normal(size=(num_steps, num_envs))
    last_values = rng.normal(size=num_envs)
    final_values = rng.normal(size=(num_steps, num_envs)) * 3.0
    return values, last_values, final_values, rewards, terminations, truncations

"""EnvPool's time limit with the env's own termination kept on the limit step.

EnvPool ends an episode at its time limit by truncation, and it reports a step on which the env terminates *and*
the limit is reached as truncated only (its gymnasium wrapper sets terminated = done & ~trunc). A script would then
bootstrap V(s') from a terminal state on that step. `make_envpool` gives EnvPool a limit one step longer, so the
env's termination on the real limit step comes out as such, and `ExactTimeLimit` truncates in Python when an
episode's elapsed step reaches the real limit without the episode having ended:

- terminated on the limit step: terminated=True, truncated=False (EnvPool resets that env on the next step);
- reached the limit otherwise: truncated=True (and terminated as EnvPool said: an Atari life loss stays one);
- the next step of a truncated env is the usual next-step-autoreset stale step: its action is ignored, its reward
  is 0, terminated=truncated=False, it returns the reset observation and elapsed_step 0. ExactTimeLimit resets
  that env itself (EnvPool would not: its limit is one step further) and steps the others in the same call.

For Atari, where `terminated` is also set on every life loss, "the episode ended" is game over (info["terminated"]).
Sync EnvPool only (num_envs == batch_size, `step`/`reset`): the async send/recv API and the XLA step functions are
not wrapped.
"""

import numpy as np


def make_envpool(env_id: str, max_episode_steps: int | None = None, **kwargs):
    """`envpool.make(env_id, max_episode_steps=limit + 1, **kwargs)` under ExactTimeLimit(limit), where `limit` is
    `max_episode_steps`, or the env's own limit when None."""
    import envpool

    limit = max_episode_steps or int(envpool.make_spec(env_id).config.max_episode_steps)
    return ExactTimeLimit(envpool.make(env_id, max_episode_steps=limit + 1, **kwargs), limit)


def _place(parts: list[tuple[np.ndarray, object]], num_envs: int):
    """One array of `num_envs` rows from (env ids, values) parts; nested dicts (EnvPool's `players`) key by key."""
    first = parts[0][1]
    if isinstance(first, dict):
        return {key: _place([(ids, values[key]) for ids, values in parts], num_envs) for key in first}
    first = np.asarray(first)
    merged = np.zeros((num_envs,) + first.shape[1:], dtype=first.dtype)
    for ids, values in parts:
        merged[ids] = values
    return merged


class ExactTimeLimit:
    """A sync EnvPool with its limit one step past `limit` (make_envpool), truncated in Python at `limit`. Anything
    else (spaces, config, render, close) is the EnvPool's own."""

    def __init__(self, envs, limit: int):
        self.envs, self.limit = envs, limit
        self.reset_due = np.zeros(envs.config["num_envs"], dtype=bool)  # truncated here: reset on the next step

    def __getattr__(self, name: str):
        return getattr(self.envs, name)

    def reset(self, *args, **kwargs):
        self.reset_due[:] = False
        return self.envs.reset(*args, **kwargs)

    def step(self, actions: np.ndarray):
        if self.reset_due.any():
            obs, rewards, term, trunc, info = self._reset_and_step(actions)
        else:
            obs, rewards, term, trunc, info = self.envs.step(actions)
        ended = info["terminated"].astype(bool) if "terminated" in info else term  # Atari: game over
        self.reset_due = (info["elapsed_step"] >= self.limit) & ~ended & ~trunc
        return obs, rewards, term, trunc | self.reset_due, info

    def _reset_and_step(self, actions: np.ndarray):
        """The stale step of the envs truncated on the last step (a reset: reward 0, not done), and a real step
        of the others, as one step of all envs in env id order."""
        num_envs = len(self.reset_due)
        due = np.flatnonzero(self.reset_due).astype(np.int32)
        others = np.flatnonzero(~self.reset_due).astype(np.int32)
        parts = []
        if len(others):
            obs, rewards, term, trunc, info = self.envs.step(actions[others], others)
            parts.append((info["env_id"], (obs, rewards, term, trunc, info)))
        reset_obs, reset_info = self.envs.reset(due)
        not_done = np.zeros(len(due), dtype=bool)
        parts.append((reset_info["env_id"], (reset_obs, np.zeros(len(due), np.float32), not_done, not_done, reset_info)))
        return tuple(_place([(ids, values[k]) for ids, values in parts], num_envs) for k in range(5))

"""Brute-force references for cleanrl/rainbow_atari_envpool.py, written from the definitions, not from the script's
formulas: an EnvPool-like next-step autoreset stream that keeps the true episodes it played, the n-step targets of
those episodes one episode at a time, and proportional-prioritisation probabilities and importance weights."""

import numpy as np

STACK = 4


class NextStepStream:
    """`num_envs` fake Atari envs that emit what EnvPool emits with episodic_life: 4-frame stacks (a new game repeats
    its first frame, a new life lets the frames run on), clipped rewards, `terminated` at every life loss and game
    over, `truncated` at a time limit, `elapsed_step` (0 on a reset game's first observation); and the step after any
    boundary is stale: its action is ignored, its reward is 0, and it returns the next episode's first observation.

    Every frame is unique: its 2x2 pixels spell a frame number and the env, so an observation stack names its step.
    The true episodes are kept beside the emitted flags (`episodes[env]`, each a dict with `steps`, a list of
    (obs, action, reward, next_obs, t) with t the emission index of obs, and `end` in "life", "game over", "truncated",
    or "open" while it runs and "stream end" when `reset()` cuts it, as a resumed run does)."""

    def __init__(self, num_envs: int, seed: int, p_life=0.06, p_game_over=0.03, p_truncated=0.04):
        self.num_envs, self.rng = num_envs, np.random.default_rng(seed)
        self.p = (p_life, p_game_over, p_truncated)
        self.frame_number = 0
        self.stacks = np.zeros((num_envs, STACK, 2, 2), dtype=np.uint8)
        self.pending = [None] * num_envs  # the boundary whose stale step comes next
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.episodes = [[] for _ in range(num_envs)]
        self.t = -1  # emission index of the current observations

    def _frame(self, env: int) -> np.ndarray:
        self.frame_number += 1
        return np.array([[self.frame_number % 256, self.frame_number // 256], [env, 7]], dtype=np.uint8)

    def _new_episode(self, env: int) -> None:
        self.episodes[env].append(dict(steps=[], end="open"))

    def reset(self) -> np.ndarray:
        """New games in every env (the start, or a resumed run: EnvPool cannot snapshot games)."""
        self.t += 1
        for env in range(self.num_envs):
            if self.episodes[env] and self.episodes[env][-1]["end"] == "open":
                self.episodes[env][-1]["end"] = "stream end"
            self.stacks[env] = self._frame(env)
            self.elapsed[env], self.pending[env] = 0, None
            self._new_episode(env)
        return self.stacks.copy()

    def step(self, actions: np.ndarray):
        """(obs, rewards, terminations, truncations, elapsed_step) of one step of every env."""
        self.t += 1
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        terminations = np.zeros(self.num_envs, dtype=bool)
        truncations = np.zeros(self.num_envs, dtype=bool)
        for env in range(self.num_envs):
            if self.pending[env] is not None:  # stale: the action is ignored, the next episode's first observation
                new_game = self.pending[env] != "life"
                if new_game:
                    self.stacks[env] = self._frame(env)
                    self.elapsed[env] = 0
                else:
                    self.stacks[env] = np.concatenate([self.stacks[env][1:], self._frame(env)[None]])
                    self.elapsed[env] += 1
                self.pending[env] = None
                self._new_episode(env)
                continue
            obs = self.stacks[env].copy()
            self.stacks[env] = np.concatenate([self.stacks[env][1:], self._frame(env)[None]])
            self.elapsed[env] += 1
            rewards[env] = self.rng.choice([-1.0, 0.0, 1.0])
            episode = self.episodes[env][-1]
            episode["steps"].append((obs, int(actions[env]), float(rewards[env]), self.stacks[env].copy(), self.t - 1))
            u, (p_life, p_over, p_trunc) = self.rng.random(), self.p
            if u < p_life + p_over:
                terminations[env] = True
                episode["end"] = self.pending[env] = "life" if u < p_life else "game over"
            elif u < p_life + p_over + p_trunc:
                truncations[env] = True
                episode["end"] = self.pending[env] = "truncated"
        return self.stacks.copy(), rewards, terminations, truncations, self.elapsed.copy()


def n_step_targets(episodes: list[list[dict]], n: int, gamma: float) -> dict:
    """Every true transition's n-step target, one episode at a time: (env, obs bytes) -> dict(action, ret, discount,
    bootstrap obs, t, cut: how its window ended). The window from step i of an episode of L steps covers steps
    i .. min(i + n, L) - 1; if it reaches the episode's end, a termination (life loss or game over) bootstraps nothing
    and a truncation or the end of the stored stream bootstraps from the episode's last observation, with gamma to the
    number of steps covered; else it bootstraps from the observation n steps on, with gamma^n."""
    targets = {}
    for env, env_episodes in enumerate(episodes):
        for episode in env_episodes:
            steps = episode["steps"]
            for i, (obs, action, _, _, t) in enumerate(steps):
                covered = steps[i : i + n]
                ret = sum(gamma**k * reward for k, (_, _, reward, _, _) in enumerate(covered))
                reaches_end = i + len(covered) == len(steps) and episode["end"] != "open"
                if reaches_end and episode["end"] in ("life", "game over"):
                    discount, cut = 0.0, episode["end"]
                else:
                    discount, cut = gamma ** len(covered), episode["end"] if reaches_end else "full"
                if not reaches_end and len(covered) < n:
                    cut = "open"  # the stream has not yet reached the window's end
                targets[(env, obs.tobytes())] = dict(
                    action=action, ret=ret, discount=discount, bootstrap=covered[-1][3], t=t, cut=cut
                )
    return targets


def proportional_probabilities(priorities: dict, alpha: float) -> dict:
    """P(i) = p_i^alpha / sum_k p_k^alpha over the transitions in `priorities` (key -> p_i)."""
    powered = {key: p**alpha for key, p in priorities.items()}
    total = sum(powered.values())
    return {key: value / total for key, value in powered.items()}


def importance_weights(probabilities: list[float], n: int, beta: float) -> np.ndarray:
    """w_i = (N P(i))^-beta, each divided by the largest of the batch."""
    weights = [(n * p) ** -beta for p in probabilities]
    return np.array([w / max(weights) for w in weights])

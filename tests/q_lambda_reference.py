"""The Q(lambda) target by its definition, the brute force both PQN scripts' targets are checked against."""

import numpy as np


def forward_view_returns(next_values, final_values, rewards, terminated, truncated, gamma, q_lambda):
    """The lambda-return by its definition, one (t, env) at a time: walk forward from t to the end of the chain
    (the first boundary, or the rollout's last row) and mix the n-step returns with weights (1 - lambda) lambda^(n-1),
    the last one taking the remaining lambda^(N-1). The n-step return bootstraps max Q of the state n steps on
    (next_values[t + n - 1]); the chain's last one bootstraps 0 after a termination, max Q(final obs) after a
    truncation, max Q(next obs) at the rollout's end."""
    num_steps, num_envs = rewards.shape
    expected = np.zeros((num_steps, num_envs))
    for env in range(num_envs):
        for t in range(num_steps):
            end = t
            while not (terminated[end, env] or truncated[end, env]) and end < num_steps - 1:
                end += 1
            if terminated[end, env]:
                last_bootstrap = 0.0
            elif truncated[end, env]:
                last_bootstrap = final_values[end, env]
            else:
                last_bootstrap = next_values[end, env]
            length = end - t + 1
            total, discounted_rewards = 0.0, 0.0
            for n in range(1, length + 1):
                discounted_rewards += gamma ** (n - 1) * rewards[t + n - 1, env]
                if n < length:
                    total += (
                        (1 - q_lambda) * q_lambda ** (n - 1) * (discounted_rewards + gamma**n * next_values[t + n - 1, env])
                    )
                else:
                    total += q_lambda ** (n - 1) * (discounted_rewards + gamma**n * last_bootstrap)
            expected[t, env] = total
    return expected

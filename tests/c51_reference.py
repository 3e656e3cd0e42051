"""The C51 projection one atom at a time, the brute force both C51 scripts' projections are checked against."""

import numpy as np


def brute_force_projection(next_pmfs, rewards, dones, gamma, v_min, v_max):
    """Algorithm 1 of the paper one atom at a time: move atom j to r + gamma z_j (r when done), clip it into the
    support, and give its probability to the two atoms around it, each in proportion to how close it is."""
    batch, n_atoms = next_pmfs.shape
    atoms = np.linspace(v_min, v_max, n_atoms)
    delta = (v_max - v_min) / (n_atoms - 1)
    target = np.zeros((batch, n_atoms))
    for i in range(batch):
        for j in range(n_atoms):
            moved = rewards[i] + (0.0 if dones[i] else gamma * atoms[j])
            moved = min(max(moved, v_min), v_max)
            position = (moved - v_min) / delta
            below = int(np.floor(position + 1e-9))  # an atom it lands on (up to float error) takes all of it
            if abs(position - round(position)) < 1e-6:
                target[i, int(round(position))] += next_pmfs[i, j]
                continue
            target[i, below] += next_pmfs[i, j] * (below + 1 - position)
            target[i, below + 1] += next_pmfs[i, j] * (position - below)
    return target

"""A 2-D toy utility, where the swarm's trajectories can be drawn (notebook 01)."""

from __future__ import annotations

import numpy as np

TOY_EXPERTS = np.array([[-1.5, -1.0], [-0.5, 1.5], [1.0, -1.5], [0.0, 0.0]])
TOY_PEAKS = ((np.array([1.2, 1.0]), 1.0, 0.5), (np.array([-1.2, -0.6]), 0.6, 0.4))  # (centre, height, width²)


def toy_utility(x: np.ndarray) -> np.ndarray:
    """A 2-D utility with a high peak away from the experts and a lower one near them: f(x) = Σ h·exp(−‖x − μ‖²/w)."""
    x = np.atleast_2d(x)
    return sum(h * np.exp(-((x - mu) ** 2).sum(-1) / w) for mu, h, w in TOY_PEAKS)

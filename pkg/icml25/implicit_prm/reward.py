"""The implicit reward: token log-ratios, outcome reward r_θ(y) = β · log π_θ(y)/π_ref(y) (Eq. 1), and step rewards
r_t = q^t − q^{t−1} from its partial sums (the Proposition). They live in :mod:`icml25.core.implicit_reward`, which
rsd shares; this chapter reads them from there."""

from __future__ import annotations

from ..core.implicit_reward import (ImplicitPRM, ReferenceCache, aggregate_steps, check_pair,  # noqa: F401
                                    process_rewards, process_rewards_by_segments, step_ends, token_log_ratios)

"""The shared workbench: tiny LMs, generation, training, the zoo, synthetic tasks, claims and plot style."""

from . import arithmetic, claims, config, facts, flops, generation, plot, reasoners, seeding, tinylm, train, zoo
from .claims import Claim, check
from .config import SCALES, make_config

__all__ = ["arithmetic", "claims", "config", "facts", "flops", "generation", "plot", "reasoners", "seeding", "tinylm",
           "train", "zoo", "Claim", "check", "SCALES", "make_config"]

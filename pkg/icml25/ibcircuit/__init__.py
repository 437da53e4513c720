"""IBCircuit: circuit discovery with the information bottleneck (ICML 2025); the chapter's code, being split by idea."""

from .experiment import *  # noqa: F401,F403

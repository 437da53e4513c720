"""(How) Do Language Models Track State? (Li, Guo & Andreas, ICML 2025); the chapter's code, being split by idea."""

from .trackers import *  # noqa: F401,F403

"""The world: a synthetic first-order Markov language, one character per symbol."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..core.seeding import numpy_rng


ALPHABET = "".join(chr(0x100 + i) for i in range(256))  # one character per symbol


@dataclass(frozen=True)
class MarkovLanguage:
    """Tokens of a first-order Markov chain: each symbol's successor follows a Zipfian law over its own random
    permutation of the V symbols. With tied embeddings the transformer blocks must map a token to its
    successor distribution, so their (quantised) linear layers carry the prediction."""

    probs: np.ndarray  # [V, V] transition matrix

    @classmethod
    def make(cls, vocab: int, zipf: float, seed: int) -> MarkovLanguage:
        rng = numpy_rng(seed, "markov")
        ranks = 1.0 / np.arange(1, vocab + 1) ** zipf
        probs = np.stack([rng.permutation(ranks) for _ in range(vocab)])
        return cls(probs / probs.sum(-1, keepdims=True))

    @property
    def vocab(self) -> int:
        return self.probs.shape[0]

    def stationary(self) -> np.ndarray:
        evals, evecs = np.linalg.eig(self.probs.T)
        pi = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
        return pi / pi.sum()

    def entropy_rate(self) -> float:
        """H(x_t | x_{t-1}) under the chain's stationary distribution (nats): the floor of any model's loss."""
        return float(self.stationary() @ -(self.probs * np.log(self.probs)).sum(-1))

    def unigram_entropy(self) -> float:
        """H(x_t) (nats): the loss of a model that ignores the previous token."""
        pi = self.stationary()
        return float(-(pi * np.log(pi)).sum())

    def sample(self, n_seq: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """[n_seq, length] symbol ids in 0..V-1 (the first symbol uniform)."""
        table = torch.as_tensor(self.probs, dtype=torch.float32)
        cols = [torch.randint(self.vocab, (n_seq,), generator=generator)]
        for _ in range(length - 1):
            cols.append(torch.multinomial(table[cols[-1]], 1, generator=generator).squeeze(1))
        return torch.stack(cols, 1)

"""The shared training loop's output in a non-interactive run: one line per model, never a redrawn bar."""

import itertools

import torch

from icml25.core.train import train


def test_non_interactive_training_logs_one_line_and_no_bar(capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    model = torch.nn.Linear(2, 1)
    x = torch.ones(4, 2)
    res = train(model, itertools.repeat(x), 30, lr=0.1, loss_fn=lambda m, b: m(b).pow(2).mean(), desc="demo")
    err = capsys.readouterr().err
    assert "\r" not in err and err.strip().splitlines() == [f"demo: 30 steps, final loss {res.losses[-1]:.4f}"]
    monkeypatch.setenv("TQDM_DISABLE", "1")
    train(model, itertools.repeat(x), 3, lr=0.1, loss_fn=lambda m, b: m(b).pow(2).mean(), desc="quiet")
    assert capsys.readouterr().err == ""

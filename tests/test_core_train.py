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


def test_an_interactive_run_draws_no_bar_when_tqdm_is_disabled(capsys, monkeypatch):
    """The builder's kernels are interactive (IPython) but set TQDM_DISABLE: its pages get no training bars."""
    import icml25.core.train as core_train

    monkeypatch.setattr(core_train, "_interactive", lambda: True)
    monkeypatch.setattr(core_train.sys.stderr, "isatty", lambda: True, raising=False)
    model = torch.nn.Linear(2, 1)
    x = torch.ones(4, 2)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    train(model, itertools.repeat(x), 5, lr=0.1, loss_fn=lambda m, b: m(b).pow(2).mean(), desc="bar")
    assert "bar" not in capsys.readouterr().err
    monkeypatch.delenv("TQDM_DISABLE")
    train(model, itertools.repeat(x), 5, lr=0.1, loss_fn=lambda m, b: m(b).pow(2).mean(), desc="bar")
    assert "bar" in capsys.readouterr().err

import matplotlib.pyplot as plt
import numpy as np

from icml25.core import plot


def test_seed_errorbar_draws_the_mean_with_sd_bars_and_counts_the_seeds():
    fig, ax = plt.subplots()
    values = np.array([[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]])
    plot.seed_errorbar(ax, values, np.arange(3), "C0", "demo")
    line = ax.lines[0]
    assert np.allclose(line.get_ydata(), [1.0, 2.0, 3.0])
    assert ax.get_legend_handles_labels()[1] == ["demo (n=2)"]
    caps = ax.containers[0].lines[2][0].get_segments()  # the vertical bars: mean ± population sd (= 1)
    assert np.allclose([seg[:, 1] for seg in caps], [[0.0, 2.0], [1.0, 3.0], [2.0, 4.0]])
    plot.seed_errorbar(ax, values[:1], np.arange(3), "C1", "one seed")
    assert not ax.containers[1].has_yerr
    plt.close(fig)

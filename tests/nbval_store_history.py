"""A pytest plugin for the nbval run of tests/test_notebooks.py: cells execute with store_history=True, as in
Jupyter and papermill. nbval 0.11 executes them with store_history=False, and IPython then cannot see a cell's
trailing `;`, so a figure cell's `ax.legend();` would print a repr the first run did not."""

from nbval.kernel import RunningKernel


def _execute_cell_input(self, cell_input, allow_stdin=None):
    return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin,
                          stop_on_error=False)


RunningKernel.execute_cell_input = _execute_cell_input

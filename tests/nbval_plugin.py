"""A pytest plugin for the nbval run of tests/test_notebooks.py (loaded with `-p nbval_plugin`).

- Cells execute with store_history=True, as in Jupyter and papermill. nbval 0.11 executes them with
  store_history=False, and IPython then cannot see a cell's trailing `;`, so a figure cell's `ax.legend();` would
  print a repr the first run did not.
- Progress bars (tqdm's notebook widgets: a training run's bar, transformers' "Loading weights") are not compared.
  They are progress, not results, and how many there are depends on the zoo cache: the run that trains and caches
  a model draws its training bar, the run that finds it cached draws a loading bar instead.
- After a cell's reply nbval waits only 5 s for each of its outputs on the iopub channel, and fails the cell
  ("Timeout of 5 seconds exceeded waiting for output") if one is late; on a loaded machine a figure's output can
  be. It waits OUTPUT_TIMEOUT_S; the cell itself has the --nbval-cell-timeout of tests/test_notebooks.py.
"""

from nbval.kernel import RunningKernel
from nbval.plugin import IPyNbCell

WIDGET = "application/vnd.jupyter.widget-view+json"
OUTPUT_TIMEOUT_S = 120


def _execute_cell_input(self, cell_input, allow_stdin=None):
    return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False)


def _without_progress_bars(outputs):
    return [o for o in outputs if WIDGET not in o.get("data", {})]


_compare_outputs = IPyNbCell.compare_outputs


def _compare_outputs_but_progress_bars(self, test, ref, skip_compare=None):
    return _compare_outputs(self, _without_progress_bars(test), _without_progress_bars(ref), skip_compare)


_init_cell = IPyNbCell.__init__


def _init_cell_with_patient_output_timeout(self, *args, **kwargs):
    _init_cell(self, *args, **kwargs)
    self.output_timeout = OUTPUT_TIMEOUT_S


RunningKernel.execute_cell_input = _execute_cell_input
IPyNbCell.compare_outputs = _compare_outputs_but_progress_bars
IPyNbCell.__init__ = _init_cell_with_patient_output_timeout

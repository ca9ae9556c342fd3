"""Kept for one release: chapter 6's panel moved. Its small run is ``experiments.small_em_vs_sgd``,
its figure ``plots.sticky_em_vs_sgd``, the panel ``widgets.sticky_explorer``. These names forward."""

from . import experiments, plots, widgets

DEFAULTS, SMALL = experiments.SMALL_DEFAULTS, experiments.SMALL_SIZE
RATIOS, RATES = experiments.SMALL_RATIOS, experiments.SMALL_RATES
small_run = experiments.small_em_vs_sgd
draw = plots.sticky_em_vs_sgd
draw_message = plots.message
explorer = widgets.sticky_explorer

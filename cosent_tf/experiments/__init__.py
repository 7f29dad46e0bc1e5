"""The paper's experiments: the report over many runs, its tables and plots."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "METRIC_RANGES": ".report",
    "KINDS": ".report",
    "load_runs": ".report",
    "method_name": ".report",
    "STUDIES": ".report",
    "group_runs": ".report",
    "table_one_runs": ".report",
    "CONVERGENCE_FRACTION": ".report",
    "convergence_tables": ".report",
    "convergence_groups": ".report",
    "tables": ".report",
    "plot_valid_curve": ".report",
    "plot_convergence": ".report",
    "plot_cosine_density": ".report",
    "plot_batch_sizes": ".report",
    "write_report": ".report",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)

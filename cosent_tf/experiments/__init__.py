"""The paper's experiments: finished runs read and grouped into studies (runs), the report's
markdown tables (report) and its plots (plots), and the retrieval and calibration studies' reports."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "METRIC_RANGES": ".runs",
    "KINDS": "..models.kinds",
    "load_runs": ".runs",
    "method_name": ".runs",
    "STUDIES": ".runs",
    "group_runs": ".runs",
    "table_one_runs": ".runs",
    "CONVERGENCE_FRACTION": ".report",
    "convergence_tables": ".report",
    "convergence_groups": ".runs",
    "tables": ".report",
    "plot_valid_curve": "..training.run_folder",
    "plot_convergence": ".plots",
    "plot_cosine_density": ".plots",
    "plot_batch_sizes": ".plots",
    "write_report": ".report",
    "RETRIEVAL_LOSSES": ".report",
    "RETRIEVAL_METRICS": ".report",
    "retrieval_study_runs": ".report",
    "retrieval_tables": ".report",
    "run_retrieval": ".report",
    "plot_retrieval": ".report",
    "DECISION_RANGES": ".runs",
    "DECISION_COLUMNS": ".report",
    "decision_table": ".report",
    "calibration_results": ".report",
    "calibration_tables": ".report",
    "plot_calibration": ".report",
    "write_calibration_report": ".report",
    "plot_reliability_panels": ".plots",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)

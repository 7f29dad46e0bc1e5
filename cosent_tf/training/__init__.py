"""One training run: its configuration, data, engine, run folder, micro-batches and devices."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "SMALL_RANDOM_CONFIG": ".engine",
    "RunConfig": ".engine",
    "RANGES": ".engine",
    "RunData": ".engine",
    "check_inputs": ".engine",
    "run_inputs": ".engine",
    "load_run_data": ".engine",
    "Matcher": ".engine",
    "train": ".engine",
    "RANDOM_WEIGHTS_NOTE": ".engine",
    "RANDOM_CHECKPOINT_NOTE": ".engine",
    "starts_from_random_weights": ".engine",
    "Recipe": ".recipes",
    "RECIPES": ".recipes",
    "get_recipe": ".recipes",
    "RUN_MARKER": ".run_folder",
    "RUN_OUTPUTS": ".run_folder",
    "RUN_FOLDER": ".run_folder",
    "MARKER_FORMAT": ".run_folder",
    "RESUMABLE_CHANGES": ".run_folder",
    "PATH_SETTINGS": ".run_folder",
    "RENAMED_SETTINGS": ".run_folder",
    "fingerprints": ".run_folder",
    "check_run_folder": ".run_folder",
    "prepare_run_folder": ".run_folder",
    "GradientCacheModel": ".gradient_cache",
    "STRATEGIES": ".distribute",
    "JOBS": ".distribute",
    "TF_CONFIG_EXAMPLE": ".distribute",
    "WAIT_LOG_EVERY": ".distribute",
    "PROBE_EVERY": ".distribute",
    "get_strategy": ".distribute",
    "read_tf_config": ".distribute",
    "wait_for_workers": ".distribute",
    "WATCHDOG": ".distribute",
    "is_chief": ".distribute",
    "started_together": ".distribute",
    "worker": ".distribute",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)

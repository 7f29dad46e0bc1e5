"""Figures written to PNG files, without pyplot.

A :class:`matplotlib.figure.Figure` made directly draws with the Agg canvas and touches no
global state: no backend is chosen for the process and no figure is left registered, so a
program that plots on screen is not changed by a run or a report that writes its PNGs.
matplotlib loads on the first figure, not with this module.
"""

from __future__ import annotations

from typing import Any

from .io import atomic_path


def new_figure(rows: int = 1, columns: int = 1, figsize: tuple[float, float] = (6, 4), squeeze: bool = True) -> Any:
    """``(figure, axes)``: a figure of ``rows`` x ``columns`` panels, as ``pyplot.subplots`` gives them.

    Example:
        >>> figure, axis = new_figure(figsize=(5, 3.6))
        >>> axis.plot([0, 1], [0, 1])
        >>> save_png(figure, "line.png")
    """
    from matplotlib.figure import Figure

    figure = Figure(figsize=figsize)
    return figure, figure.subplots(rows, columns, squeeze=squeeze)


def save_png(figure: Any, path: str) -> None:
    """Write ``figure`` to ``path`` as a PNG, whole or not at all (a temporary file renamed)."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)

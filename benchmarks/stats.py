"""Small helpers shared by the benchmark modules: medians and aligned tables."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000.0


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Right-aligned columns (first column left-aligned), as plain text and valid markdown."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            str(cell).ljust(width) if index == 0 else str(cell).rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (width + 2) if i == 0 else "-" * (width + 1) + ":" for i, width in
                          enumerate(widths)) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])

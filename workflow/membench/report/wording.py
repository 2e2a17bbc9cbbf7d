"""How the summary says a number: ratios as "10.7x less" or "1.9x slower", accuracy changes as
"-2.0 points", memory in its unit, a setting with its values filled in. One home for the wording,
so that the report page and ``membench summary`` say the same thing."""

from __future__ import annotations

import math
import numbers
import string

__all__ = [
    "fill_setting",
    "is_missing",
    "memory_ratio_words",
    "memory_words",
    "number_words",
    "points_words",
    "time_ratio_words",
]

GIB_PER_MIB = 1 / 1024


def is_missing(value) -> bool:
    """None, NaN, or an empty text."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def number_words(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures, whole numbers without a decimal point."""
    if is_missing(value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Real) and float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return f"{float(value):.{digits}g}"
    return str(value)


def _factor(ratio: float) -> str:
    return f"{ratio:.1f}" if ratio < 100 else f"{ratio:,.0f}"


def memory_ratio_words(ratio) -> str:
    """The method's memory over the baseline's: ``0.0935`` -> ``"10.7x less"``, ``1.3`` -> ``"1.3x
    more"``, within 5% -> ``"about the same"``."""
    if is_missing(ratio) or ratio <= 0:
        return "-"
    if abs(ratio - 1) < 0.05:
        return "about the same"
    return f"{_factor(1 / ratio)}x less" if ratio < 1 else f"{_factor(ratio)}x more"


def time_ratio_words(ratio) -> str:
    """The method's time over the baseline's: ``1.9`` -> ``"1.9x slower"``, ``0.5`` -> ``"2.0x
    faster"``, within 5% -> ``"about the same"``."""
    if is_missing(ratio) or ratio <= 0:
        return "-"
    if abs(ratio - 1) < 0.05:
        return "about the same"
    return f"{_factor(ratio)}x slower" if ratio > 1 else f"{_factor(1 / ratio)}x faster"


def points_words(change) -> str:
    """A change of an accuracy (fractions): ``-0.02`` -> ``"-2.0 points"``."""
    if is_missing(change):
        return "-"
    points = change * 100
    return "no change" if abs(points) < 0.05 else f"{points:+.1f} points"


def memory_words(mib, unit: str | None = None) -> str:
    """MiB as the unit asks: ``"1.76 GiB"`` or ``"408 MiB"``."""
    if is_missing(mib):
        return "-"
    if unit == "GiB":
        return f"{mib * GIB_PER_MIB:.3g} GiB"
    return f"{mib:,.0f} MiB" if mib >= 100 else f"{mib:.3g} MiB"


class _SettingFormatter(string.Formatter):
    """``{max_len:bytes}`` -> ``2 MiB``; numbers without trailing zeros; missing values as ``?``."""

    def get_value(self, key, args, kwargs):
        value = kwargs.get(key)
        return "?" if is_missing(value) else value

    def format_field(self, value, format_spec):
        if format_spec == "bytes" and isinstance(value, numbers.Real) and not isinstance(value, bool):
            for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
                if value >= size:
                    return f"{value / size:g} {unit}"
            return f"{value:g} bytes"
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and not format_spec:
            return number_words(value, 4).replace(",", "")
        return super().format_field(value, format_spec)


def fill_setting(template: str, values: dict) -> str:
    """A row's ``setting`` text with its ``{column}`` fields filled from ``values``."""
    return _SettingFormatter().vformat(template, (), values)

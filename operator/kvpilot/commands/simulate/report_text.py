"""``kvpilot simulate SCENARIO`` text report: the engine's result laid out at the terminal's width.

One ``label  value`` row per field, nested mappings indented, lists of records as ``-`` bullets; values
wrap on spaces under their first line, so no name or number is split. Figures print through
:mod:`kvpilot.text.numbers` (thousands separators, about four significant figures, never ``None``:
an unset ``config`` field reads ``not set``, a figure with no data ``none``). ``-o json`` keeps the
unrounded values (the percentiles within :data:`kvpilot.engine.report_stats.RELATIVE_ACCURACY` of exact).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvpilot.text.numbers import count, significant

if TYPE_CHECKING:
    from kvpilot.engine.scenarios import ScenarioReport
    from kvpilot.text.documents import JsonValue


def value_text(value: Any, missing: str = "none") -> str:
    """One field's value as printed: counts grouped, fractions to four significant figures."""
    if value is None:
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return count(value)
    if isinstance(value, float):
        return count(int(value)) if value.is_integer() else significant(value, 4)
    return str(value)


#: Units of the engine config's dimensioned fields (:class:`kvpilot.engine.config.EngineConfig`: bytes,
#: bytes per second, seconds, tokens), printed after their value in text; ``-o json`` keeps bare numbers.
CONFIG_UNITS = {
    "kv_offload_cpu_bytes": "B",
    "offload_chunk_tokens": "tokens",
    "offload_load_bandwidth": "B/s",
    "offload_store_bandwidth": "B/s",
    "bytes_per_token": "B",
    "non_kv_reserve_bytes": "B",
    "weight_bytes": "B",
    "step_overhead": "s",
    "kv_cache_tokens": "tokens",
    "max_model_len": "tokens",
    "max_num_batched_tokens": "tokens",
    "block_size": "tokens",
}


def _config_value(name: str, value: Any) -> str:
    text = value_text(value, "not set")
    unit = CONFIG_UNITS.get(name)
    return f"{text} {unit}" if unit and value is not None and not isinstance(value, bool) else text


def _pairs(mapping: Mapping[str, JsonValue]) -> str:
    """A record of the report (``requests``, one of ``passes``) on one line: ``name=value, ...``."""
    return ", ".join(f"{k}={value_text(v)}" for k, v in mapping.items())


def render_text(result: ScenarioReport, width: int) -> str:
    """``result`` (the engine's report) as text of at most ``width`` columns."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()  # wraps on spaces
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            grid.add_row(Text(key, style="bold"), "")
            for row in value:
                grid.add_row("  -", Text(_pairs(row)))
        elif isinstance(value, Mapping) and len(value) > 4:
            grid.add_row(Text(key, style="bold"), "")
            for k, v in value.items():
                shown = _config_value(k, v) if key == "config" else value_text(v)
                grid.add_row(f"  {k}", Text(shown))
        elif isinstance(value, Mapping):
            grid.add_row(Text(key, style="bold"), Text(_pairs(value)))
        else:
            grid.add_row(Text(key, style="bold"), Text(value_text(value)))
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False).print(grid)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())

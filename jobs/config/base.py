"""What every section of the config is made with: a frozen pydantic dataclass that refuses unknown
keys, and :func:`setting`, a field with its default, bounds and one line of meaning (the reference
table of ``docs/configuration.md`` is generated from those lines)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

SECTION = ConfigDict(extra="forbid", validate_default=False, arbitrary_types_allowed=False)


def section(cls: type) -> type:
    """A config section: a frozen dataclass whose fields are validated, unknown keys refused."""
    return dataclass(frozen=True, config=SECTION)(cls)


def setting(default: Any = ..., doc: str = "", **bounds: Any) -> Any:
    """A field of a section: ``default`` (a list or dict is copied for every instance; ``...``:
    required), ``doc`` (its one line of meaning) and pydantic's bounds (``ge``, ``gt``, ``le``...)."""
    if isinstance(default, (list, dict)):
        value = default
        return Field(default_factory=lambda: _copy(value), description=doc, **bounds)
    return Field(default, description=doc, **bounds)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value

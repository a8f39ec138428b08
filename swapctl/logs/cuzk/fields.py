"""Phase values out of `k_ms=X` and `k=Xms` fields, kept as float32 arrays: 4 bytes a value and the 7
significant digits the logs print, so percentiles are exact and a multi-GB log fits in little memory."""

from __future__ import annotations

import re
from array import array

from .patterns import MS_FIELD, NTT_FIELD

VALUE = "f"  # float32: logs print ms with at most 7 significant digits, which it holds exactly
Phases = dict[str, "array[float]"]

# kind -> (the pattern of its pairs, what each pair holds once, to count them)
FIELDS = {"ms": (MS_FIELD, b"_ms="), "ntt": (NTT_FIELD, b"=")}
KNOWN_FIELDS: dict[tuple[str, bytes], set[bytes]] = {}
_FIELD_RES: dict[tuple[str, bytes], re.Pattern[bytes]] = {}


def _field(kind: str, key: bytes) -> re.Pattern[bytes]:
    """The values of one field: the pattern of its kind with the name fixed."""
    pattern = _FIELD_RES.get((kind, key))
    if pattern is None:
        unit = rb"ms\b" if kind == "ntt" else rb"\b"  # no \b before: the literal name starts the search
        pattern = _FIELD_RES[kind, key] = re.compile(re.escape(key) + rb"=(-?\d+(?:\.\d+)?)" + unit)
    return pattern


def add_fields(phases: Phases, text: bytes, kind: str, where: bytes = b"", prefix: str = "",
               rename: dict[bytes, str] | None = None) -> None:
    """Appends the `*_ms=X` (kind "ms") or `k=Xms` (kind "ntt") values in `text` to `phases`. One findall
    per field name, so the per-value work stays in C; when the names seen so far do not account for
    every value (a new name, or one name the tail of another), one findall of all pairs does it.
    `where` (the message, say) keeps the names apart by where they were seen."""
    pattern, mark = FIELDS[kind]
    total = text.count(mark)
    if not total:
        return
    known = KNOWN_FIELDS.setdefault((kind, where), set())
    found: dict[bytes, list[bytes]] = {k: _field(kind, k).findall(text) for k in known}
    if sum(map(len, found.values())) != total:
        pairs: list[tuple[bytes, bytes]] = pattern.findall(text)
        known.update(k for k, _ in pairs)
        found = {}
        for k, v in pairs:
            found.setdefault(k, []).append(v)
    for k, values in found.items():
        if values:
            name = (rename or {}).get(k) or prefix + k.decode()
            phases.setdefault(name, array(VALUE)).extend(map(float, values))


def extend(phases: Phases, more: Phases) -> None:
    """Adds the values of `more` to `phases`, phase by phase."""
    for name, values in more.items():
        phases.setdefault(name, array(VALUE)).extend(values)

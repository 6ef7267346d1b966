"""Kubernetes resource quantities ("500m", "1Gi", "2") as exact fractions, and back to text.

Admission (quota, limit ranges) and the scheduler compare quantities; Fractions keep "0.1" + "0.2"
equal to "300m" without float noise.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIXES = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_PATTERN = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity; raises ValueError naming the value and the allowed suffixes."""
    if isinstance(value, (int, float)):
        return Fraction(value)
    match = _PATTERN.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(
            f"quantity {value!r} is not valid; expected a number with an optional "
            f"suffix among {', '.join(s for s in _SUFFIXES if s)}"
        )
    return Fraction(match.group(1)) * _SUFFIXES[match.group(2)]


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Format like the API server's canonical form for the common cases ("1500m", "2", "1Gi")."""
    if value.denominator == 1:
        whole = int(value)
        if binary and whole:
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                if whole % int(_SUFFIXES[suffix]) == 0:
                    return f"{whole // int(_SUFFIXES[suffix])}{suffix}"
        return str(whole)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    return f"{int(value * 10**9)}n"


def format_like(resource: str, value: Fraction) -> str:
    return format_quantity(value, binary=("memory" in resource or "storage" in resource))

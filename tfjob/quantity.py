"""Kubernetes resource quantities ("500m", "1Gi", "2") parsed to exact decimals.

The request model checks quantity syntax and that a limit is not below its
request; both need the same parser, and nothing else in the project does.
"""

import re
from decimal import Decimal

QUANTITY_PATTERN = re.compile(
    r"^(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "m": Decimal("0.001"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
}


def is_quantity(text: str) -> bool:
    """True when `text` is a non-negative Kubernetes quantity."""
    return QUANTITY_PATTERN.match(text) is not None


def parse_quantity(text: str) -> Decimal:
    """The value of a non-negative Kubernetes quantity; ValueError when malformed."""
    match = QUANTITY_PATTERN.match(text)
    if match is None:
        raise ValueError(f"quantity {text!r} is not a Kubernetes quantity such as 500m, 2, 1Gi")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))

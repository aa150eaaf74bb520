"""Kubernetes resource quantities (`250m`, `1.5Gi`, `1e3`) as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal

from lagpilot.model.spec import QUANTITY, QUANTITY_MAX_CHARS

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: object) -> Decimal | None:
    """A quantity (an int, or a string the CRD's QUANTITY pattern accepts) as a Decimal; None if it
    is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str) or len(value) > QUANTITY_MAX_CHARS or not re.fullmatch(QUANTITY, value):
        return None
    m = re.match(r"^\+?([0-9]*\.?[0-9]*)(.*)$", value)
    assert m is not None  # QUANTITY matched
    number = Decimal(m.group(1) if m.group(1) not in ("", ".") else "0")
    suffix = m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))  # e/E exponent

"""Kubernetes resource quantities (``100m``, ``8Gi``, ``1.5``, ``2e3``) parsed into integer milli-units.

Every resource amount inside hetsched is an ``int`` of milli-units: 1 CPU = 1000, 1 byte of memory = 1000,
one accelerator chip = 1000. One unit for all resources lets the scheduler keep node state in one int64
matrix. Parsing follows ``k8s.io/apimachinery/pkg/api/resource``: a signed decimal number, then either a
binary suffix (Ki … Ei), a decimal suffix (n u m k M G T P E) or an exponent (``e3``); values that are not a
whole number of milli-units round up, as ``Quantity.MilliValue`` does.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$")

MILLI = 1000


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


MAX_TEXT = 64
"""Characters in a quantity; Kubernetes' own quantities are far shorter."""
MAX_EXPONENT = 30
MAX_AMOUNT = Decimal(2 ** 63 - 1) / MILLI
"""What fits a signed 64-bit count of milli-units, as Kubernetes' ``resource.Quantity`` holds."""


def parse_quantity(value: object) -> int:
    """Return ``value`` in milli-units; raise :class:`QuantityError` with a readable reason.

    Accepts strings and plain numbers (YAML ``cpu: 2`` arrives as ``int``). Negative quantities are
    rejected: no request, limit, capacity or capability may be negative.
    """
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity such as '2', '500m' or '8Gi', got boolean {value!r}")
    if isinstance(value, int | float):
        text = repr(value) if isinstance(value, float) else str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise QuantityError(f"expected a quantity such as '2', '500m' or '8Gi', got {type(value).__name__}")
    if len(text) > MAX_TEXT:
        raise QuantityError(f"{text[:20]!r}… ({len(text)} characters) is too long for a quantity")
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"{value!r} is not a valid quantity (examples: '2', '500m', '1.5', '8Gi', '2e3')")
    number_text, suffix = match.groups()
    try:
        number = Decimal(number_text)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only valid decimals
        raise QuantityError(f"{value!r} is not a valid quantity") from exc
    if suffix in _BINARY:
        amount = number * _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        if abs(int(suffix[1:])) > MAX_EXPONENT:
            raise QuantityError(f"{value!r}: the exponent is out of range (±{MAX_EXPONENT})")
        amount = number.scaleb(int(suffix[1:]))
    else:
        amount = number * _DECIMAL[suffix]
    if amount < 0:
        raise QuantityError(f"{value!r} is a negative quantity; requests, limits and capacities must be zero or more")
    if amount > MAX_AMOUNT:
        raise QuantityError(f"{value!r} is too large (at most {MAX_AMOUNT:.3g})")
    milli = (amount * MILLI).to_integral_value(rounding=ROUND_CEILING)
    if milli > 2**62:
        raise QuantityError(f"{value!r} is too large")
    return int(milli)


def format_quantity(milli: int, resource: str = "") -> str:
    """Render milli-units back into a short human string (``1500m`` → ``1.5``, memory as ``Gi``)."""
    if resource == "memory" or resource.endswith("storage"):
        units = milli / MILLI
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units >= size:
                return f"{units / size:.4g}{suffix}"
        return f"{units:.4g}"
    if milli % MILLI == 0:
        return str(milli // MILLI)
    if milli < MILLI:
        return f"{milli}m"
    return f"{milli / MILLI:.4g}"

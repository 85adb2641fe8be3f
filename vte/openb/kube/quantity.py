"""Kubernetes quantities (`"32Gi"`, `"500m"`, `"4"`, `"1.5"`, `"1e3"`), parsed exactly.

The grammar of `k8s.io/apimachinery/pkg/api/resource.ParseQuantity`: an optionally signed
decimal number (`1`, `1.5`, `.5`, `1.`) and one optional suffix: binary (`Ki Mi Gi Ti Pi
Ei`, powers of 1024), decimal (`n u m k M G T P E`, powers of 1000) or a decimal exponent
(`e3`, `E-2`). Values are `decimal.Decimal`, so nothing is rounded on the way;
`milli_value` and `value` round up, as `Quantity.MilliValue()` and `Quantity.Value()` do.
A JSON number (YAML's `cpu: 64`) is read as its decimal text.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PATTERN = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                      r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_CONTEXT = decimal.Context(prec=100, Emin=-10_000, Emax=10_000, traps=[decimal.InvalidOperation])
MAX_TEXT = 100           # longer quantity strings are refused (Kubernetes: about 40 digits)


class QuantityError(ValueError):
    """A quantity that Kubernetes would not parse; the message names the field and value."""


def parse(value, field: str = "quantity") -> Decimal:
    """The exact value of a quantity; QuantityError naming `field` and the value otherwise."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"{field}: {value!r} is not a quantity (a string such as '4', "
                            "'500m', '32Gi' or a number)")
    text = value if isinstance(value, str) else repr(value)
    match = _PATTERN.fullmatch(text.strip()) if len(text) <= MAX_TEXT else None
    if match is None or text.strip() in ("inf", "nan"):
        raise QuantityError(f"{field}: {text!r} is not a Kubernetes quantity (allowed e.g. "
                            "'4', '1.5', '500m', '32Gi', '1e3')")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return _CONTEXT.multiply(number, Decimal(1024) ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return _CONTEXT.scaleb(number, _DECIMAL[suffix])
    return _CONTEXT.scaleb(number, int(suffix[1:]))


def _ceil(x: Decimal) -> int:
    return int(x.to_integral_value(rounding=decimal.ROUND_CEILING))


def value(value, field: str = "quantity") -> int:
    """The quantity rounded up to an integer (`Quantity.Value()`)."""
    return _ceil(parse(value, field))


def milli_value(value, field: str = "quantity") -> int:
    """Thousandths of the quantity, rounded up (`Quantity.MilliValue()`): CPU in milli-cores."""
    return _ceil(_CONTEXT.scaleb(parse(value, field), 3))


def mib(value, field: str = "quantity", round_up: bool = True) -> int:
    """A byte quantity in MiB, rounded up (a request) or down (`round_up=False`, a capacity)."""
    x = _CONTEXT.divide(parse(value, field), Decimal(1 << 20))
    return _ceil(x) if round_up else int(x.to_integral_value(rounding=decimal.ROUND_FLOOR))


__all__ = ["parse", "value", "milli_value", "mib", "QuantityError"]

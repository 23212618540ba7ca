"""Numbers written by people and programs: plain ASCII decimals only, the one rule of the whole service
(docs/errors.md#numbers-in-requests).

Python's ``int()``, ``Decimal()`` and ``float()`` read far more than a plain decimal: ``"1_000"``, ``"+5"``,
``" 5 "``, ``"1e3"``, Arabic-Indic and other Unicode digits (``"١٠"``), while ``str.isdigit()`` is true for
``"²"``, which ``int()`` then refuses.  Every number a request carries as text (a path id, a query parameter,
a JSON string, a form field) is read here instead:

* an integer (an id, a size, a count, an index): ``[0-9]+``, checked against its range before ``int()`` (so a
  million-digit string costs nothing and an id never exceeds PostgreSQL's ``bigint``);
* a decimal (an epsilon, a probability, an amount, a value): ``[0-9]+(\\.[0-9]+)?`` or ``\\.[0-9]+``, with a
  leading ``-`` only where the caller allows one (the caller's own range check then says "must be positive").

JSON numbers are numbers already (the JSON grammar is ASCII); only text is checked here.  Errors are
:class:`~ldpmarket.problems.NumberError` (a ``ValueError``, whose message is meant for people).  This module imports
nothing from Django or the apps, so any layer may use it; the Django, REST framework and django-filter fields
built on it are in :mod:`ldpmarket.fields`.
"""
from __future__ import annotations

import re
from decimal import Decimal

from .problems import NumberError  # raised here, declared with the service's errors

#: PostgreSQL's ``bigint``, the type of every id.
BIGINT_MAX = 2 ** 63 - 1
#: The regular expressions of the rule (``fullmatch``), also the OpenAPI ``pattern`` of a number given as text.
INT_PATTERN = r"[0-9]+"
DECIMAL_PATTERN = r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_INT = re.compile(INT_PATTERN)
_DECIMAL = re.compile(DECIMAL_PATTERN)
_SIGNED_DECIMAL = re.compile("-?" + DECIMAL_PATTERN)
#: Digits beyond which a decimal is refused unread (no amount, epsilon or value needs more).
MAX_DECIMAL_DIGITS = 100


def is_ascii_int(text) -> bool:
    """Whether ``text`` is a str of ASCII digits only (``"١٠"``, ``"²"``, ``"+5"``, ``"1_0"``, ``" 1"``: no)."""
    return isinstance(text, str) and _INT.fullmatch(text) is not None


def parse_ascii_int(text, *, min: int = 0, max: int = BIGINT_MAX) -> int:
    """``text`` (ASCII digits only) as an int in ``[min, max]``; :class:`NumberError` otherwise."""
    if not is_ascii_int(text):
        raise NumberError("Write a whole number with the digits 0-9 only.")
    digits = text.lstrip("0") or "0"  # int() of a long string is slow, and refused past 4300 digits
    if len(digits) > len(str(max)) or not min <= int(digits) <= max:
        raise NumberError(f"Give a whole number from {min} to {max}.")
    return int(digits)


def as_id(text) -> int | None:
    """``text`` as an id (ASCII digits, 1 to :data:`BIGINT_MAX`), or ``None`` (for "an id or a username")."""
    try:
        return parse_ascii_int(text, min=1)
    except NumberError:
        return None


def parse_ascii_decimal(text, *, signed: bool = False) -> Decimal:
    """``text`` (``12``, ``0.5``, ``.5``; ``-0.5`` when ``signed``) as an exact Decimal; :class:`NumberError`
    otherwise.  No exponent, no ``+``, no ``_``, no whitespace (strip it first where the field allows it), no
    digits other than 0-9."""
    pattern = _SIGNED_DECIMAL if signed else _DECIMAL
    if not isinstance(text, str) or pattern.fullmatch(text) is None:
        example = "0.5 or -2" if signed else "0.5 or 2"
        raise NumberError(f"Write a plain decimal number with the digits 0-9 and a point, for example {example}.")
    if len(text) > MAX_DECIMAL_DIGITS:
        raise NumberError(f"Write at most {MAX_DECIMAL_DIGITS} digits.")
    return Decimal(text)

"""Argument checks every layer shares: what counts as an int, a number, a flag.

A Python ``int``, a numpy integer (``np.int64(4)``) and a 0-d integer tensor
(``torch.tensor(4)``) are all integers here; ``bool`` is not (``True`` is a flag, never a
count), nor is a float that happens to be whole (``4.0`` is refused, so a typo never rounds).
A flag is a Python ``bool`` or ``np.bool_``; a string such as ``"False"`` is refused instead of
being read as true. Each check raises one message naming the argument and what was expected.

>>> import numpy as np, torch
>>> as_int(np.int64(4)), as_int(torch.tensor(3)), as_int(True), as_int(2.0)
(4, 3, None, None)
>>> check_int("gamma", np.int32(2), minimum=1)
2
>>> check_flag("do_sample", "False")
Traceback (most recent call last):
...
TypeError: do_sample must be True or False, got the string 'False'
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["as_int", "check_flag", "check_int", "check_real", "is_int"]


def as_int(x: Any) -> int | None:
    """``x`` as a Python int when it is an integer (int, numpy integer, 0-d integer tensor),
    else None. Bools are not integers here."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, np.bool_):
        return None
    if isinstance(x, numbers.Integral):  # numpy integers register as Integral
        return int(x)
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and len(shape) == 0 and dtype is not None and hasattr(x, "item"):
        is_float = getattr(dtype, "is_floating_point", None)
        if is_float is None:  # numpy 0-d array
            kind = getattr(dtype, "kind", "")
            return int(x.item()) if kind in ("i", "u") else None
        if not is_float and not dtype.is_complex and str(dtype) != "torch.bool":
            return int(x.item())
    return None


def is_int(x: Any) -> bool:
    return as_int(x) is not None


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int in ``[minimum, maximum]`` (either bound optional), or a
    ValueError naming ``name``."""
    v = as_int(value)
    if v is None or (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        if minimum is not None and maximum is not None:
            want = f"an integer in [{minimum}, {maximum}]"
        elif minimum is not None:
            want = f"an integer >= {minimum}"
        elif maximum is not None:
            want = f"an integer <= {maximum}"
        else:
            want = "an integer"
        raise ValueError(f"{name} must be {want}, got {_describe(value)}")
    return v


def check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float within the given bounds (open or closed), or a ValueError
    naming ``name``. Ints, floats, numpy numbers and 0-d tensors are numbers; bools and
    strings are not."""
    v: float | None = None
    if not isinstance(value, (bool, str, np.bool_)):
        if isinstance(value, numbers.Real):
            v = float(value)
        elif getattr(value, "shape", None) == () and hasattr(value, "item"):
            item = value.item()
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                v = float(item)
    ok = v is not None and math.isfinite(v)
    if ok and low is not None:
        ok = v > low if low_open else v >= low  # type: ignore[operator]
    if ok and high is not None:
        ok = v < high if high_open else v <= high  # type: ignore[operator]
    if not ok:
        lo = "" if low is None else f"{'(' if low_open else '['}{low:g}"
        hi = "" if high is None else f"{high:g}{')' if high_open else ']'}"
        if low is not None and high is not None:
            want = f"a finite number in {lo}, {hi}"
        elif low is not None:
            want = f"a finite number {'>' if low_open else '>='} {low:g}"
        elif high is not None:
            want = f"a finite number {'<' if high_open else '<='} {high:g}"
        else:
            want = "a finite number"
        raise ValueError(f"{name} must be {want}, got {_describe(value)}")
    return v  # type: ignore[return-value]


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool: True/False (or a numpy bool); anything else is a TypeError (a
    string ``"False"`` would otherwise read as true)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {_describe(value)}")

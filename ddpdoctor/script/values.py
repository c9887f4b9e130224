"""The values the lint walks compute with: unknown, known not None, three-valued truth.

Both walks of a script use them: the per-rank interpreter (``interp.py``) and the pipeline-neighbour
walker (``p2p_exchange.py``). A value is a concrete Python value where the text shows it, a modelled
object (a DDP model, a neighbour rank, request handles) or UNKNOWN. A condition's truth is True,
False or UNKNOWN; an UNKNOWN condition is one the walk cannot decide, not one that is false.
"""

from __future__ import annotations


class Modelled:
    """A value a walk models without holding it. ``truth()`` is its truth where Python's ``bool``
    would read the real object; an object without ``__bool__`` or ``__len__`` is true."""

    __slots__ = ()

    def truth(self) -> object:
        return True


class Unknown(Modelled):
    __slots__ = ()

    def truth(self) -> object:
        return UNKNOWN

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = Unknown()


class NotNone(Modelled):
    """Unknown, but known not to be None (learnt from a condition such as ``if x is not None``)."""

    __slots__ = ()

    def truth(self) -> object:
        return UNKNOWN  # not None may still be 0, False or empty

    def __repr__(self) -> str:
        return "!None"


NOT_NONE = NotNone()


def truth_of(v: object) -> object:
    """``bool(v)`` as True, False or UNKNOWN."""
    if isinstance(v, Modelled):
        return v.truth()
    try:
        return bool(v)
    except Exception:  # noqa: BLE001 - any error of a concrete operation means the value is unknown
        return UNKNOWN


def negation(v: object) -> object:
    """The truth of ``not v``."""
    t = truth_of(v)
    return UNKNOWN if t is UNKNOWN else not t

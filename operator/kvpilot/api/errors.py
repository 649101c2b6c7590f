"""The one error type of the API layer: a spec problem that names its field."""

from __future__ import annotations

from kvpilot.text.errors import InputError


class SpecError(InputError):
    """An invalid VLLMServer (or render input), naming the offending field.

    Attributes:
        field: the field path in the resource's own camelCase spelling, e.g.
            ``spec.engine.maxNumSeqs`` or ``spec.engine.extraArgs[1]``; ``metadata.name`` for
            the object's name; ``kind``/``apiVersion`` for the wrong resource type.
        message: one line saying what is wrong and, where possible, what to do instead.

    ``str(error)`` is ``"<field>: <message>"``, the one-line reason the CLI prints and the
    operator puts into the ``Invalid`` condition and Event.

    The :class:`~kvpilot.text.errors.InputError` of the API layer, and deliberately *not* a ``ValueError``:
    pydantic wraps ``ValueError`` raised in validators into a ``ValidationError`` that loses the field path,
    while any other exception propagates as is.
    """

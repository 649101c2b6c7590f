"""The one error type for input kvpilot refuses: a field and one line saying what is wrong with it.

Every package raises a subclass of :class:`InputError` for a bad value it was handed (a VLLMServer's
field, a config.json key, a workload or trace line, an engine field, a command-line option), and every
command turns one into the same line and exit status (``kvpilot.commands._common.fail_input``)::

    kvpilot: error: [FILE: ]<field>: <message>

The kinds, by package:

- :class:`InvalidValueError` (here): a value of the engine model, a workload, a trace, vLLM's argv, an option;
- ``kvpilot.api.SpecError``: a VLLMServer (or render input);
- ``kvpilot.kv.spec.KVConfigError``: a config.json or an option of ``kvpilot kv``;
- ``kvpilot.text.documents.DocumentError``: a YAML or JSON document that is unparsable or beyond a bound.

All but ``SpecError`` are also ``ValueError``\\ s, Python's own kind for a bad value (so callers that
catch ``ValueError`` keep working). ``SpecError`` is deliberately not one: pydantic wraps a ``ValueError``
raised in a validator into a ``ValidationError`` that loses the field path.

A ``ValueError`` that is not an :class:`InputError` is a broken internal invariant (a bug), not bad input.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InputError", "InvalidValueError"]


class InputError(Exception):
    """Input kvpilot refuses, naming the field at fault.

    Attributes:
        field: where, in the user's own terms: a field path (``spec.engine.maxNumSeqs``,
            ``workload.requests[3].prompt_tokens``), a config.json key (``num_attention_heads``) or an
            option (``--arrival-rate``); ``""`` when nothing narrower than the whole input can be named
            (the message then says where, e.g. a YAML syntax error's line and column).
        message: one line saying what is wrong and, where possible, what to do instead.

    ``str(error)`` is ``"<field>: <message>"`` (the message alone when there is no field). Both parts
    quote input, so both are made one safe line (:func:`kvpilot.text.safe.one_line`: no line breaks, no
    terminal controls, secrets redacted).
    """

    def __init__(self, field: str, message: str) -> None:
        from kvpilot.text.safe import one_line  # here: only an error compiles the secret patterns

        self.field = one_line(field)
        self.message = one_line(message)
        super().__init__(f"{self.field}: {self.message}" if self.field else self.message)

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from (field, message), not from ``args`` (the joined line): pickle and copy keep both parts
        return (type(self), (self.field, self.message))


class InvalidValueError(InputError, ValueError):
    """A value kvpilot refuses (an :class:`InputError` that is also a ``ValueError``): an engine field, a
    workload or trace field, a vLLM flag, a command-line option.
    """

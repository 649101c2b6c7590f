"""The one error type for bad input: ``field: message`` on one safe line, and which kinds are ValueErrors."""

from __future__ import annotations

import copy
import pickle

import pytest

from kvpilot.api.errors import SpecError
from kvpilot.kv.spec import KVConfigError
from kvpilot.text.documents import DocumentError
from kvpilot.text.errors import InputError, InvalidValueError


@pytest.mark.parametrize("kind", [InputError, InvalidValueError, SpecError, KVConfigError, DocumentError])
def test_every_kind_is_an_input_error_printed_field_first(kind):
    error = kind("spec.engine.maxNumSeqs", "must be >= 1, got 0")
    assert isinstance(error, InputError)
    assert str(error) == "spec.engine.maxNumSeqs: must be >= 1, got 0"
    assert (error.field, error.message) == ("spec.engine.maxNumSeqs", "must be >= 1, got 0")


def test_only_spec_error_is_not_a_value_error():
    # pydantic would wrap a ValueError raised in a validator and lose the field path; the others stay
    # ValueErrors so that `except ValueError` around them keeps working
    assert not isinstance(SpecError("f", "m"), ValueError)
    for kind in (InvalidValueError, KVConfigError, DocumentError):
        assert isinstance(kind("f", "m"), ValueError)


def test_without_a_field_the_message_stands_alone():
    assert str(DocumentError("", "not valid YAML at line 2, column 1: found ':'")) == (
        "not valid YAML at line 2, column 1: found ':'"
    )


def test_field_and_message_are_one_safe_line():
    token = "hf_" + "A" * 30
    error = InvalidValueError("workload.\x1b[31mrate\x1b[0m", f"'x\ny' is not a number; HF_TOKEN={token}")
    assert str(error) == "workload.rate: 'x y' is not a number; HF_TOKEN=[REDACTED]"
    assert "\n" not in error.message
    assert token not in str(error)


def test_a_document_error_s_path_is_its_field():
    error = DocumentError("spec.ttlSeconds", "an integer of 101 digits (the bound is 100 digits)")
    assert error.path == error.field == "spec.ttlSeconds"


@pytest.mark.parametrize("kind", [InvalidValueError, SpecError, KVConfigError, DocumentError])
def test_pickle_and_copy_keep_both_parts(kind):
    error = kind("num_attention_heads", "missing from config.json")
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(clone) is kind
        assert (clone.field, clone.message, str(clone)) == (
            "num_attention_heads",
            "missing from config.json",
            "num_attention_heads: missing from config.json",
        )

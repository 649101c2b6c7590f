"""docs/crd-reference.md documents every spec and status field of the models."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from kvpilot.api import VLLMServerSpec, VLLMServerStatus

DOC = Path(__file__).resolve().parents[3] / "docs" / "crd-reference.md"


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """CamelCase paths of every field (nested models included), e.g. ``engine.maxNumSeqs``."""
    out = []
    for field in model.model_fields.values():
        path = f"{prefix}{field.alias}"
        out.append(path)
        for arg in getattr(field.annotation, "__args__", ()) + (field.annotation,):
            if (
                isinstance(arg, type)
                and issubclass(arg, BaseModel)
                and prefix == ""
                and model is VLLMServerSpec
                and arg.__name__ not in {"Toleration", "EnvVar"}
            ):
                out += field_paths(arg, f"{path}.")
    return out


def test_every_spec_field_is_documented():
    text = DOC.read_text()
    missing = [p for p in field_paths(VLLMServerSpec) if f"`{p}`" not in text]
    assert not missing, missing


def test_every_status_field_is_documented():
    text = DOC.read_text()
    missing = [f.alias for f in VLLMServerStatus.model_fields.values() if f"`{f.alias}`" not in text]
    assert not missing, missing

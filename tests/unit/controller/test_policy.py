"""The operator's allow-list of images and service accounts (kvpilot.controller.policy)."""

from __future__ import annotations

from kvpilot.api import parse_spec
from kvpilot.controller.policy import SpecPolicy, violation
from kvpilot.render import render_objects


def _pod(**spec) -> dict:
    return render_objects("qwen", "llm", parse_spec({"model": "Qwen/Qwen2.5-1.5B-Instruct", **spec}))[0]


def test_empty_lists_allow_anything():
    assert violation(SpecPolicy(), _pod(image="evil.example/miner:1", serviceAccountName="admin")) is None


def test_image_globs_match_the_whole_string():
    policy = SpecPolicy.from_options(["docker.io/vllm/vllm-openai:*, registry.example.com/vllm/*"])
    assert policy.allowed_images == ("docker.io/vllm/vllm-openai:*", "registry.example.com/vllm/*")
    assert violation(policy, _pod(image="docker.io/vllm/vllm-openai:v0.29.0")) is None
    assert violation(policy, _pod(image="registry.example.com/vllm/team/a:1")) is None  # * spans "/"
    refused = violation(policy, _pod(image="ghcr.io/vllm/vllm-openai:v0.29.0"))
    assert refused == (
        "spec.image: 'ghcr.io/vllm/vllm-openai:v0.29.0' is not among the images this operator allows "
        "(docker.io/vllm/vllm-openai:*, registry.example.com/vllm/*)"
    )
    assert violation(policy, _pod(image="docker.io/vllm/vllm-openai-evil:1")) is not None  # no prefix match


def test_images_match_as_the_runtime_resolves_them():
    # Docker's reference rules (distribution/reference normalize.go): "vllm/vllm-openai" is
    # docker.io/vllm/vllm-openai, "ubuntu" is docker.io/library/ubuntu, no tag means :latest.
    long_form = SpecPolicy.from_options(["docker.io/vllm/vllm-openai:*"])
    assert violation(long_form, _pod(image="vllm/vllm-openai:v0.29.0")) is None
    assert violation(long_form, _pod(image="index.docker.io/vllm/vllm-openai:v0.29.0")) is None
    assert violation(long_form, _pod(image="vllm/vllm-openai")) is None  # :latest
    short_form = SpecPolicy.from_options(["vllm/vllm-openai:*"])
    assert violation(short_form, _pod(image="docker.io/vllm/vllm-openai:v0.29.0")) is None
    library = SpecPolicy.from_options(["docker.io/library/ubuntu:*"])
    assert violation(library, _pod(image="ubuntu:24.04")) is None
    # a registry host is never taken for a Docker Hub user, and a glob in the first component is not normalised
    assert violation(short_form, _pod(image="vllm.example/vllm/vllm-openai:1")) is not None
    assert violation(short_form, _pod(image="localhost/vllm/vllm-openai:1")) is not None
    assert violation(SpecPolicy.from_options(["*/miner:*"]), _pod(image="ubuntu:1")) is not None
    pinned = SpecPolicy.from_options(["docker.io/vllm/vllm-openai:v0.29.0"])
    assert violation(pinned, _pod(image="vllm/vllm-openai:v0.30.0")) is not None


def test_the_default_image_is_checked_too():
    from kvpilot.api.models import DEFAULT_IMAGE

    refused = violation(SpecPolicy(allowed_images=("registry.example.com/*",)), _pod())
    assert refused is not None
    assert refused.startswith(f"spec.image: {DEFAULT_IMAGE!r}")


def test_service_accounts():
    policy = SpecPolicy.from_options(service_accounts=["vllm", "team-*"])
    assert violation(policy, _pod(serviceAccountName="vllm")) is None
    assert violation(policy, _pod(serviceAccountName="team-a")) is None
    assert violation(policy, _pod()) is None  # none named: the namespace's default, without a token
    assert violation(policy, _pod(serviceAccountName="cluster-admin-sa")) == (
        "spec.serviceAccountName: 'cluster-admin-sa' is not among the service accounts this operator allows "
        "(vllm, team-*)"
    )


def test_the_operators_help_example_admits_the_default_image():
    # an admin copying --help's example must not refuse every VLLMServer that leaves spec.image unset
    import re

    from click.testing import CliRunner

    from kvpilot.cli import cli

    help_text = CliRunner().invoke(cli, ["operator", "--help"]).output
    (example,) = re.findall(r"--allowed-image '([^']+)'", help_text)  # the example's value (the option says GLOB)
    assert violation(SpecPolicy.from_options([example]), _pod()) is None

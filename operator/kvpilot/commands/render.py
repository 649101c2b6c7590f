"""`kvpilot render FILE`: the Pod and Service a VLLMServer becomes, offline, as a ``v1`` ``List``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from kvpilot.commands._common import fail, fail_input, read_input

if TYPE_CHECKING:
    from kvpilot.api.objects import Pod, Service

_EPILOG = """\b
Examples:
  kvpilot render manifests/examples/experiment.yaml
  kvpilot render manifests/examples/fp8-long-context.yaml -o json
  kvpilot render server.yaml --namespace llm \\
      | kubectl apply --dry-run=server -f -
  cat server.yaml | kvpilot render -

FILE holds one or more VLLMServer documents (apiVersion kvpilot.dev/v1alpha1); "-" reads stdin.
The output is a preview of what the operator creates: the same Pod (named
<name>-<first 5 hex of the spec hash>) and Service, but without owner references (there is no
live VLLMServer to own them). Applying it by hand bypasses the operator: nothing then watches
the pod, writes status, or deletes it with a VLLMServer; create the VLLMServer instead. Bad
input exits with code 2 and a one-line reason naming the field.
"""


def _documents(path: str, text: str) -> list[object]:
    # here, not at import: ``kvpilot render --help`` needs no YAML
    from kvpilot.text.documents import DocumentError, load_yaml_documents

    try:
        docs = load_yaml_documents(text)  # bounded: depth, integer digits, alias expansion
    except DocumentError as exc:
        fail_input(exc, path)
    if not docs:
        fail(f"{path}: no VLLMServer in the file (it is empty)")
    return docs


@click.command(name="render", epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("file", metavar="FILE")
@click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True, help="Output format."
)
@click.option(
    "-n",
    "--namespace",
    default=None,
    help="Namespace of the objects. Default: the VLLMServer's metadata.namespace, else 'default'.",
)
def command(file: str, output: str, namespace: str | None) -> None:
    """Preview, offline, the Pod and Service the operator makes of a VLLMServer (a v1 List)."""
    from kvpilot.api import SpecError, parse_resource
    from kvpilot.render import render_objects
    from kvpilot.text.documents import MAX_YAML_BYTES

    docs = _documents(file, read_input(file, MAX_YAML_BYTES))
    items: list[Pod | Service] = []
    for index, doc in enumerate(docs, start=1):
        where = file if len(docs) == 1 else f"{file} (document {index})"
        try:
            name, meta_namespace, spec = parse_resource(doc)
            items += render_objects(name, namespace or meta_namespace or "default", spec)
        except SpecError as exc:
            fail_input(exc, where)
    result = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}
    if output == "json":
        click.echo(json.dumps(result, indent=2))
    else:
        import yaml

        click.echo(yaml.safe_dump(result, sort_keys=False, width=120), nl=False)

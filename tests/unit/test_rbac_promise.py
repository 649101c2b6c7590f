"""The operator's ClusterRole grants what the README promises: `delete` on pods only (a spec change replaces the
pod, since a pod's spec cannot change), and never on Services, VLLMServers or anything else.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _granted(verb: str) -> set[tuple[str, str]]:
    role = yaml.safe_load((REPO / "manifests" / "operator" / "20-clusterrole.yaml").read_text())
    return {
        (group, resource)
        for rule in role["rules"]
        if verb in rule["verbs"] or "*" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_the_operator_may_delete_pods_and_nothing_else():
    assert _granted("delete") == {("", "pods")}
    assert _granted("deletecollection") == set()


def test_the_readme_and_the_crd_reference_say_why_it_deletes_pods():
    for doc in ("README.md", "docs/crd-reference.md"):
        text = " ".join((REPO / doc).read_text().split())
        assert "deletes a pod only to replace it" in text, doc
        assert "hence `delete` on pods in its ClusterRole" in text, doc
        assert "deleting objects stays" not in text, doc  # the old, unqualified promise


def test_the_readme_says_first_what_a_vllmserver_is_for():
    text = " ".join((REPO / "README.md").read_text().split())
    purpose = text.index("What the operator is for.")
    assert purpose < text.index("make demo")
    for words in ("flag tuning", "reproductions", "load tests", "long-running serving", "Deployment"):
        assert words in text[: text.index("make demo")], words
    reference = " ".join((REPO / "docs" / "crd-reference.md").read_text().split())
    assert reference.index("What a `VLLMServer` is for: bounded experiments") < reference.index("## spec")
    assert "long-running serving" in reference[: reference.index("```")]

"""Object-name rules of kube-apiserver, per kind, with its messages.

Most kinds (and every custom resource) take DNS-1123 subdomains; namespaces take DNS-1123 labels;
Services take DNS-1035 labels (their name becomes a DNS label); RBAC objects take any path
segment (``system:controller:x``). A name can get both the length and the character-set message,
one cause each, as ``apimachinery/pkg/util/validation`` returns them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from neuronfleet.api.v1alpha1 import (
    DNS1123_LABEL_FORMAT,
    DNS1123_LABEL_MAX_LENGTH,
    DNS1123_SUBDOMAIN_FORMAT,
    DNS1123_SUBDOMAIN_MAX_LENGTH,
)
from neuronfleet.api.validation import go_value

_DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{DNS1123_SUBDOMAIN_FORMAT}')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    f"'{DNS1123_LABEL_FORMAT}')"
)
DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    f"validation is '{_DNS1035}')"
)

NameRule = Callable[[str], list[str]]


def max_length(limit: int) -> str:
    """apimachinery's MaxLenError: what a name (or part of one) longer than ``limit`` is told."""
    return f"must be no more than {limit} characters"


def _pattern_rule(pattern: str, limit: int, message: str) -> NameRule:
    compiled = re.compile(f"^{pattern}$")

    def check(name: str) -> list[str]:
        problems = [max_length(limit)] if len(name) > limit else []
        if not compiled.match(name):
            problems.append(message)
        return problems

    return check


dns1123_subdomain = _pattern_rule(DNS1123_SUBDOMAIN_FORMAT, DNS1123_SUBDOMAIN_MAX_LENGTH, SUBDOMAIN_MESSAGE)
dns1123_label = _pattern_rule(DNS1123_LABEL_FORMAT, DNS1123_LABEL_MAX_LENGTH, LABEL_MESSAGE)
dns1035_label = _pattern_rule(_DNS1035, DNS1123_LABEL_MAX_LENGTH, DNS1035_MESSAGE)


def path_segment(name: str) -> list[str]:
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]


_RULES: dict[tuple[str, str], NameRule] = {
    ("", "namespaces"): dns1123_label,
    ("", "services"): dns1035_label,
    **{
        ("rbac.authorization.k8s.io", plural): path_segment
        for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
    },
}


def name_problems(resource: tuple[str, str], name: object) -> list[tuple[str, str]]:
    """(field, message) causes for ``name`` as the name of a ``resource`` (group, plural) object."""
    if not isinstance(name, str):
        return [("metadata.name", f"Invalid value: {go_value(name)}: must be a string")]
    rule = _RULES.get(resource, dns1123_subdomain)
    return [("metadata.name", f"Invalid value: {go_value(name)}: {problem}") for problem in rule(name)]

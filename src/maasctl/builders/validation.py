"""Checks on values that end up in object names, references, paths and headers.

Values that are only interpolated into CEL are escaped (policy.cel.cel_string) and need no check here; values
that become Kubernetes names, hostnames, paths or header values must be valid, because no escaping makes an
invalid name valid. Builders raise `InvalidInputError` for them: the gatherer should have dropped such inputs,
so reaching a builder with one is a bug worth failing loudly on.

`check_destination` applies `contract.destinations.destination_problem`, the rule for where the data plane may be
sent (an ExternalModel's host), which the console shares for the provider listing it fetches.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

from maasctl.contract.destinations import destination_problem

__all__ = [
    "InvalidInputError",
    "check_destination",
    "check_dns_label",
    "check_dns_subdomain",
    "check_hostname",
    "check_path",
    "destination_problem",
    "is_dns_label",
    "is_dns_subdomain",
    "is_hostname",
]

_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE: Final = re.compile(_LABEL)
_DNS_SUBDOMAIN_RE: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_PATH_FORBIDDEN: Final = ("//", "/./", "/../", "%2f", "%2F", "#")


class InvalidInputError(ValueError):
    """A builder input cannot be rendered into a valid object."""


def is_dns_label(value: str) -> bool:
    """RFC 1123 label: 1-63 lowercase alphanumerics or '-', alphanumeric at both ends."""
    return len(value) <= 63 and _DNS_LABEL_RE.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """RFC 1123 subdomain (most Kubernetes object names): at most 253 characters."""
    return len(value) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def is_hostname(value: str) -> bool:
    """A precise DNS hostname (Gateway API `PreciseHostname`): a subdomain with labels of at most 63."""
    return is_dns_subdomain(value) and all(len(part) <= 63 for part in value.split("."))


def check_dns_label(value: str, what: str) -> str:
    if not is_dns_label(value):
        raise InvalidInputError(f"{what} {value!r} is not a valid DNS label")
    return value


def check_dns_subdomain(value: str, what: str) -> str:
    if not is_dns_subdomain(value):
        raise InvalidInputError(f"{what} {value!r} is not a valid Kubernetes name")
    return value


def check_hostname(value: str, what: str) -> str:
    if not is_hostname(value):
        raise InvalidInputError(f"{what} {value!r} is not a valid hostname")
    return value


def check_path(value: str, what: str) -> str:
    """A Gateway API Exact/PathPrefix path: starts with '/', none of the sequences the CRD's CEL rejects."""
    if (
        not value.startswith("/")
        or len(value) > 1024
        or any(bad in value for bad in _PATH_FORBIDDEN)
        or value.endswith(("/.", "/.."))
        or any(ord(c) < 0x21 or ord(c) > 0x7E for c in value)
    ):
        raise InvalidInputError(f"{what} {value!r} is not a valid HTTP path")
    return value


def check_destination(host: str, namespace: str | None, what: str, shared: Collection[str] = ()) -> str:
    """`host` if the data plane may be sent there (`destination_problem`), else InvalidInputError."""
    problem = destination_problem(host, namespace, shared)
    if problem is not None:
        raise InvalidInputError(f"{what} {host[:300]!r} {problem}")
    return host

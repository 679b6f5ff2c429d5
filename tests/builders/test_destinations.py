"""Where the data plane may be sent (`validation.destination_problem`): the gateway's network position must not
be lent to whoever writes an ExternalModel — no link-local (cloud metadata), no address spelt so that the other
rules miss it, no API server, no Service of another namespace. Loopback and private addresses stay usable."""

from __future__ import annotations

import pytest

from maasctl.builders.validation import InvalidInputError, check_destination, destination_problem

NS = "team-a"

LINK_LOCAL = [
    "169.254.169.254", "169.254.0.1", "169.254.255.255", "[169.254.169.254]", "169.254.169.254.",
    "169.254.169.254..", " 169.254.169.254 ",
    "fe80::1", "[fe80::1]", "FE80::A:B", "fe80::1%eth0", "febf:ffff::1",
    "::ffff:169.254.169.254", "[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe", "::FFFF:A9FE:A9FE",
    "64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe", "::169.254.169.254",
    "fd00:ec2::254", "metadata.google.internal", "METADATA.GOOGLE.INTERNAL.",
]
NON_CANONICAL_NUMBERS = [
    "2130706433", "2852039166", "0x7f000001", "0X7F000001", "0xa9fea9fe", "0177.0.0.1", "0177.0000.0000.0001",
    "127.1", "127.0.1", "169.254.43518", "0x7f.0.0.1", "0x7f.1", "010.0.0.1", "1.2.3.4.5", "256.1.1.1",
    "2130706433.", "[2130706433]", "1.2.3.0x4", "example.0x1", "foo.123",
]
API_SERVER = [
    "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
    "Kubernetes.Default.Svc", "kubernetes.default.svc.", "kubernetes.default.svc.cluster.local.",
    "kubernetes.default.svc.my-cluster.example",
]
OTHER_NAMESPACE = [
    "granite-kserve-workload-svc.llm-team-b.svc.cluster.local", "granite.llm-team-b.svc",
    "maas-api.opendatahub.svc", "maas-api.opendatahub.svc.cluster.local", "MAAS-API.OPENDATAHUB.SVC",
    "maas-api.opendatahub.svc.cluster.local.", "maas-api.opendatahub.svc.k8s.corp.example",
    "pod-0.headless.llm-team-b.svc.cluster.local", "x.team-a-2.svc", "team-a.svc", "svc.team-a.svc.x.svc",
    "1-2-3-4.team-a.pod.cluster.local", "169-254-169-254.default.pod.cluster.local", "a.pod",
]
ALLOWED = [
    "api.openai.com", "API.OpenAI.com", "api.openai.com.", "generativelanguage.googleapis.com", "x.ai",
    "localhost", "127.0.0.1", "[::1]", "::1", "10.0.0.1", "172.16.5.4", "192.168.1.20", "100.64.0.1",
    "fd12:3456::1", "8.8.8.8", "v1.example", "svc.example.com", "my-svc.example.com", "1password.com",
    "granite.team-a.svc", "granite.team-a.svc.cluster.local", "pod-0.headless.team-a.svc.cluster.local",
    "Granite.Team-A.Svc.Cluster.Local.", "kubernetes.team-a.svc", "kubernetes-api.example.com",
]


@pytest.mark.parametrize("host", LINK_LOCAL)
def test_link_local_and_metadata_addresses_are_refused(host: str) -> None:
    assert destination_problem(host, NS) is not None
    assert destination_problem(host) is not None


@pytest.mark.parametrize("host", NON_CANONICAL_NUMBERS)
def test_numeric_hosts_other_than_a_canonical_dotted_quad_are_refused(host: str) -> None:
    problem = destination_problem(host, NS)
    assert problem is not None and "numeric" in problem


@pytest.mark.parametrize("host", API_SERVER)
def test_the_api_server_names_are_refused_whatever_the_namespace(host: str) -> None:
    for namespace in (NS, "default", None):
        assert destination_problem(host, namespace) is not None


@pytest.mark.parametrize("host", OTHER_NAMESPACE)
def test_in_cluster_names_of_another_namespace_are_refused(host: str) -> None:
    assert destination_problem(host, NS) is not None


@pytest.mark.parametrize("host", ALLOWED)
def test_ordinary_loopback_private_and_own_namespace_hosts_are_accepted(host: str) -> None:
    assert destination_problem(host, NS) is None
    assert check_destination(host, NS, "provider host") == host


def test_namespace_rule_needs_the_namespace() -> None:
    """Without a namespace only the namespace-independent rules apply (a Service's namespace cannot be judged)."""
    assert destination_problem("granite.llm-team-b.svc.cluster.local") is None
    assert destination_problem("granite.llm-team-b.svc.cluster.local", "llm-team-b") is None
    assert destination_problem("x.svc") is not None  # no Service name, whatever the namespace


def test_refusal_names_the_field_and_the_reason() -> None:
    with pytest.raises(InvalidInputError, match=r"provider host '169\.254\.169\.254' is a link-local address"):
        check_destination("169.254.169.254", NS, "provider host")
    with pytest.raises(InvalidInputError, match="namespace 'llm-team-b'"):
        check_destination("g.llm-team-b.svc.cluster.local", NS, "provider host")


@pytest.mark.parametrize("host", ["e2e-provider.maas-e2e-models.svc", "e2e-provider.maas-e2e-models.svc.cluster.local",
                                  "E2E-Provider.MAAS-E2E-MODELS.SVC.cluster.local."])
def test_a_namespace_the_operator_shares_may_be_named_by_any_external_model(host: str) -> None:
    """`--provider-service-namespace`: a shared model-provider namespace; every other rule still holds."""
    assert destination_problem(host, NS) is not None
    assert destination_problem(host, NS, shared=("maas-e2e-models",)) is None
    assert destination_problem("x.other.svc", NS, shared=("maas-e2e-models",)) is not None
    assert destination_problem("169.254.169.254", NS, shared=("maas-e2e-models",)) is not None
    assert destination_problem("kubernetes.default.svc", NS, shared=("default",)) is not None


def test_the_shared_namespaces_come_from_flags_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from maasctl.cli import build_parser, settings_from_args

    flags = build_parser().parse_args(["run", "--provider-service-namespace", "models",
                                       "--provider-service-namespace", "more"])
    assert settings_from_args(flags).provider_service_namespaces == ("models", "more")
    monkeypatch.setenv("MAASCTL_PROVIDER_SERVICE_NAMESPACES", "a, b,")
    assert settings_from_args(build_parser().parse_args(["run"])).provider_service_namespaces == ("a", "b")
    monkeypatch.delenv("MAASCTL_PROVIDER_SERVICE_NAMESPACES")
    assert settings_from_args(build_parser().parse_args(["run"])).provider_service_namespaces == ()


def test_the_provider_relay_defaults_to_the_processor_service() -> None:
    from maasctl.cli import build_parser, settings_from_args

    default = settings_from_args(build_parser().parse_args(["run"]))
    assert default.provider_relay_address == ("maas-payload-processor.opendatahub.svc.cluster.local", 9005)
    moved = settings_from_args(build_parser().parse_args(["run", "--payload-processor-service", "maas/proc"]))
    assert moved.provider_relay_address == ("proc.maas.svc.cluster.local", 9005)
    local = settings_from_args(build_parser().parse_args(["run", "--provider-relay", "127.0.0.1:19005"]))
    assert local.provider_relay_address == ("127.0.0.1", 19005)
    for bad in ("127.0.0.1", ":9005", "host:port", "host:70000"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["run", "--provider-relay", bad])

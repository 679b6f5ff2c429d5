"""A 429 names the limit that refused: the names both writers produce are described as what they are."""

from __future__ import annotations

import pytest

from maasctl.builders.refs import ObjectRef
from maasctl.builders.trlp import limit_name
from maasctl.contract.limits import describe_limit, plan_limit_name


@pytest.mark.parametrize(("name", "says"), [
    pytest.param(limit_name(ObjectRef("maas", "free"), ObjectRef("llm", "granite")), "subscription limit maas-free",
                 id="subscription-window"),
    pytest.param(plan_limit_name("gw-ns", "basic", "requests"), "the requests limit of billing Plan gw-ns/basic",
                 id="plan-requests"),
    pytest.param(plan_limit_name("gw-ns", "basic", "tokens"), "the tokens limit of billing Plan gw-ns/basic",
                 id="plan-tokens"),
    pytest.param(plan_limit_name("gw-ns", "basic", "allowance/ten-acme/20261203"),
                 "the prepaid allowance of tenant ten-acme (billing Plan gw-ns/basic)", id="wallet-allowance"),
    pytest.param(plan_limit_name("gw-ns", "basic", "budget/q4"), "budget q4 throttles this tenant", id="budget"),
    pytest.param("billing/odd", "limit billing/odd", id="unknown-billing-shape"),
])
def test_each_limit_is_named_as_what_it_is(name: str, says: str) -> None:
    assert says in describe_limit(name)


def test_the_plan_compiler_names_its_limits_the_way_the_describer_reads_them() -> None:
    from tests.billing.test_gateway_composition import plan_objects

    limits = plan_objects(requestsPerMinute=2)["RateLimitPolicy"]["spec"]["overrides"]["limits"]
    assert [describe_limit(n) for n in limits] == ["the requests limit of billing Plan maas-gateway/basic"]

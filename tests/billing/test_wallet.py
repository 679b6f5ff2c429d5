"""The wallet state machine: every edge between the eight states, for each billing mode, and the helpers."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.billing.api.tenant import BillingMode, TenantState
from maasctl.billing.rules.wallet import (
    DUNNING_LIMIT,
    MALFORMED_EPOCH,
    MAX_CAP,
    Facts,
    Policy,
    allowance_tokens,
    caps_in_force,
    decide,
    denial_message,
    epoch_allowance,
    epoch_name,
    epoch_starts,
    published_cap,
    runway_days,
    runway_series,
)

S = TenantState
PREPAID = Policy(BillingMode.PREPAID, grace_amount=Decimal("5"), warning_threshold=Decimal("10"))
NO_GRACE = Policy(BillingMode.PREPAID)
INVOICED = Policy(BillingMode.INVOICED, warning_threshold=Decimal("10"))
SHOWBACK = Policy(BillingMode.SHOWBACK_ONLY, warning_threshold=Decimal("10"))
ALL = [*list(S), None]


def d(balance: str | None, **kw: object) -> Facts:
    return Facts(balance=None if balance is None else Decimal(balance), **kw)  # type: ignore[arg-type]


# (from, policy, facts, to): every edge the seed's rules allow, from each state a rule can leave.
EDGES = [
    (None, PREPAID, d(None), S.PENDING),
    (S.PENDING, PREPAID, d("0", has_entries=False), S.PENDING),
    (S.PENDING, PREPAID, d("100"), S.ACTIVE),
    (S.PENDING, PREPAID, d("10"), S.WARNING),
    (S.PENDING, PREPAID, d("-1"), S.GRACE),
    (S.PENDING, PREPAID, d("-5.000001"), S.FROZEN),
    (S.ACTIVE, PREPAID, d("10.000000"), S.WARNING),
    (S.ACTIVE, PREPAID, d("-0.000001"), S.GRACE),
    (S.ACTIVE, PREPAID, d("-6"), S.FROZEN),
    (S.ACTIVE, NO_GRACE, d("0"), S.ACTIVE),  # zero is not crossed yet
    (S.ACTIVE, NO_GRACE, d("-0.000001"), S.FROZEN),  # the request that crossed zero completed; frozen now
    (S.WARNING, PREPAID, d("10.000001"), S.ACTIVE),
    (S.WARNING, PREPAID, d("-5"), S.GRACE),
    (S.WARNING, PREPAID, d("-5.1"), S.FROZEN),
    (S.GRACE, PREPAID, d("-5.000001"), S.FROZEN),
    (S.GRACE, PREPAID, d("50"), S.ACTIVE),
    (S.GRACE, PREPAID, d("1"), S.WARNING),
    (S.FROZEN, PREPAID, d("100"), S.ACTIVE),  # credit added: unfrozen at once
    (S.FROZEN, PREPAID, d("5"), S.WARNING),
    (S.FROZEN, PREPAID, d("-4"), S.GRACE),
    (S.ACTIVE, PREPAID, d("100", payment_failures=1), S.DUNNING),
    (S.WARNING, PREPAID, d("5", payment_failures=2), S.DUNNING),
    (S.DUNNING, PREPAID, d("100", payment_failures=DUNNING_LIMIT), S.FROZEN),
    (S.DUNNING, PREPAID, d("-6", payment_failures=1), S.FROZEN),  # balance decides first
    (S.DUNNING, PREPAID, d("100", payment_failures=0), S.ACTIVE),  # a payment succeeded
    (S.FROZEN, PREPAID, d("100", payment_failures=0), S.ACTIVE),
    (S.ACTIVE, INVOICED, d("-1000"), S.ACTIVE),  # accrues, never enforced by balance
    (S.ACTIVE, INVOICED, d("-1000", payment_failures=1), S.DUNNING),
    (S.DUNNING, INVOICED, d("-1000", payment_failures=DUNNING_LIMIT), S.FROZEN),
    (S.FROZEN, INVOICED, d("0", payment_failures=0), S.ACTIVE),
    (S.PENDING, SHOWBACK, d("-99999"), S.ACTIVE),
    (S.ACTIVE, SHOWBACK, d("-5", payment_failures=5), S.ACTIVE),  # showback is never enforced
    (S.ACTIVE, PREPAID, d("100", suspended="fraud review"), S.SUSPENDED),
    (S.FROZEN, PREPAID, d("-100", suspended="fraud review"), S.SUSPENDED),
    (S.ACTIVE, SHOWBACK, d("0", suspended="terms"), S.SUSPENDED),
    (S.SUSPENDED, PREPAID, d("100"), S.ACTIVE),  # suspension lifted
    (S.SUSPENDED, PREPAID, d("-100"), S.FROZEN),
    (S.ACTIVE, PREPAID, d("100", closed="customer left"), S.CLOSED),
    (S.SUSPENDED, PREPAID, d("100", suspended="x", closed="done"), S.CLOSED),
    (S.CLOSED, PREPAID, d("100"), S.CLOSED),  # final
    (S.CLOSED, INVOICED, d(None), S.CLOSED),
]


@pytest.mark.parametrize(("previous", "policy", "facts", "expected"), EDGES)
def test_edge(previous: TenantState | None, policy: Policy, facts: Facts, expected: TenantState) -> None:
    decision = decide(previous, policy, facts)
    assert decision.state == expected, decision
    assert decision.message and decision.reason
    assert decision.enforced == (expected in (S.FROZEN, S.SUSPENDED, S.CLOSED))


def test_every_state_is_reached_and_left() -> None:
    reached = {to for _, _, _, to in EDGES}
    left = {frm for frm, _, _, to in EDGES if frm != to}
    assert reached == set(S)
    assert left >= set(S) - {S.CLOSED}


@given(st.sampled_from(ALL), st.sampled_from([PREPAID, NO_GRACE, INVOICED, SHOWBACK]),
       st.decimals(min_value=-1000, max_value=1000, places=6), st.integers(0, 5), st.booleans())
def test_property_only_prepaid_balance_or_payments_enforce(previous: TenantState | None, policy: Policy,
                                                           balance: Decimal, failures: int, funded: bool) -> None:
    decision = decide(previous, policy, Facts(balance, has_entries=funded, payment_failures=failures))
    if previous == S.CLOSED:
        assert decision.state == S.CLOSED
    elif decision.enforced:
        assert policy.mode != BillingMode.SHOWBACK_ONLY
        assert failures >= DUNNING_LIMIT or (policy.mode == BillingMode.PREPAID and balance < -policy.grace_amount)
    else:
        assert policy.mode != BillingMode.PREPAID or balance >= -policy.grace_amount or not funded


def test_denial_message_names_the_tenant_why_and_how_to_fix() -> None:
    msg = denial_message("ten-helix", "helix", S.FROZEN)
    assert "ten-helix" in msg and "helix" in msg and "Frozen" in msg and "credit" in msg
    assert "Suspended" in denial_message("t", "o", S.SUSPENDED)
    assert "Closed" in denial_message("t", "o", S.CLOSED)


def test_allowance_and_runway() -> None:
    per_token = Decimal("0.00001")  # 10 per million
    assert allowance_tokens(PREPAID, Decimal("1"), per_token) == Decimal(600000)  # (1 + 5 grace) / price
    assert allowance_tokens(PREPAID, Decimal("-7"), per_token) == 0
    assert allowance_tokens(INVOICED, Decimal("1"), per_token) is None
    assert allowance_tokens(PREPAID, Decimal("1"), None) is None
    assert runway_days(Decimal("70"), Decimal("70"), 7) == Decimal("7.0")
    assert runway_days(Decimal("70"), Decimal(0), 7) is None
    assert runway_days(Decimal("-1"), Decimal("5"), 7) == 0


def test_the_runway_at_the_end_of_each_day_uses_the_spend_of_the_days_before_it() -> None:
    d = Decimal
    # 3 days of balances; 2-day window: the spend series starts one day before the first balance.
    spend = [d("4"), d("0"), d("2"), d("0")]
    assert runway_series([d("8"), d("6"), d("0")], spend, 2) == [d("4.0"), d("6.0"), d(0)]
    assert runway_series([d("8")], [d("0"), d("0")], 2) == [None]  # no spend: no runway
    try:
        runway_series([d("8")], spend, 2)
    except ValueError as exc:
        assert "need 2 days" in str(exc)
    else:
        raise AssertionError("a spend series of the wrong length is refused")


def test_the_caps_in_force_are_read_as_written() -> None:
    assert caps_in_force(None) == ()
    assert caps_in_force([]) == ()
    written = [{"epoch": "2026-12-02", "tokens": 50}, {"epoch": "2026-12-01", "tokens": 0}]
    assert caps_in_force(written) == (("2026-12-01", 0), ("2026-12-02", 50))
    assert caps_in_force([{"epoch": "2026-12-02", "tokens": MAX_CAP}]) == (("2026-12-02", MAX_CAP),)


ODD_TOKENS = [-1, True, False, 12.5, 1e30, "50", None, [50], {"n": 50}]


@pytest.mark.parametrize("tokens", ODD_TOKENS, ids=repr)
def test_a_cap_admission_should_have_refused_is_zero_never_no_cap(tokens: object) -> None:
    assert caps_in_force([{"epoch": "2026-12-02", "tokens": tokens}]) == (("2026-12-02", 0),)
    assert caps_in_force([{"epoch": "2026-12-02"}]) == (("2026-12-02", 0),)


FULLWIDTH_YEAR = "\uff12\uff10\uff12\uff16-12-02"  # digits, but not ASCII ones


@pytest.mark.parametrize("epoch", ["2026-12-2", "today", "2026-12-02\n", " 2026-12-02", FULLWIDTH_YEAR, "", None,
                                   20261202, "2026-12-02/../x"], ids=repr)
def test_an_unreadable_epoch_is_a_zero_cap_of_its_own(epoch: object) -> None:
    caps = caps_in_force([{"epoch": epoch, "tokens": 500}, {"epoch": "2026-12-02", "tokens": 50}])
    assert caps == ((MALFORMED_EPOCH, 0), ("2026-12-02", 50))


@pytest.mark.parametrize("raw", ["2026-12-02", 50, {"epoch": "2026-12-02", "tokens": 50}, [None], ["x"], [[1, 2]]],
                         ids=repr)
def test_a_list_that_is_not_a_list_of_caps_refuses(raw: object) -> None:
    caps = dict(caps_in_force(raw))
    assert caps and max(caps.values()) <= 50 and (caps.get(MALFORMED_EPOCH) == 0 or caps == {"2026-12-02": 50})


def test_an_epoch_named_twice_keeps_its_lower_cap_in_any_order() -> None:
    low, high = {"epoch": "2026-12-02", "tokens": 50}, {"epoch": "2026-12-02", "tokens": 5000}
    assert caps_in_force([low, high]) == caps_in_force([high, low]) == (("2026-12-02", 50),)


def test_epochs_are_utc_days_and_a_cap_adds_what_was_rated_to_what_the_wallet_pays() -> None:
    current, previous = epoch_starts(datetime(2026, 12, 2, 0, 31, tzinfo=UTC))
    assert (epoch_name(current), epoch_name(previous)) == ("2026-12-02", "2026-12-01")
    assert epoch_starts(datetime(2026, 12, 1, 23, 59, 59, tzinfo=UTC))[0] == previous
    price = Decimal("0.02")  # a high-priced SKU: 20,000 per million tokens
    assert epoch_allowance(NO_GRACE, Decimal("1"), 0, price) == 50
    assert epoch_allowance(PREPAID, Decimal("1"), 0, price) == 300  # (1 + 5 grace) / 0.02
    # Rating moves tokens from the wallet's room to the rated count: the cap does not move.
    assert epoch_allowance(NO_GRACE, Decimal("0.4"), 30, price) == 50
    # Past the grace the cap falls below what was rated (refused until the freeze arrives), never below 0.
    assert epoch_allowance(NO_GRACE, Decimal("-0.2"), 60, price) == 50
    assert epoch_allowance(NO_GRACE, Decimal("-0.01"), 0, price) == 0
    assert epoch_allowance(NO_GRACE, Decimal("-5"), 10, price) == 0
    assert epoch_allowance(INVOICED, Decimal("1"), 0, price) is None
    assert epoch_allowance(NO_GRACE, Decimal("1"), 0, None) is None
    assert epoch_allowance(NO_GRACE, Decimal("10") ** 20, 0, Decimal("0.000001")) == 2**63 - 1


@given(
    balance=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("20"), places=2),
    grace=st.decimals(min_value=Decimal(0), max_value=Decimal("5"), places=2),
    top=st.sampled_from([Decimal("0.02"), Decimal("0.00001"), Decimal("1.5")]),
    steps=st.lists(st.tuples(st.integers(1, 4096), st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=300),
)
def test_whatever_the_rater_lag_and_the_price_the_overspend_is_one_request(
        balance: Decimal, grace: Decimal, top: Decimal, steps: list[tuple[int, int, int]]) -> None:
    """The gateway admits a request while its counter is within the cap (the request that crosses completes);
    the rater rates any prefix of what was served, at any price up to the highest, and the cap is published
    again from the ledger. The wallet never pays more than its balance plus grace plus one request."""
    policy = Policy(BillingMode.PREPAID, grace_amount=grace)
    served: list[tuple[int, Decimal]] = []  # (tokens, price) of each request served, in order
    rated = 0  # requests the rater has charged so far
    counter = 0
    for tokens, divisor, catch_up in steps:
        price = top / divisor
        rated = min(len(served), rated + catch_up)  # the rater lags by any amount, and catches up
        charged = sum((t * p for t, p in served[:rated]), Decimal(0))
        cap = epoch_allowance(policy, balance - charged, sum(t for t, _ in served[:rated]), top)
        assert cap is not None
        if counter <= cap:
            served.append((tokens, price))
            counter += tokens
    spent = sum((t * p for t, p in served), Decimal(0))
    assert spent <= balance + grace + 4096 * top


def test_a_cap_is_lowered_at_once_and_raised_only_by_a_real_step_never_stranding_a_tenant() -> None:
    assert published_cap(None, 500, 0) == 500
    assert published_cap(500, 480, 100) == 480  # lower: at once
    assert published_cap(500, 520, 100) == 500  # +20 while 400 are left above what was rated: kept
    assert published_cap(500, 700, 100) == 700  # +200, half of what is left: published
    assert published_cap(500, 501, 500) == 501  # everything in force was rated: any raise is published
    assert published_cap(500, 501, 520) == 501


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 4)), min_size=1, max_size=200))
def test_on_cheap_usage_the_published_cap_moves_about_log2_times_and_admits_what_the_wallet_pays(
        calls: list[tuple[int, int]]) -> None:
    """A caught-up rater, usage at a quarter to all of the highest price: the published cap follows the exact
    one at most a few times per halving of the room, and a tenant refused by it always has a higher cap coming."""
    top, balance, rated, counter = Decimal("0.01"), Decimal("10"), 0, 0
    published: int | None = None
    changes = 0
    for tokens, divisor in calls:
        exact = epoch_allowance(NO_GRACE, balance, rated, top)
        assert exact is not None
        new = published_cap(published, exact, rated)
        changes += new != published
        published = new
        assert published <= exact  # never more than the wallet pays
        if counter > published:  # refused: only because the rater has not caught up, or the wallet is spent
            assert exact < counter or rated < counter
            continue
        counter += tokens
        rated += tokens
        balance -= tokens * top / divisor
    assert changes <= 64

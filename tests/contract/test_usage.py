"""The usage record (the wire type the gateway, maas-api and billing share): validated where it is made."""

from __future__ import annotations

import pytest

from maasctl.contract.usage import UsageRecord


def test_the_record_is_validated_where_it_is_made() -> None:
    record = UsageRecord(timestamp=1.0, request_id="r1", status=200, labels={"tier": "gold"}, estimated=True)
    assert UsageRecord.model_validate(record.to_json()) == record
    with pytest.raises(ValueError):
        UsageRecord(timestamp=1.0, request_id="bad id", status=200)

"""The Active / Degraded / Pending / Failed rule."""

from __future__ import annotations

import pytest

from maasctl.contract.health import ModelHealth, phase_of

OK = ModelHealth("llm/a", True)
BROKEN = ModelHealth("llm/b", False, "not found")
ROUTING = ModelHealth("llm/c", False, "route not generated yet", pending=True)


@pytest.mark.parametrize(
    ("models", "phase"),
    [
        ([OK], "Active"),
        ([OK, BROKEN], "Degraded"),
        ([OK, ROUTING], "Degraded"),
        ([ROUTING], "Pending"),
        ([ROUTING, ROUTING], "Pending"),
        ([ROUTING, BROKEN], "Failed"),
        ([BROKEN], "Failed"),
        ([], "Failed"),
    ],
)
def test_phase(models: list[ModelHealth], phase: str) -> None:
    got, reason, message = phase_of(models)
    assert got == phase and reason and message
    for m in models:
        if not m.ok:
            assert m.model in message

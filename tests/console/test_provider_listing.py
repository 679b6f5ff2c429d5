"""The provider listing's pure parts: what a provider's answer yields, and the names kept on the Secret."""

from __future__ import annotations

import json

import pytest

from maasctl.console import catalog, providers


@pytest.mark.parametrize(("body", "names"), [
    pytest.param({"data": [{"id": "b"}, {"id": "a"}, {"id": "a"}]}, ("a", "b"), id="sorted-unique"),
    pytest.param({"data": [{"id": 'x"y'}, {"id": "ok"}, {"id": " lead"}, {"id": "a\nb"}, {"id": 7}]}, ("ok",),
                 id="unsafe-names-dropped"),
    pytest.param({"data": "nope"}, (), id="data-not-a-list"),
    pytest.param([{"id": "a"}], (), id="not-an-object"),
    pytest.param({"data": [{"id": f"m{i:04d}"} for i in range(500)]}, tuple(f"m{i:04d}" for i in range(200)),
                 id="bounded"),
])
def test_the_listing_keeps_only_names_the_console_can_offer(body: object, names: tuple[str, ...]) -> None:
    assert providers._names(json.dumps(body).encode()) == names


def test_not_json_is_no_names() -> None:
    assert providers._names(b"<html>") == ()


def test_the_names_survive_the_secrets_annotation_and_garbage_there_is_no_names() -> None:
    names = ("gpt-4o", "meta-llama/Llama-3.1-8B", "model:v1")
    assert catalog.names_from_annotation(catalog.names_to_annotation(names)) == names
    for garbage in (None, "", "{", '{"a": 1}', '["ok", 3, "bad name"]'):
        assert catalog.names_from_annotation(garbage) in ((), ("ok",))


async def test_a_refused_destination_is_not_called() -> None:
    listing = await providers.list_provider_models("http://169.254.169.254/v1", "k", "ns")
    assert listing.names == () and "link-local" in listing.note
    listing = await providers.list_provider_models("ftp://example.com/v1", "k", "ns")
    assert listing.names == () and "http(s)" in listing.note

"""Body-based routing (`dataplane.routing`) and the completion ceiling rule (`dataplane.body.bound_completion`):
each hole as a class of odd inputs."""

from __future__ import annotations

import json

import openai
import pytest

from maasctl.contract.labels import COMPLETION_CEILING_ANNOTATION, completion_ceiling_of
from maasctl.contract.routing import BASE_INFERENCE_PATHS, answers_model_listing, is_model_listing_path
from maasctl.contract.usage import DEFAULT_COMPLETION_CEILING
from maasctl.dataplane.body import InvalidBody, bound_completion, prepare_body
from maasctl.dataplane.charge import completion_ceiling, request_bound
from maasctl.dataplane.listing import model_list
from maasctl.dataplane.routing import MAX_MODEL_NAME, NoModel, body_model, is_base_inference_path, match_headers


class TestBasePaths:
    @pytest.mark.parametrize("path", BASE_INFERENCE_PATHS)
    def test_the_four_openai_paths(self, path: str) -> None:
        assert is_base_inference_path(path)

    @pytest.mark.parametrize("path", ["/v1/models", "/v1/chat/completions/", "/v1/chat", "/ns/m/v1/chat/completions",
                                      "/V1/chat/completions", "/v1/embeddings/x", "", "/"])
    def test_anything_else_is_not(self, path: str) -> None:
        assert not is_base_inference_path(path)


class TestBodyModel:
    def test_plain(self) -> None:
        assert body_model(b'{"model": "gpt-x", "messages": []}') == "gpt-x"

    def test_leading_whitespace(self) -> None:
        assert body_model(b' \r\n\t{"model":"m"}') == "m"

    def test_duplicate_keys_take_the_last_as_the_forwarded_body_does(self) -> None:
        raw = b'{"model": "a", "model": "b"}'
        assert body_model(raw) == "b" == json.loads(prepare_body(raw).content)["model"]

    def test_escaped_name_is_read_as_json_reads_it(self) -> None:
        assert body_model(b'{"model": "gr\\u0061nite"}') == "granite"

    def test_nested_model_does_not_count(self) -> None:
        with pytest.raises(NoModel):
            body_model(b'{"input": {"model": "x"}}')

    @pytest.mark.parametrize("raw", [b'{"model": 1}', b'{"model": null}', b'{"model": ["a"]}',
                                     b'{"model": {"name": "a"}}', b'{"model": true}', b'{}',
                                     b'{"model": ""}', b'{"model": "a\\nb"}', b'{"model": "a\\"b"}',
                                     b'{"model": "a\\u0000"}',
                                     b'{"model": "' + b"m" * (MAX_MODEL_NAME + 1) + b'"}'])
    def test_no_usable_model(self, raw: bytes) -> None:
        with pytest.raises(NoModel):
            body_model(raw)

    @pytest.mark.parametrize("raw", [b"", b"[]", b'"model"', b"model=gpt", b'[{"model": "a"}]', b"null"])
    def test_not_an_object(self, raw: bytes) -> None:
        with pytest.raises(NoModel):
            body_model(raw)

    @pytest.mark.parametrize("raw", [
        '{"model": "a"}'.encode("utf-16"), '{"model": "a"}'.encode("utf-32-le"),
        b"\xef\xbb\xbf" + b'{"model": "a"}', b'{"model": "\xff"}', b'{"model": "a"} trailing',
        b'{"model": "a"', b'{"model": "a", "x": ' + b"[" * 200 + b"]" * 200 + b"}",
    ])
    def test_encodings_and_malformed_json_are_refused(self, raw: bytes) -> None:
        with pytest.raises(InvalidBody):
            body_model(raw)

    def test_huge_bodies_are_not_read(self) -> None:
        raw = b'{"model": "a", "pad": "' + b"x" * 2048 + b'"}'
        with pytest.raises(InvalidBody, match="larger"):
            body_model(raw, limit=1024)
        assert body_model(raw, limit=len(raw)) == "a"


def _prepared(body: dict[str, object]) -> bytes:
    return prepare_body(json.dumps(body).encode()).content


class TestBoundCompletion:
    def test_default_only_model_keeps_the_bytes(self) -> None:
        body = prepare_body(b'{"model":"m","messages":[]}')
        assert bound_completion(body, None, "/v1/chat/completions") is body

    @pytest.mark.parametrize(("path", "field"), [("/v1/chat/completions", "max_tokens"),
                                                 ("/v1/completions", "max_tokens"),
                                                 ("/openai/v1/chat/completions?x=1", "max_tokens"),
                                                 ("/v1/responses", "max_output_tokens")])
    def test_no_stated_bound_gets_the_ceiling(self, path: str, field: str) -> None:
        body = bound_completion(prepare_body(b'{"model":"m"}'), 256, path)
        assert json.loads(body.content) == {"model": "m", field: 256}
        assert body.max_tokens == 256
        assert request_bound(body, 256) == body.prompt_estimate + 256

    @pytest.mark.parametrize("stated", [{"max_tokens": None}, {"max_completion_tokens": None, "max_tokens": None}])
    def test_null_bounds_count_as_unstated(self, stated: dict[str, object]) -> None:
        raw = json.dumps({"model": "m", **stated}).encode()
        body = bound_completion(prepare_body(raw), 64, "/v1/chat/completions")
        assert json.loads(body.content)["max_tokens"] == 64

    @pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
    @pytest.mark.parametrize("value", [100000, "100000", 100000.0, 1e300])
    def test_a_bound_above_the_ceiling_is_lowered(self, field: str, value: object) -> None:
        body = bound_completion(prepare_body(json.dumps({"model": "m", field: value}).encode()), 512,
                                "/v1/chat/completions")
        sent = json.loads(body.content)
        assert sent[field] == 512 and body.max_tokens == 512
        assert [f for f in ("max_tokens", "max_completion_tokens", "max_output_tokens") if f in sent] == [field]

    def test_a_smaller_bound_is_kept(self) -> None:
        raw = _prepared({"model": "m", "max_tokens": 10, "n": 3})
        body = bound_completion(prepare_body(raw), 512, "/v1/chat/completions")
        assert json.loads(body.content)["max_tokens"] == 10
        assert request_bound(body, 512) == body.prompt_estimate + 30

    @pytest.mark.parametrize("value", ["lots", [1], {"a": 1}])
    def test_an_unreadable_bound_is_left_for_the_backend(self, value: object) -> None:
        body = bound_completion(prepare_body(json.dumps({"model": "m", "max_tokens": value}).encode()), 8,
                                "/v1/chat/completions")
        assert json.loads(body.content)["max_tokens"] == value
        assert request_bound(body, 8) == body.prompt_estimate + 8

    @pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/models", "/v1/audio/transcriptions"])
    def test_paths_without_a_completion_are_untouched(self, path: str) -> None:
        body = prepare_body(b'{"model":"m","input":"x"}')
        assert bound_completion(body, 8, path) is body

    @pytest.mark.parametrize("raw", [b"", b"plain text"])
    def test_non_json_bodies_are_untouched(self, raw: bytes) -> None:
        body = prepare_body(raw, content_type="text/plain")
        assert bound_completion(body, 8, "/v1/completions") is body

    def test_streaming_flags_survive(self) -> None:
        body = bound_completion(prepare_body(b'{"model":"m","stream":true}'), 8, "/v1/chat/completions")
        assert body.streaming and body.injected_usage
        assert json.loads(body.content)["stream_options"] == {"include_usage": True}


class TestCeilingRule:
    def test_default(self) -> None:
        assert completion_ceiling(None) == DEFAULT_COMPLETION_CEILING == 4096
        assert completion_ceiling(None, 100) == 100
        assert completion_ceiling(256) == 256

    @pytest.mark.parametrize(("value", "want"), [("256", 256), (" 1 ", 1), ("1000000", 1000000)])
    def test_annotation_read(self, value: str, want: int) -> None:
        assert completion_ceiling_of({COMPLETION_CEILING_ANNOTATION: value}) == want

    @pytest.mark.parametrize("value", ["", "0", "-1", "1000001", "1e3", "12.0", "٣", "abc", "99999999999"])
    def test_annotation_garbage_is_the_default(self, value: str) -> None:
        assert completion_ceiling_of({COMPLETION_CEILING_ANNOTATION: value}) is None

    def test_annotation_absent(self) -> None:
        assert completion_ceiling_of(None) is None
        assert completion_ceiling_of({}) is None


class TestMatchHeaders:
    def test_base_path_gets_the_header(self) -> None:
        got = match_headers("/v1/embeddings", {"host": "gw"}, b'{"model":"e5","input":"x"}')
        assert got == {"host": "gw", "x-gateway-model-name": "e5"}

    def test_a_present_header_is_replaced_by_the_body(self) -> None:
        got = match_headers("/v1/completions", {"x-gateway-model-name": "other"}, b'{"model":"m"}')
        assert got["x-gateway-model-name"] == "m"

    @pytest.mark.parametrize("path", ["/ns/m/v1/chat/completions", "/v1/models", "/maas-api/v1/api-keys"])
    def test_other_paths_do_not_read_the_body(self, path: str) -> None:
        headers = {"host": "gw"}
        assert match_headers(path, headers, b"\xff not json") is headers

    def test_base_path_without_model_is_refused(self) -> None:
        with pytest.raises(NoModel):
            match_headers("/v1/chat/completions", {}, b'{"messages": []}')


class TestModelListing:
    """The data plane's own `GET <model path>/v1/models` answer (`dataplane.listing`) and which routes get it
    (`contract.routing`)."""

    def test_the_answer_is_openais_list_read_by_the_sdk(self) -> None:
        body = json.loads(model_list("claude", "llm/claude-ref", "2026-01-02T03:04:05Z"))
        assert body["object"] == "list"
        [model] = [openai.types.Model.model_validate(m) for m in body["data"]]
        assert (model.id, model.owned_by, model.created) == ("claude", "llm/claude-ref", 1767323045)

    @pytest.mark.parametrize("created", ["", "yesterday", "1969-12-31T23:59:59Z", "2026-13-01T00:00:00Z"])
    def test_an_unreadable_or_early_creation_time_is_zero(self, created: str) -> None:
        assert json.loads(model_list("m", "ns/m", created))["data"][0]["created"] == 0

    @pytest.mark.parametrize(("api_format", "relayed", "answers"), [
        ("openai-chat", False, False), ("messages", False, True), ("openai-chat", True, True), ("messages", True, True),
        ("bedrock", False, False)])
    def test_only_providers_without_an_openai_listing(self, api_format: str, relayed: bool, answers: bool) -> None:
        assert answers_model_listing(api_format, relayed) is answers

    @pytest.mark.parametrize(("path", "listing"), [
        ("/llm/m/v1/models", True), ("/a/v1/models", True), ("/v1/models", False), ("/llm/m/v1/models/", False),
        ("/llm/m/v1/modelsx", False), ("/llm/mv1/models", False), ("/llm/m/v1/models/x", False), ("", False)])
    def test_a_listing_path_is_under_a_model_path(self, path: str, listing: bool) -> None:
        assert is_model_listing_path(path) is listing

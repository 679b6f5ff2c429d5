"""Counting rules (pure): the request the backend receives, usage read from any answer, the estimate."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from maasctl.contract.usage import DEFAULT_COMPLETION_CEILING
from maasctl.dataplane.body import InvalidBody, ModelMismatch, ModelRename, PreparedBody, declares_json, prepare_body
from maasctl.dataplane.charge import charge_for, usage_numbers
from maasctl.dataplane.decompress import Decompressor
from maasctl.dataplane.jsonscan import TAIL_BYTES, JsonModelRewriter, JsonUsageScanner, set_top_level_model
from maasctl.dataplane.sse import SseUsageFilter

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
         "prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 1}}


def sse(*chunks: object) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("value", [True, 1, "true", "True", "1", "yes", " on "])
@pytest.mark.parametrize("extra", [{}, {"stream_options": {"x": 1}}, {"stream_options": "junk"}])
def test_every_way_of_asking_for_a_stream_gets_usage_requested(value: object, extra: dict[str, object]) -> None:
    raw = json.dumps({"model": "m", "stream": value, **extra}).encode()
    body = prepare_body(raw)
    sent = json.loads(body.content)
    assert body.streaming and body.injected_usage and body.model == "m"
    assert sent["stream"] is True and sent["stream_options"]["include_usage"] is True


@pytest.mark.parametrize("value", [False, 0, "false", "no", None, "", [], {}])
def test_non_streaming_values_are_sent_as_false(value: object) -> None:
    body = prepare_body(json.dumps({"model": "m", "stream": value}).encode())
    assert not body.streaming and json.loads(body.content)["stream"] is False


def test_duplicate_keys_reach_the_backend_as_the_gateway_read_them() -> None:
    body = prepare_body(b'{"model":"m","stream":false,"stream":true}')
    assert body.streaming and body.content.count(b'"stream"') == 1


def test_client_asking_for_usage_keeps_its_usage_chunk() -> None:
    body = prepare_body(json.dumps({"stream": True, "stream_options": {"include_usage": True}}).encode())
    assert body.streaming and not body.injected_usage


NON_JSON_BODIES = (
    b"not json", b"\xef\xbb\xbfplain text with a BOM", b"\xff\xfe\x00\x01binary",
    b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00", b"\xff\xd8\xff\xe0\x00\x10JFIF", b"RIFF\x24\x00\x00\x00WAVE",
    b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n{"stream":true}\r\n'
    b"--b0undary--\r\n", b"-- not a number", b"nope", b"trust me", b"\x0c[1]",
)
NON_JSON_TYPES = ("multipart/form-data; boundary=b0undary", "application/octet-stream", "text/plain", "audio/wav")
JSON_TYPES = (None, "", "application/json", "Application/JSON; charset=utf-8", "application/json;charset=latin-1",
              "application/vnd.api+json", "application/merge-patch+json", "text/json", "application/x-json",
              " application/json ")


def test_an_object_is_read_whatever_the_content_type() -> None:
    for content_type in (*JSON_TYPES, *NON_JSON_TYPES):
        assert prepare_body(b'  {"stream": "true"}', content_type=content_type).streaming
        assert prepare_body(b'\r\n\t {"stream": "true"}', content_type=content_type).streaming


def test_non_json_bodies_pass_under_a_non_json_content_type() -> None:
    for content_type in NON_JSON_TYPES:
        for raw in NON_JSON_BODIES:
            body = prepare_body(raw, content_type=content_type)
            assert body.content == raw and not body.streaming


def test_an_empty_body_passes_under_any_content_type() -> None:
    for content_type in (*JSON_TYPES, *NON_JSON_TYPES):
        for raw in (b"", b" ", b"\r\n"):
            assert prepare_body(raw, content_type=content_type).content == raw


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


NON_OBJECT_JSON = (
    "[]", "[1,2]", _nested(2), _nested(50), _nested(127), _nested(128), _nested(129), _nested(5000),
    '[{"model":"m","stream":true,"max_tokens":100000}]', _nested(3, '{"stream":true}'),
    '"x"', '"{\\"stream\\":true}"', "1", "-1", "1e400", "0.5", "true", "false", "null", "NaN", "Infinity",
    "-Infinity", "[1] trailing", '"x" trailing', "1 2", "[", "[1,", '["unterminated', "[,]",
)


class TestEveryJsonValueIsReadOrRefused:
    """No JSON the gateway did not read reaches a backend: a JSON value that is not an object — an array at any
    depth, a scalar, after any JSON whitespace, with trailing data or cut off — is refused under every
    Content-Type, and a body whose Content-Type reads as JSON must be one object."""

    @pytest.mark.parametrize("text", NON_OBJECT_JSON)
    @pytest.mark.parametrize("lead", ["", " ", "\n", "\r\n\t  "])
    def test_non_object_json_is_refused_under_any_content_type(self, text: str, lead: str) -> None:
        for content_type in (*JSON_TYPES, *NON_JSON_TYPES):
            with pytest.raises(InvalidBody):
                prepare_body((lead + text).encode(), content_type=content_type)
            with pytest.raises(InvalidBody):
                prepare_body((lead + text).encode(), RENAME, content_type=content_type)

    @pytest.mark.parametrize("raw", NON_JSON_BODIES)
    def test_a_body_declared_json_must_be_an_object(self, raw: bytes) -> None:
        for content_type in JSON_TYPES:
            with pytest.raises(InvalidBody):
                prepare_body(raw, content_type=content_type)

    def test_the_declared_types(self) -> None:
        assert all(declares_json(t) for t in JSON_TYPES)
        assert not any(declares_json(t) for t in NON_JSON_TYPES)


def test_max_tokens_and_prompt_estimate() -> None:
    body = prepare_body(json.dumps({"messages": [{"content": "x" * 400}], "max_tokens": 50}).encode())
    assert body.max_tokens == 50 and body.prompt_estimate >= 100
    assert prepare_body(b'{"max_completion_tokens": 7, "max_tokens": 9}').max_tokens == 9  # the largest
    assert prepare_body(b'{"max_completion_tokens": 9, "max_tokens": 7}').max_tokens == 9
    assert prepare_body(b'{"max_tokens": 1000000000000000}').max_tokens == 10**12
    for odd in ("abc", None, [], {}, True, False, -5, 0, "-30000", "0", "nan", "", "1e-400", "0x10"):
        assert prepare_body(json.dumps({"max_tokens": odd, "max_completion_tokens": 64}).encode()).max_tokens == 64
        alone = prepare_body(json.dumps({"stream": True, "max_tokens": odd}).encode())
        assert alone.max_tokens is None  # the default ceiling applies
        assert charge_for(200, None, alone, "truncated").charged > DEFAULT_COMPLETION_CEILING


@pytest.mark.parametrize("depth", [129, 2000, 100_000])
def test_deeply_nested_json_is_refused(depth: int) -> None:
    with pytest.raises(InvalidBody):
        prepare_body(b'{"a":' + b"[" * depth + b"]" * depth + b"}")
    with pytest.raises(InvalidBody):
        prepare_body(b'{"a":' + b'{"b":' * depth + b"1" + b"}" * depth + b"}")


def test_brackets_inside_strings_and_wide_bodies_are_fine() -> None:
    assert prepare_body(json.dumps({"a": "[" * 5000, "b": [[1]] * 3000}).encode()).content


def test_injected_usage_chunk_is_dropped_but_counted_even_split_across_reads() -> None:
    stream = sse({"choices": [{"delta": {"content": "hi"}}]}, {"choices": [], "usage": USAGE})
    filt = SseUsageFilter(drop_usage_chunk=True)
    out = b"".join(filt.feed(stream[i:i + 7]) for i in range(0, len(stream), 7)) + filt.close()
    assert b'"usage"' not in out and b"hi" in out and out.endswith(b"data: [DONE]\n\n")
    assert filt.usage == USAGE and filt.done
    keep = SseUsageFilter(drop_usage_chunk=False)
    assert keep.feed(stream) == stream and keep.usage == USAGE


@pytest.mark.parametrize("size", [10, 2 * 1024 * 1024])
def test_usage_is_read_from_json_answers_of_any_size(size: int) -> None:
    payload = json.dumps({"choices": [{"message": {"content": "x" * size}}], "usage": USAGE}).encode()
    scanner = JsonUsageScanner(1024 * 1024)
    for i in range(0, len(payload), 65536):
        scanner.feed(payload[i:i + 65536])
    assert usage_numbers(scanner.usage) == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10,
                                            "cached_tokens": 2, "reasoning_tokens": 1}


def test_large_answer_with_usage_early_or_strings_looking_like_usage() -> None:
    early = json.dumps({"usage": USAGE, "choices": [{"text": "y" * 2_000_000}]}).encode()
    scanner = JsonUsageScanner(1024)
    scanner.feed(early)
    assert scanner.usage is None  # not in the tail: unreadable -> the caller charges an estimate
    trick = json.dumps({"choices": [{"text": "z" * 3000 + '"usage": {"total_tokens": 1}'}], "usage": USAGE}).encode()
    scanner = JsonUsageScanner(1024)
    scanner.feed(trick)
    assert scanner.usage == USAGE
    assert len(trick) > 1024 and TAIL_BYTES > 1024


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate"])
def test_compressed_answers_are_decompressed_for_scanning(encoding: str) -> None:
    payload = json.dumps({"choices": [], "usage": USAGE}).encode()
    data = gzip.compress(payload) if "gzip" in encoding else zlib.compress(payload)
    dec = Decompressor(encoding)
    scanner = JsonUsageScanner(1 << 20)
    for i in range(0, len(data), 5):
        scanner.feed(dec.feed(data[i:i + 5]))
    assert dec.readable and scanner.usage == USAGE
    assert not Decompressor("br").readable and Decompressor("identity").identity


def test_charge_uses_usage_else_a_conservative_estimate_never_zero_or_one() -> None:
    body = PreparedBody(b"{}", max_tokens=None, prompt_estimate=30)
    assert charge_for(200, USAGE, body, "complete").charged == 10
    missing = charge_for(200, None, body, "complete", completion_ceiling=500)
    assert (missing.charged, missing.estimated) == (530, True) and "missing" in missing.estimate_reason
    cut = charge_for(200, None, PreparedBody(b"{}", max_tokens=64, prompt_estimate=1), "client_disconnect")
    assert cut.charged == 65 and "client_disconnect" in cut.estimate_reason
    assert charge_for(200, {"total_tokens": 0}, body, "complete").charged > 1
    assert charge_for(503, None, body, "upstream_error").charged == 0
    short_total = {"prompt_tokens": 10, "completion_tokens": 5000, "total_tokens": 10}
    assert charge_for(200, short_total, body, "complete").charged == 5010  # never less than its parts
    assert charge_for(200, {**short_total, "total_tokens": 9000}, body, "complete").charged == 9000


@given(st.integers(0, 10**12), st.integers(0, 10**12))
def test_usage_numbers_total_is_never_less_than_its_parts(prompt: int, completion: int) -> None:
    numbers = usage_numbers({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 1})
    assert numbers["total_tokens"] >= min(prompt + completion, 10**12)


# --- renamed models (ExternalModel targetModel) ---------------------------------------------------------

RENAME = ModelRename(published="company-chat", target="gpt-4o", aliases=("chat-ref",))


@pytest.mark.parametrize("sent", ["company-chat", "gpt-4o", "chat-ref"])
def test_a_renamed_model_goes_upstream_under_the_providers_name(sent: str) -> None:
    prepared = prepare_body(json.dumps({"model": sent, "stream": True, "messages": []}).encode(), RENAME)
    body = json.loads(prepared.content)
    assert body["model"] == "gpt-4o" and body["stream"] is True
    assert prepared.model == "company-chat" and prepared.response_model == "company-chat"


@pytest.mark.parametrize("sent", ["gpt-4o-expensive", "", "COMPANY-CHAT", None, 5, ["company-chat"], {"a": 1}])
def test_any_other_model_is_refused_never_forwarded(sent: object) -> None:
    with pytest.raises(ModelMismatch):
        prepare_body(json.dumps({"model": sent, "messages": []}).encode(), RENAME)


def test_a_body_without_model_gets_the_providers_name_and_odd_bodies_are_refused() -> None:
    assert json.loads(prepare_body(b'{"messages": []}', RENAME).content)["model"] == "gpt-4o"
    assert prepare_body(b"", RENAME).content == b""  # GET /v1/models and friends
    for raw in (b"model=gpt-4o-expensive", b"[1]", b'{"model": ', b"\xff"):
        with pytest.raises(InvalidBody):
            prepare_body(raw, RENAME)
    same = ModelRename("gpt-4o", "gpt-4o")
    form = "application/x-www-form-urlencoded"
    assert prepare_body(b"model=x", same, content_type=form).content == b"model=x"  # not renamed: nothing to rewrite
    assert prepare_body(b'{"model":"gpt-4o"}', same).response_model is None
    with pytest.raises(ModelMismatch):
        prepare_body(b'{"model":"other"}', same)


def test_answers_of_a_renamed_model_name_the_published_model() -> None:
    filt = SseUsageFilter(drop_usage_chunk=False, rename_to="company-chat")
    stream = (b'data: {"id":"1","model":"gpt-4o-2024","choices":[{"delta":{"content":"hi"}}]}\n\n'
              b'event: x\r\ndata: {"model":"gpt-4o","choices":[],"usage":{"total_tokens":7}}\r\n\r\n'
              b"data: [DONE]\n\n")
    out = filt.feed(stream[:20]) + filt.feed(stream[20:]) + filt.close()
    assert b"gpt-4o" not in out and out.count(b'"model":"company-chat"') == 2
    assert out == stream.replace(b'"gpt-4o-2024"', b'"company-chat"').replace(b'"gpt-4o"', b'"company-chat"')
    assert b"event: x\r\ndata: " in out and out.endswith(b"data: [DONE]\n\n")
    assert filt.usage == {"total_tokens": 7} and filt.done

    rewriter = JsonModelRewriter("company-chat", limit=1024)
    answer = json.dumps({"id": "c", "model": "gpt-4o-2024", "choices": [], "usage": {"total_tokens": 3}}).encode()
    assert rewriter.feed(answer[:10]) == b"" and rewriter.feed(answer[10:]) == b""
    assert json.loads(rewriter.close())["model"] == "company-chat"
    big = JsonModelRewriter("company-chat", limit=8)
    assert big.feed(answer[:10]) == answer[:10] and big.feed(answer[10:]) == answer[10:] and big.close() == b""
    odd = JsonModelRewriter("company-chat", limit=1024)
    odd.feed(b"not json")
    assert odd.close() == b"not json"


def test_only_the_top_level_model_value_changes_and_every_other_byte_stays() -> None:
    raw = b'{"id": "x", "model" : "gpt-4o",\n "choices": [{"model": "inner", "text": "\\"model\\": \\"a\\""}]}'
    edited = set_top_level_model(raw, "company-chat")
    assert edited == raw.replace(b'"gpt-4o"', b'"company-chat"')
    assert json.loads(edited)["choices"][0]["model"] == "inner"
    twice = b'{"model":"a","x":1,"model":"b"}'  # duplicate keys: a parser may read either one
    assert set_top_level_model(twice, "p") == b'{"model":"p","x":1,"model":"p"}'
    assert set_top_level_model(b'data: {"model":"a"}\n', "p") == b'data: {"model":"p"}\n'
    for bad in (b'{"choices": [{"model": "a"}]}', b'{"model": 5}', b'{"model": "a', b"[]"):
        assert set_top_level_model(bad, "p") is None

"""Hole classes of the request/answer counting path (security review of the data plane's counting code, `dataplane/`).

Every answer must be refused or counted — with a conservative estimate when usage cannot be read — never served
while undercounted. Each class below tries one hole with several variants."""

from __future__ import annotations

import codecs
import gzip
import json
import math
import zlib
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from maasctl.contract.usage import DEFAULT_COMPLETION_CEILING, MAX_TOKENS, UsageRecord
from maasctl.dataplane.body import InvalidBody, ModelRename, PreparedBody, prepare_body
from maasctl.dataplane.charge import charge_for, usage_numbers
from maasctl.dataplane.decompress import Decompressor
from maasctl.dataplane.jsonscan import JsonUsageScanner
from maasctl.dataplane.sse import SseUsageFilter

REQUEST: dict[str, Any] = {"model": "m", "stream": True, "max_tokens": 100_000,
                           "messages": [{"role": "user", "content": "héllo"}]}
UTF8_ONLY = "request bodies must be UTF-8 JSON without a byte-order mark"
RENAME = ModelRename(published="company-chat", target="gpt-4o")


# --- 1. the body the backend parses is the body the gateway read ---------------------------------------


class TestBodiesThatAJsonParserReadsButAreNotUtf8Json:
    """A BOM or UTF-16/32 body is JSON to Python's `json.loads` (FastAPI, vLLM): forwarding it untouched would
    serve a stream without the usage request and without its `max_tokens`."""

    @pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                                          "utf-32-be"])
    @pytest.mark.parametrize("text", [json.dumps(REQUEST), "  \r\n" + json.dumps(REQUEST), json.dumps([REQUEST]),
                                      '"x"', "123"])
    @pytest.mark.parametrize("rename", [None, RENAME])
    def test_refused_with_a_clear_message(self, encoding: str, text: str, rename: ModelRename | None) -> None:
        raw = text.encode(encoding)
        assert json.loads(raw) is not None  # what a Python backend would read
        with pytest.raises(InvalidBody, match=UTF8_ONLY):
            prepare_body(raw, rename)

    @pytest.mark.parametrize("raw", [
        (json.dumps(REQUEST) + " trailing").encode("utf-8-sig"),
        (json.dumps(REQUEST) + ",").encode("utf-16"),  # with the platform's BOM
        codecs.BOM_UTF16_BE + (json.dumps(REQUEST) + "}").encode("utf-16-be"),
        codecs.BOM_UTF32_BE + (json.dumps(REQUEST) + "\0").encode("utf-32-be"),
        (json.dumps(REQUEST) + "x").encode("utf-32"),
    ])
    def test_a_bom_before_json_that_python_would_not_even_parse_is_refused(self, raw: bytes) -> None:
        # A lenient parser skips the BOM and reads the object; trailing garbage must not make it "not JSON".
        with pytest.raises(InvalidBody, match=UTF8_ONLY):
            prepare_body(raw)


class TestBodiesThatStartLikeAnObjectButAreNotOneValidUtf8Object:
    """Lenient backends ignore trailing data, decode other charsets or skip odd whitespace: a body that starts
    with `{` is read by the gateway and re-serialised, or refused — never forwarded as the client wrote it."""

    @pytest.mark.parametrize("suffix", [b" x", b"{}", b',{"stream":false}', b"\x00", b"]", b"\n\ndata: x"])
    def test_trailing_data_is_refused(self, suffix: bytes) -> None:
        with pytest.raises(InvalidBody):
            prepare_body(json.dumps(REQUEST).encode() + suffix)

    @pytest.mark.parametrize("raw", [
        b'{"model":"m","stream":true,"max_tokens":100000,"messages":[{"content":"\xff"}]}',  # latin-1 / invalid
        b'{"model":"m","stream":true,"max_tokens":100000,"messages":[{"content":"\xe9t\xe9"}]}',
        b'{"model":"m","stream":true,"max_tokens":100000,"x":"\xed\xa0\x80"}',  # a UTF-8 encoded surrogate
        b'{"model":"m","stream":true,"max_tokens":100000,"x":"\xc0\xaf"}',  # overlong
        b'{"model":"m","stream":true,"max_tokens":100000,"x":"\xf4\x90\x80\x80"}',  # above U+10FFFF
    ])
    def test_invalid_utf8_is_refused(self, raw: bytes) -> None:
        with pytest.raises(InvalidBody):
            prepare_body(raw)

    @pytest.mark.parametrize("raw", [
        b'{"model":"m","stream":true,"max_tokens":100000,"x":' + b"1" * 5000 + b"}",  # past Python's int limit
        b'{"model":"m","stream":true,"max_tokens":100000,}',  # JSON5-style trailing comma
        b"\x0c" + json.dumps(REQUEST).encode(),  # form feed: whitespace to some parsers, not to JSON
        b"\x0b " + json.dumps(REQUEST).encode(),
        b"{'model':'m','stream':true}",
        b'{"model":"m","stream":true',
    ])
    def test_unparseable_objects_are_refused(self, raw: bytes) -> None:
        with pytest.raises(InvalidBody):
            prepare_body(raw)


# --- 2. nothing but InvalidBody / ModelMismatch for any bytes -------------------------------------------


class TestLoneSurrogates:
    """An escaped lone surrogate is valid JSON text but cannot be UTF-8: a 400, not a 500 with a traceback."""

    @pytest.mark.parametrize("escaped", ["\\ud800", "\\udfff", "\\ud800\\ud800", "\\udc00\\ud800", "a\\udbffb"])
    @pytest.mark.parametrize(("template", "rename"), [
        ('{"model":"company-chat","messages":[{"role":"user","content":"%s"}]}', None),
        ('{"model":"company-chat","messages":[{"role":"user","content":"%s"}]}', RENAME),
        ('{"model":"company-chat","%s":1}', RENAME),
        ('{"x":{"%s":["%s"]}}', None),
        ('{"model":"%s"}', None),
    ])
    def test_refused_as_invalid_body(self, escaped: str, template: str, rename: ModelRename | None) -> None:
        with pytest.raises(InvalidBody, match="surrogate"):
            prepare_body(template.replace("%s", escaped).encode(), rename)


_FRAGMENTS = st.sampled_from([
    "{", "}", "[", "]", ",", ":", '"', '"stream"', "true", '"1"', '"max_tokens"', "1e400", "-0", "NaN", "Infinity",
    "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u0000", "\\", "é", "\ufeff", " ", "\x0c", "\x00", "1" * 4400,
])
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_OBJECTS = st.dictionaries(
    st.sampled_from(["model", "stream", "max_tokens", "max_completion_tokens", "stream_options", "x"]),
    _VALUES | st.sampled_from(["m", "company-chat", "gpt-4o", "30000", 30000.0, "true"]), max_size=5)
_ENCODINGS = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"])


@st.composite
def odd_bodies(draw: st.DrawFn) -> bytes:
    """Bytes a client might send: random, JSON-ish fragments, or JSON objects in odd encodings with odd edges."""
    kind = draw(st.integers(0, 3))
    if kind == 3:  # any JSON value (arrays and scalars too), after JSON whitespace
        return (draw(st.sampled_from(["", " ", "\r\n\t"])) + json.dumps(draw(_VALUES))).encode()
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        return "".join(draw(st.lists(_FRAGMENTS, max_size=12))).encode("utf-8", "surrogatepass")
    text = json.dumps(draw(_OBJECTS), ensure_ascii=draw(st.booleans()))
    prefix = draw(st.sampled_from(["", " ", "\n", "\ufeff"]))
    suffix = draw(st.sampled_from(["", " ", "x", "}", "\x00"]))
    return (prefix + text + suffix).encode(draw(_ENCODINGS), "surrogatepass")


def _python_backend(raw: bytes) -> Any:
    """What a Python backend (FastAPI, vLLM, the test model) reads from forwarded bytes, None if nothing."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


class TestAnyBytesGiveABodyOrARefusal:
    """`prepare_body` raises nothing but InvalidBody (ModelMismatch) and whatever it forwards, a JSON backend
    reads exactly as the gateway did: a stream it forwards asks for usage and carries the limit it counted."""

    @settings(max_examples=600)
    @given(odd_bodies(), st.sampled_from([None, RENAME]),
           st.sampled_from([None, "application/json; charset=utf-8", "application/x+json", "text/plain",
                            "application/octet-stream", "multipart/form-data; boundary=x"]))
    @example(b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}]}', None, None)
    @example(b'{"model":"company-chat","x":"\\udfff"}', RENAME, None)
    @example(b'\xef\xbb\xbf{"model":"m","stream":true,"max_tokens":100000}', None, None)
    @example(b'{"model":"m","stream":true,"max_tokens":100000} x', None, None)
    @example(b' [{"model":"m","stream":true}]', None, "text/plain")
    @example(b'"x"', RENAME, "application/octet-stream")
    @example(json.dumps({"stream": True}).encode("utf-16-be"), None, None)
    def test_only_refusals_and_bodies_read_like_the_backend_reads_them(
            self, raw: bytes, rename: ModelRename | None, content_type: str | None) -> None:
        try:
            body = prepare_body(raw, rename, content_type=content_type)
        except InvalidBody:
            return
        seen = _python_backend(body.content)
        if not isinstance(seen, dict):
            assert seen is None, seen  # no JSON value the gateway did not read reaches the backend
            return
        assert body.streaming == (seen.get("stream") is True)
        if body.streaming:
            assert seen["stream_options"]["include_usage"] is True
        for field in ("max_tokens", "max_completion_tokens"):
            value = seen.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                assert body.max_tokens is not None and body.max_tokens >= min(value, MAX_TOKENS)


# --- 3. the completion limit the backend will use -------------------------------------------------------


class TestCompletionLimitsAreReadAsTheBackendReadsThem:
    """pydantic (vLLM and friends) coerces "30000" and 30000.0 and prefers `max_completion_tokens`: the estimate
    takes the largest limit any field allows."""

    @pytest.mark.parametrize("value", ['"30000"', "30000.0", "3e4", '" 30000 "', '"30000.0"', '"+30000"',
                                       '"30_000"'])
    @pytest.mark.parametrize("field", ["max_completion_tokens", "max_tokens", "max_output_tokens"])
    def test_numeric_forms_count(self, value: str, field: str) -> None:
        others = ",".join(f'"{f}":1' for f in ("max_tokens", "max_completion_tokens") if f != field)
        body = prepare_body(f'{{"stream":true,{others},"{field}":{value}}}'.encode())
        assert body.max_tokens == 30_000
        charge = charge_for(200, None, body, "client_disconnect")
        assert charge.estimated and charge.charged >= 30_000

    @pytest.mark.parametrize(("fields", "expected"), [
        ({"max_completion_tokens": 5, "max_tokens": 9}, 9),
        ({"max_completion_tokens": "5", "max_tokens": 7, "max_output_tokens": 40.0}, 40),
        ({"max_tokens": 2.5}, 3),  # not a whole number: rounded up, never down
        ({"max_tokens": "1e400", "max_completion_tokens": 1}, MAX_TOKENS),
        ({"max_tokens": "9" * 5000, "max_completion_tokens": 1}, MAX_TOKENS),
    ])
    def test_the_largest_limit_wins(self, fields: dict[str, Any], expected: int) -> None:
        assert prepare_body(json.dumps(fields).encode()).max_tokens == expected


class TestEveryCompletionTheRequestAsksForCounts:
    """`n` and `best_of` make the backend generate several completions: when usage cannot be read, the estimate
    counts the completion limit once per completion (read as leniently as the limits)."""

    @pytest.mark.parametrize(("fields", "choices"), [
        ({"n": 8}, 8), ({"n": "8"}, 8), ({"n": 8.0}, 8), ({"n": 2, "best_of": 5}, 5), ({"best_of": "3"}, 3),
        ({"n": 0}, 1), ({"n": "many"}, 1), ({"n": None}, 1), ({"n": True}, 1), ({}, 1),
    ])
    @pytest.mark.parametrize("limit", [{"max_tokens": 1000}, {}])
    def test_the_estimate_counts_each_completion(self, fields: dict[str, Any], choices: int,
                                                  limit: dict[str, Any]) -> None:
        body = prepare_body(json.dumps({"model": "m", "stream": True, **limit, **fields}).encode())
        assert body.choices == choices
        charge = charge_for(200, None, body, "client_disconnect")
        per_completion = limit.get("max_tokens", DEFAULT_COMPLETION_CEILING)
        assert charge.estimated and charge.charged >= body.prompt_estimate + choices * per_completion

    def test_the_estimate_stays_within_the_record_bound(self) -> None:
        body = prepare_body(json.dumps({"max_tokens": 10**11, "n": 10**6}).encode())
        charge = charge_for(200, None, body, "truncated")
        assert charge.charged == MAX_TOKENS
        UsageRecord(timestamp=1.0, request_id="r1", status=200, charged_tokens=charge.charged, **charge.numbers)


class TestUsageWithoutInputTokens:
    """Usage naming output tokens only (an Anthropic-style `message_delta`, a partial usage object) left the
    prompt uncharged: it is charged at the prompt estimate, marked estimated."""

    @pytest.mark.parametrize("usage", [
        {"output_tokens": 500}, {"completion_tokens": 500}, {"output_tokens": 500, "cache_read_input_tokens": 0},
        {"completion_tokens": 500, "completion_tokens_details": {"reasoning_tokens": 100}},
    ])
    def test_the_prompt_is_charged_at_its_estimate(self, usage: dict[str, Any]) -> None:
        body = prepare_body(json.dumps({"model": "m", "messages": [{"content": "x" * 4000}]}).encode())
        charge = charge_for(200, usage, body, "complete")
        assert charge.estimated and charge.estimate_reason == "usage without input tokens"
        assert charge.charged == 500 + body.prompt_estimate and charge.numbers["input_tokens"] == body.prompt_estimate
        UsageRecord(timestamp=1.0, request_id="r1", status=200, **charge.numbers)

    def test_from_a_stream_whose_last_usage_names_output_tokens_only(self) -> None:
        stream = (b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":900}}}'
                  b'\n\nevent: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":40}}\n\n')
        filt = SseUsageFilter(drop_usage_chunk=False)
        filt.feed(stream)
        body = PreparedBody(b"{}", streaming=True, prompt_estimate=1000)
        charge = charge_for(200, filt.usage, body, "complete")
        assert charge.charged >= 1040 and charge.estimated

    @pytest.mark.parametrize("usage", [
        {"prompt_tokens": 0, "completion_tokens": 5, "total_tokens": 5},  # a prompt of 0 tokens, as read
        {"prompt_tokens": 8, "total_tokens": 8},  # embeddings
        {"total_tokens": 70},  # a total covers the prompt
        {"input_tokens": 3, "output_tokens": 4},
    ])
    def test_usage_that_names_its_input_or_total_is_taken_as_read(self, usage: dict[str, Any]) -> None:
        charge = charge_for(200, usage, PreparedBody(b"{}", prompt_estimate=1000), "complete")
        assert not charge.estimated and charge.charged == usage_numbers(usage)["total_tokens"]


# --- 4. malformed usage is unreadable usage -------------------------------------------------------------

BODY = PreparedBody(b"{}", max_tokens=8000, prompt_estimate=10)
NO_LIMIT = PreparedBody(b"{}", max_tokens=None, prompt_estimate=10)


class TestMalformedUsageIsNotReadAsSmallUsage:
    """A usage object with some counts well-formed and others not is charged the conservative estimate (or what
    could be read, when larger), marked estimated — never just its well-formed part."""

    @pytest.mark.parametrize("usage", [
        {"prompt_tokens": 10, "completion_tokens": "5000", "total_tokens": "5010"},
        {"prompt_tokens": 10, "completion_tokens": 5000.0, "total_tokens": 5010.0},
        {"prompt_tokens": 10, "completion_tokens": None, "output_tokens": 5000},
        {"prompt_tokens": 10, "completion_tokens": -5000, "total_tokens": 10},
        {"input_tokens": 10, "output_tokens": "5000"},
        {"prompt_tokens": 10, "completion_tokens": True, "total_tokens": 11},
        {"prompt_tokens": 10, "completion_tokens": [5000], "total_tokens": 10},
        {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": {"n": 5010}},
        {"prompt_tokens": "10", "completion_tokens": 0, "total_tokens": 10},
        {"prompt_tokens": 10, "total_tokens": 10, "completion_tokens": math.inf},
    ])
    @pytest.mark.parametrize("body", [BODY, NO_LIMIT])
    def test_charged_as_unreadable(self, usage: dict[str, Any], body: PreparedBody) -> None:
        charge = charge_for(200, usage, body, "complete")
        estimate = body.prompt_estimate + (body.max_tokens or DEFAULT_COMPLETION_CEILING)
        assert charge.estimated and "malformed" in charge.estimate_reason
        assert charge.charged >= estimate
        UsageRecord(timestamp=1.0, request_id="r1", status=200, **charge.numbers)  # still a valid record

    @pytest.mark.parametrize("usage", [
        {"prompt_tokens": 10, "completion_tokens": "50000", "total_tokens": "50010"},
        {"prompt_tokens": 10, "completion_tokens": 50000.0},
        {"input_tokens": 10, "completion_tokens": None, "output_tokens": 50000},
    ])
    def test_what_could_be_read_counts_when_larger_than_the_estimate(self, usage: dict[str, Any]) -> None:
        charge = charge_for(200, usage, NO_LIMIT, "complete")
        assert charge.estimated and charge.charged >= 50_010

    @pytest.mark.parametrize(("usage", "at_least"), [
        ({"prompt_tokens": 5, "input_tokens": 4000, "completion_tokens": 3, "total_tokens": 8}, 4003),
        ({"completion_tokens": 7, "output_tokens": 6000, "total_tokens": 7}, 6000),
    ])
    def test_a_smaller_alias_does_not_lower_the_charge(
            self, usage: dict[str, Any], at_least: int) -> None:
        charge = charge_for(200, usage, BODY, "complete")
        assert charge.charged >= at_least and not charge.estimated
        assert usage_numbers(usage)["total_tokens"] >= at_least


# --- 5. compressed answers are read to their end --------------------------------------------------------

USAGE = {"prompt_tokens": 5, "completion_tokens": 500_000, "total_tokens": 500_005}


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def _compress(payload: bytes, encoding: str) -> bytes:
    return gzip.compress(payload) if encoding == "gzip" else zlib.compress(payload)


class TestCompressedAnswersAreReadToTheEnd:
    """An answer compressing better than ~8x lost everything past the first 8x of each chunk: the usage at its
    end was never seen and the (much smaller) estimate charged."""

    @pytest.mark.parametrize("size", [512, 4096, 65536, 1 << 30])
    @pytest.mark.parametrize("encoding", ["gzip", "deflate"])
    def test_a_highly_compressible_json_answer(self, size: int, encoding: str) -> None:
        payload = json.dumps({"choices": [{"message": {"content": "a" * 2_000_000}}], "usage": USAGE}).encode()
        data = _compress(payload, encoding)
        assert len(payload) > 500 * len(data)
        dec, scanner, out = Decompressor(encoding), JsonUsageScanner(1 << 20), 0
        for chunk in _chunks(data, size):
            piece = dec.feed(chunk)
            out += len(piece)
            scanner.feed(piece)
        assert dec.readable and out == len(payload) and scanner.usage == USAGE
        assert charge_for(200, scanner.usage, BODY, "complete").charged == 500_005

    @pytest.mark.parametrize("size", [1024, 4096, 65536])
    @pytest.mark.parametrize("encoding", ["gzip", "x-gzip", "deflate"])
    def test_a_gzip_stream_with_its_usage_chunk_at_the_end(self, size: int, encoding: str) -> None:
        events = b"".join(b'data: {"choices":[{"delta":{"content":"' + b"a" * 200 + b'"}}]}\n\n'
                          for _ in range(20_000))
        stream = events + b'data: {"choices":[],"usage":' + json.dumps(USAGE).encode() + b"}\n\ndata: [DONE]\n\n"
        dec, filt = Decompressor(encoding), SseUsageFilter(drop_usage_chunk=False)
        for chunk in _chunks(_compress(stream, "gzip" if "gzip" in encoding else "deflate"), size):
            filt.feed(dec.feed(chunk))
        assert dec.readable and filt.done and filt.usage == USAGE

    def test_a_gzip_answer_of_several_members_is_read_to_the_last_one(self) -> None:
        stream = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n',
                  b'data: {"choices":[],"usage":' + json.dumps(USAGE).encode() + b"}\n\n", b"data: [DONE]\n\n"]
        data = b"".join(gzip.compress(part) for part in stream)  # RFC 1952: members may follow each other
        dec, filt = Decompressor("gzip"), SseUsageFilter(drop_usage_chunk=False)
        for chunk in _chunks(data, 7):
            filt.feed(dec.feed(chunk))
        assert dec.readable and filt.usage == USAGE and filt.done

    @pytest.mark.parametrize("size", [4096, 1 << 30])
    def test_a_bomb_is_bounded_and_then_unreadable_never_silently_cut(self, size: int) -> None:
        bomb = gzip.compress(b"\0" * (64 << 20) + b'{"usage":{"total_tokens":1}}')
        dec = Decompressor("gzip", limit=1 << 20)
        pieces = [dec.feed(chunk) for chunk in _chunks(bomb, size)]
        assert max(map(len, pieces)) <= 1 << 20
        assert not dec.readable  # so the gateway charges the estimate, and says so

    @given(st.binary(min_size=0, max_size=20_000), st.integers(1, 5000), st.integers(1, 200_000))
    @settings(max_examples=150)
    @example(b"a" * 20_000, 5000, 1000)
    def test_all_bytes_or_unreadable(self, payload: bytes, size: int, limit: int) -> None:
        dec = Decompressor("gzip", limit=limit)
        out = b"".join(dec.feed(chunk) for chunk in _chunks(gzip.compress(payload), size))
        if dec.readable:
            assert out == payload
        else:
            assert len(payload) > limit  # cut only when one chunk would exceed the bound

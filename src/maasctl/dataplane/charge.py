"""What a request reserves before it is served, and what it is charged once it has finished.

`request_bound` is the most a request can use as far as the data plane knows before the answer: what a
token limit reserves. `charge_for` charges the answer's `usage` (`usage_numbers`).

When usage cannot be read from a served (2xx) answer — the backend omitted it, the stream was cut, the client
went away — `charge_for` returns a conservative estimate: the prompt estimate (request bytes / 4) plus the
request's completion limit (else the configured completion ceiling) for each completion it asks for (`n`,
`best_of`). Never 0 or 1; the record says it was estimated and why. Usage naming neither input tokens nor a
total (output tokens only, as an Anthropic-style `message_delta`) is charged the prompt at its estimate.
Usage with a malformed count (a string, float, negative, null, bool) is unreadable too: charged the larger of
the estimate and what could be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from maasctl.contract.usage import DEFAULT_COMPLETION_CEILING, MAX_TOKENS
from maasctl.dataplane.body import PreparedBody
from maasctl.dataplane.lenient import lenient_int

__all__ = [
    "Charge",
    "charge_for",
    "completion_ceiling",
    "request_bound",
    "usage_numbers",
]

_INPUT_NAMES: Final = ("prompt_tokens", "input_tokens")
_COUNT_NAMES: Final = {"input_tokens": _INPUT_NAMES,
                       "output_tokens": ("completion_tokens", "output_tokens"),
                       "total_tokens": ("total_tokens",)}


def _int(value: Any) -> int:
    return min(value, MAX_TOKENS) if _well_formed(value) else 0


def _well_formed(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_usage(usage: Any) -> tuple[dict[str, int], list[str]]:
    """Token counts of an OpenAI `usage` object ({} when it is no object) and the names of the charged counts
    that are present but not non-negative ints. Each count is the largest its names (`prompt_tokens` or
    `input_tokens`, ...) give, read leniently, so a null or a smaller alias never hides a larger number. The
    details (cached, reasoning) only inform the record: malformed ones read as 0."""
    if not isinstance(usage, dict):
        return {}, []
    out: dict[str, int] = {}
    malformed: list[str] = []
    for count, names in _COUNT_NAMES.items():
        best = 0
        for name in names:
            if name not in usage:
                continue
            value = usage[name]
            if type(value) is int and value >= 0:  # the usual case (bool is not int here)
                best = max(best, value)
            else:
                malformed.append(name)
                best = max(best, lenient_int(value) or 0)
        out[count] = min(best, MAX_TOKENS)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    out["cached_tokens"] = _int(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    out["reasoning_tokens"] = (
        _int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0)
    out["total_tokens"] = min(max(out["total_tokens"], out["input_tokens"] + out["output_tokens"]), MAX_TOKENS)
    return out, malformed


def _without_input(usage: Any) -> bool:
    """Usage that names neither input tokens nor a total: the prompt went uncounted, not "0 tokens"."""
    return isinstance(usage, dict) and not any(name in usage for name in (*_INPUT_NAMES, "total_tokens"))


def usage_numbers(usage: Any) -> dict[str, int]:
    """Token counts of an OpenAI `usage` object ({} when absent; see `_read_usage`). The total is never less
    than input + output."""
    return _read_usage(usage)[0]


@dataclass(frozen=True)
class Charge:
    """What one finished request costs the rate-limit counters, and what the record says about it."""

    numbers: dict[str, int]
    charged: int
    estimated: bool = False
    estimate_reason: str = ""


def request_bound(body: PreparedBody, completion_ceiling: int = DEFAULT_COMPLETION_CEILING) -> int:
    """The most a request can use as far as the gateway knows before the answer: the prompt estimate plus its
    completion limit (else `completion_ceiling`) for each completion it asks for. What a token limit reserves
    and what an unreadable answer is charged."""
    completion = (body.max_tokens or completion_ceiling) * body.choices
    return min(body.prompt_estimate + completion, MAX_TOKENS)


def completion_ceiling(model_ceiling: int | None, default: int = DEFAULT_COMPLETION_CEILING) -> int:
    """The completion bound of a request that states none: the model's `maxCompletionTokens`, else `default`."""
    return model_ceiling if model_ceiling is not None else default


def charge_for(status: int, usage: Any, body: PreparedBody, termination: str, *,
               completion_ceiling: int = DEFAULT_COMPLETION_CEILING) -> Charge:
    """The tokens to charge for a request (see the module docstring for the estimate). Usage with a malformed
    count is unreadable: a served answer is charged the larger of the estimate and what could be read."""
    numbers, malformed = _read_usage(usage)
    read = numbers.get("total_tokens", 0)
    if read > 0 and not malformed:
        if _without_input(usage):  # e.g. an Anthropic-style `message_delta`: output tokens only
            numbers = {**numbers, "input_tokens": body.prompt_estimate, "total_tokens": read + body.prompt_estimate}
            return Charge(numbers, numbers["total_tokens"], True, "usage without input tokens")
        return Charge(numbers, read)
    if not 200 <= status < 300:
        return Charge(numbers, read)
    estimate = max(2, request_bound(body, completion_ceiling))
    if malformed:
        reason = f"usage malformed in the answer ({', '.join(malformed)})"
    elif termination == "complete":
        reason = "usage missing from the answer"
    else:
        reason = f"usage unreadable ({termination})"
    return Charge(numbers, max(estimate, read), True, reason)

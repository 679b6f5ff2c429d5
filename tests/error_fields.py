"""Reading maas-api's error bodies in tests whatever envelope the endpoint answers in (`maasapi.errors`: the
API-key endpoints answer the reference's `{"error": "<message>", "code"}`, the others `{"error": {...}}`); the
envelopes themselves are pinned by `tests/compat/test_keys.py`."""

from __future__ import annotations

import httpx

from maasctl.contract.errors import maas_api_error_fields


def error_code(response: httpx.Response) -> str:
    return maas_api_error_fields(response.json())[0]


def error_message(response: httpx.Response) -> str:
    return maas_api_error_fields(response.json())[1]

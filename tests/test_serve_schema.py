"""The server against its own OpenAPI document, as a fuzzer sees it (schemathesis, every
check): schema-valid requests are answered 201, schema-invalid ones 4xx, every answer is
documented (status, content type, body), the key is an API-key security scheme that is
enforced, and nothing is a 500."""

import pytest

pytest.importorskip("fastapi")     # the dev extra installs the server and schemathesis
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402

from vte.cluster.decice.app import API_KEY_HEADER, create_app  # noqa: E402
from vte.cluster.decice.place import make_placer  # noqa: E402

KEY = "fuzz-key"
_placer, _name = make_placer("first_fit")
APP = create_app(_placer, _name, api_key=KEY)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


def test_the_document_declares_the_key_and_every_error():
    doc = APP.openapi()
    assert doc["components"]["securitySchemes"]["APIKeyHeader"] == {
        "type": "apiKey", "in": "header", "name": API_KEY_HEADER,
        "description": "the server's key (`--api-key-env`)"}
    responses = doc["paths"]["/schedule"]["post"]["responses"]
    assert {"201", "403", "408", "413", "422", "500", "503"} <= set(responses)
    assert responses["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"}


@schema.parametrize()
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@pytest.mark.slow   # 60 generated requests against the whole API
def test_a_fuzzer_finds_nothing(case):
    case.call_and_validate(headers={API_KEY_HEADER: KEY})

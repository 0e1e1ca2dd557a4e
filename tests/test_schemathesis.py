"""Schemathesis against a real cao-server: generated requests (valid and invalid) for every
operation of the served /openapi.json, asserting no 5xx, no status the operation does not
document, and no response body outside its documented schema.

Deterministic and bounded: hypothesis is derandomized (a fixed seed per operation, no example
database) and each operation gets EXAMPLES requests, a few hundred in all. A live mock_cli
terminal, its session and a completed workflow run are there, and some examples of an
operation with such an id in its path aim at them; some examples of the create routes name a
real profile and provider, so that generated paths, models and tool lists reach a real spawn.
Operations that delete or end things run last.
Streaming: `GET /events` is excluded (an SSE stream that only ends when the client leaves).
The workflow events route stays in, SSE form included: the one run there has completed and
nothing can resume it, so every follow ends at once; every request also has a client timeout.
Not generated: requests whose line and headers exceed 16 KiB. The HTTP server (uvicorn's h11)
refuses such a request head before cao sees it, with a plain-text 400 or a reset connection;
long query values (a 4096-character path, a `?message=` text) reach that limit once
percent-encoded, so they belong in JSON bodies.
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from conftest import CaoServer
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

EXAMPLES = 12
REQUEST_TIMEOUT_S = 30
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
STREAMING = {("GET", "/events")}
# h11's limit on a request's line and headers (DEFAULT_MAX_INCOMPLETE_EVENT_SIZE), less a margin.
MAX_REQUEST_HEAD = 16 * 1024 - 512


def _operations() -> list[tuple[str, str]]:
    """Every operation of the app's OpenAPI document, known at collection time (building the
    app does no I/O); test_every_served_operation_is_tested checks the served one is the same."""
    from cli_agent_orchestrator.api.app import create_app
    from cli_agent_orchestrator.settings import Settings

    spec = create_app(Settings.from_env()).openapi()
    return sorted((method.upper(), path) for path, item in spec["paths"].items() for method in item)


def _destroys(operation: tuple[str, str]) -> bool:
    """Deletes or ends things: run these last, so the live terminal serves the others."""
    method, path = operation
    return method == "DELETE" or path.endswith("/exit")


def _params() -> list:
    out = []
    for method, path in sorted(_operations(), key=lambda op: (_destroys(op), op)):
        if (method, path) in STREAMING:
            continue
        out.append(pytest.param(method, path, id=f"{method} {path}"))
    return out


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    srv = CaoServer(tmp_path_factory.mktemp("schemathesis") / "home").start()
    srv.term = srv.create_session()
    (srv.home / "workflows").mkdir(exist_ok=True)
    (srv.home / "workflows" / "instant.py").write_text("print('CAO_WORKFLOW_OUTPUT:1')\n")
    run = srv.client.post("/workflows/runs", json={"name_or_path": "instant"})
    assert run.status_code == 200 and run.json()["state"] == "completed", run.text
    srv.run_id = run.json()["run_id"]
    # An explicit default config: no schemathesis.toml from the working directory changes the run.
    srv.schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json", config=schemathesis.Config())
    srv.http = requests.Session()
    try:
        yield srv
    finally:
        srv.http.close()
        srv.cleanup()


def _strategy(operation, live: dict[str, str]):
    modes = [operation.as_strategy(GenerationMode.POSITIVE)]
    if len(operation.path_parameters) + len(operation.query) + len(operation.headers) + len(operation.body):
        modes.append(operation.as_strategy(GenerationMode.NEGATIVE))  # else there is nothing to get wrong
    names = {p.name for p in operation.path_parameters}
    pinned = {name: value for name, value in live.items() if name in names} or None
    if pinned:
        modes.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=pinned))
    if "agent_profile" in {p.name for p in operation.query}:
        modes.append(
            operation.as_strategy(
                GenerationMode.POSITIVE,
                path_parameters=pinned,
                query={"agent_profile": "developer", "provider": "mock_cli"},
            )
        )
    return st.one_of(modes)


@pytest.mark.parametrize("method,path", _params())
def test_operation_answers_within_its_documented_schema(api, method, path):
    operation = api.schema[path][method]
    live = {
        "terminal_id": api.term["id"],
        "receiver_id": api.term["id"],
        "session_name": api.term["session_name"],
        "run_id": api.run_id,
        "name": "instant",
    }

    @given(case=_strategy(operation, live))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        assume(_head_size(case, api.url) <= MAX_REQUEST_HEAD)
        case.call_and_validate(base_url=api.url, session=api.http, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)

    check()


def _head_size(case, base_url: str) -> int:
    """Bytes of the request line and headers this case will send."""
    kwargs = case.as_transport_kwargs(base_url=base_url)
    prepared = requests.Request(
        method=kwargs["method"], url=kwargs["url"], params=kwargs.get("params"), headers=kwargs.get("headers")
    ).prepare()
    return len(prepared.url) + 32 + sum(len(k) + len(str(v)) + 4 for k, v in prepared.headers.items())


def test_every_served_operation_is_tested(api):
    paths = api.client.get("/openapi.json").json()["paths"]
    assert sorted((method.upper(), path) for path, item in paths.items() for method in item) == _operations()

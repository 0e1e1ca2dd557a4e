"""Schemathesis against a real cao-server: generated requests (valid and invalid) for every
operation of the served /openapi.json, with schemathesis's checks that the API is what its
document says: no 5xx, no status, content type, header or body the operation does not
document, schema-violating requests refused (4xx) and schema-valid ones accepted; and every
method a path does not have answered 405 with an `Allow` that names exactly the path's methods.

Deterministic and bounded: hypothesis is derandomized (a fixed seed per operation, no example
database) and each operation gets EXAMPLES requests, a few hundred in all. A live mock_cli
terminal, its session and a completed workflow run are there, and some examples of an
operation with such an id in its path aim at them; some examples of the create routes name a
real profile and provider, so that generated paths, models and tool lists reach a real spawn.
Operations that delete or end things run last.
Streaming: `GET /events` and `GET /ui/events` are excluded (SSE streams that only end when the
client leaves; test_web_api.py reads the board's).
The workflow events route stays in, SSE form included: the one run there has completed and
nothing can resume it, so every follow ends at once; every request also has a client timeout.

What schema-valid data may still be refused, each documented in the operation's own 400
(`refused` in api/schemas.py): facts only the server can judge — a provider that is not
installed, a file that is not there, a cron expression, text given in neither the body nor
the older query form (REFUSED_BY_SERVICE). A body over CAO_MAX_BODY_BYTES is a 413 whatever it
holds: the limit is in bytes and decided before a byte is parsed (documented for every route).
A request whose line and headers exceed 16 KiB is answered 431 by the HTTP layer before cao
sees it (documented for every route, like 413): long query values (a 4096-character path, a
`?message=` text) reach that limit once percent-encoded, so they belong in JSON bodies.
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from cao_support import CaoServer
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 12
REQUEST_TIMEOUT_S = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    positive_data_acceptance,
]
STREAMING = {("GET", "/events"), ("GET", "/ui/events")}
# Operations whose schema-valid requests the server may still refuse with 400: why (the same
# words are in the operation's documented 400).
REFUSED_BY_SERVICE = {
    "POST /sessions": "the provider, directory, model and tools are judged by the spawner",
    "POST /sessions/{session_name}/terminals": "as POST /sessions; initial_message needs defer_init=true",
    "POST /terminals/run-step": "the provider, directory, model and tools are judged by the spawner",
    "POST /terminals/{terminal_id}/input": "the message in the body or in ?message=: neither is required alone",
    "POST /terminals/{terminal_id}/key": "the key in the body or in ?key=: neither is required alone",
    "POST /terminals/{terminal_id}/inbox/messages": "the message in the body or in ?message=",
    "POST /agents/profiles/install": "the profile must exist, the URL be allowed and fetchable",
    "POST /skills": "the URL must be allowed and fetchable, the file a SKILL.md",
    "POST /flows": "cron expressions, time zones, profiles, scripts and files are judged by the flow parser",
    "POST /hosts": "an ssh target's host must be a DNS name or an IP address, its port 1-65535",
    "POST /workflows/runs": "a path must name a workflow file in the workflow directory",
    "POST /workflows/runs:submit": "a path must name a workflow file in the workflow directory",
    "POST /workflows/validate": "a path must name a workflow file in the workflow directory",
    "GET /ui/launch-preview": "the tools must be known to the tool policy, the profile must load",
    "POST /memories/import": "each line must be a memory as GET /memories/export writes it",
}
GENERIC_400 = "Bad input (a one-line reason), or a Host header that is not allowed"


def _config() -> schemathesis.Config:
    """Schemathesis's expected statuses, plus the 413 of the body limit, plus REFUSED_BY_SERVICE's 400s."""
    # 431: a request line and headers over 16 KiB, refused below the app (documented for every route).
    negative = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "431", "5xx"]
    positive = ["2xx", "3xx", "401", "403", "404", "409", "413", "429", "431", "5xx"]
    return schemathesis.Config.from_dict(
        {
            "checks": {
                "negative_data_rejection": {"expected-statuses": negative},
                "positive_data_acceptance": {"expected-statuses": positive},
            },
            "operations": [
                {
                    "include-name": name,
                    "checks": {"positive_data_acceptance": {"expected-statuses": [*positive, "400"]}},
                }
                for name in REFUSED_BY_SERVICE
            ],
        }
    )


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
    # An explicit config: no schemathesis.toml from the working directory changes the run.
    srv.schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json", config=_config())
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
    live = _live(api)

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
        case.call_and_validate(base_url=api.url, session=api.http, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)

    check()


def test_every_served_operation_is_tested(api):
    paths = api.client.get("/openapi.json").json()["paths"]
    assert sorted((method.upper(), path) for path, item in paths.items() for method in item) == _operations()


def _live(api) -> dict[str, str]:
    return {
        "terminal_id": api.term["id"],
        "session_name": api.term["session_name"],
        "run_id": api.run_id,
        "name": "instant",
    }


def test_refused_schema_valid_requests_are_documented_where_they_are_allowed(api):
    """Every operation allowed a 400 for schema-valid data says in its own 400 what is refused."""
    ops = {
        f"{m.upper()} {p}": op
        for p, item in api.client.get("/openapi.json").json()["paths"].items()
        for m, op in item.items()
    }
    for name in REFUSED_BY_SERVICE:
        assert ops[name]["responses"]["400"]["description"] != GENERIC_400, name


METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD")


def test_a_method_a_path_does_not_have_is_405_with_every_method_it_has_in_allow(api):
    paths = api.client.get("/openapi.json").json()["paths"]
    live = _live(api)
    for template, item in paths.items():
        path = template.format_map({name: live.get(name, "x") for name in _placeholders(template)})
        documented = {method.upper() for method in item}
        for method in sorted(set(METHODS) - documented):
            resp = api.http.request(method, f"{api.url}{path}", timeout=REQUEST_TIMEOUT_S)
            assert resp.status_code == 405, (method, template, resp.status_code, resp.text[:200])
            allow = {m.strip() for m in resp.headers.get("allow", "").split(",") if m.strip()}
            assert allow == documented, (method, template, allow)
            assert resp.headers["content-type"] == "application/json", (method, template)


def _placeholders(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]

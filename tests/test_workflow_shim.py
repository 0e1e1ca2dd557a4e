"""The cao_workflow shim against a small stdlib fake of POST /terminals/run-step.

The fake records every request body, so each test can check what went over the wire —
and, as much, what never did (refused calls, retries)."""

from __future__ import annotations

import ast
import io
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import cao_workflow
from cao_workflow import (
    ShimError,
    ShimHTTPError,
    ShimIdentityError,
    ShimTransportError,
    StepHandle,
    _steps,
    emit_output,
    get_inputs,
    run_step,
    step,
)

SHIM_DIR = Path(cao_workflow.__file__).parent
IDENTITY = ("CAO_WORKFLOW_RUN_ID", "CAO_WORKFLOW_GENERATION", "CAO_API_BASE_URL")

Reply = tuple[int, str]


def completed(body: dict[str, Any]) -> Reply:
    key = body["env_vars"]["CAO_WORKFLOW_STEP_ID"]
    return 200, json.dumps(
        {
            "terminal_id": f"term-{key}",
            "last_message": f"done: {body['prompt']}",
            "status": "completed",
            "replayed": False,
            "elapsed": 0.1,
        }
    )


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # the default 5 drops concurrent connects (1 s SYN retry)


class FakeRunStep:
    """A ThreadingHTTPServer that records run-step requests and answers via `respond`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.respond: Callable[[dict[str, Any]], Reply] = completed
        self.release = threading.Event()  # set at teardown so held requests end
        fake = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def do_POST(self) -> None:  # noqa: N802 — http.server's naming
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw)
                with fake.lock:
                    fake.requests.append(
                        {"path": self.path, "body": body, "content_type": self.headers["Content-Type"]}
                    )
                status, text = fake.respond(body)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]


@pytest.fixture
def fake() -> FakeRunStep:
    server = FakeRunStep()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def fresh_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    # The counter is per process by design; each test starts at call-1.
    monkeypatch.setattr(_steps, "_counter", _steps._StepCounter())


@pytest.fixture
def identity(monkeypatch: pytest.MonkeyPatch, fake: FakeRunStep) -> FakeRunStep:
    monkeypatch.setenv("CAO_WORKFLOW_RUN_ID", "run-0123456789abcdef")
    monkeypatch.setenv("CAO_WORKFLOW_GENERATION", "3")
    monkeypatch.setenv("CAO_API_BASE_URL", fake.url + "/")  # a trailing slash is tolerated
    return fake


@pytest.fixture
def no_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in IDENTITY:
        monkeypatch.delenv(name, raising=False)


# --- the public surface ------------------------------------------------------------


def test_all_is_pinned() -> None:
    assert cao_workflow.__all__ == [
        "step",
        "run_step",
        "emit_output",
        "get_inputs",
        "StepHandle",
        "ShimError",
        "ShimIdentityError",
        "ShimTransportError",
        "ShimHTTPError",
    ]
    for name in cao_workflow.__all__:
        assert getattr(cao_workflow, name) is not None


def test_exception_tree() -> None:
    for cls in (ShimIdentityError, ShimTransportError, ShimHTTPError):
        assert issubclass(cls, ShimError)
    error = ShimHTTPError(409, '{"detail": "x"}')
    assert (error.status, error.body, str(error)) == (409, '{"detail": "x"}', "run-step returned HTTP 409")


def test_import_has_no_side_effects_and_pulls_in_no_server_code(tmp_path: Path) -> None:
    code = "import sys, cao_workflow; print(sorted(m for m in sys.modules if m.startswith('cli_agent_orchestrator')))"
    env = {"PATH": os.environ.get("PATH", "")}  # no identity, no inputs: import must not care
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[]\n" and proc.stderr == ""


def test_shim_imports_only_the_standard_library() -> None:
    for source in SHIM_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for module in modules:
                assert module.split(".")[0] in sys.stdlib_module_names, f"{source.name}: {module}"


# --- recovery policy -------------------------------------------------------------


def test_step_without_recovery_is_a_plain_type_error(identity: FakeRunStep) -> None:
    with pytest.raises(TypeError) as info:
        step("kiro_cli", "reviewer", "review")  # type: ignore[call-arg]
    assert not isinstance(info.value, ShimError)
    assert identity.requests == []


@pytest.mark.parametrize("bad", ["idempotant", "Idempotent", "MANUAL", "", None, 1])
def test_bad_recovery_is_refused_before_env_and_http(bad: object, no_identity: None) -> None:
    # no identity in the env at all: the recovery check must come first
    with pytest.raises(ShimError) as info:
        step("kiro_cli", "reviewer", "review", recovery=bad)  # type: ignore[arg-type]
    assert type(info.value) is ShimError
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("policy", ["idempotent", "reconcile", "manual"])
def test_step_sends_its_recovery_policy(identity: FakeRunStep, policy: str) -> None:
    step("kiro_cli", "reviewer", "review", recovery=policy)
    assert identity.bodies[0]["recovery"] == policy


def test_run_step_forwards_recovery_unchecked_and_reports_the_servers_422(identity: FakeRunStep) -> None:
    identity.respond = lambda body: (422, json.dumps({"detail": [{"loc": ["body", "recovery"], "msg": "bad policy"}]}))
    with pytest.raises(ShimHTTPError) as info:
        run_step("kiro_cli", "reviewer", "review", recovery="idempotant")
    assert info.value.status == 422
    assert identity.bodies[0]["recovery"] == "idempotant"


def test_run_step_sends_no_recovery_of_its_own(identity: FakeRunStep) -> None:
    run_step("kiro_cli", "reviewer", "review")
    assert "recovery" not in identity.bodies[0]


# --- refused options ---------------------------------------------------------------


@pytest.mark.parametrize("fn_name", ["step", "run_step"])
def test_reuse_terminal_id_is_refused_naming_the_function(fn_name: str, no_identity: None) -> None:
    call = getattr(cao_workflow, fn_name)
    kwargs = {"recovery": "manual"} if fn_name == "step" else {}
    with pytest.raises(ShimError) as info:
        call("kiro_cli", "reviewer", "review", reuse_terminal_id="abcd1234", **kwargs)
    message = str(info.value)
    assert type(info.value) is ShimError
    assert message.startswith(f"reuse_terminal_id is not supported by {fn_name}()")
    assert "env_vars" in message and "422" in message and "HTTP API directly" in message


def test_env_vars_cannot_override_the_identity_fence(identity: FakeRunStep) -> None:
    with pytest.raises(ShimError, match="env_vars"):
        run_step("kiro_cli", "reviewer", "review", env_vars={"CAO_WORKFLOW_STEP_ID": "other"})
    assert identity.requests == []


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "10", True])
def test_bad_timeout_is_refused_before_http(identity: FakeRunStep, bad: object) -> None:
    with pytest.raises(ShimError, match="timeout"):
        run_step("kiro_cli", "reviewer", "review", timeout=bad)  # type: ignore[arg-type]
    assert identity.requests == []


@pytest.mark.parametrize("bad", ["shard:alpha", "", "x" * 65, "a b", 7])
def test_malformed_step_id_is_refused_before_http(identity: FakeRunStep, bad: object) -> None:
    with pytest.raises(ShimError, match="step_id"):
        run_step("kiro_cli", "reviewer", "review", step_id=bad)  # type: ignore[arg-type]
    assert identity.requests == []


def test_unserialisable_option_is_refused_before_http(identity: FakeRunStep) -> None:
    with pytest.raises(ShimError, match="JSON"):
        run_step("kiro_cli", "reviewer", "review", model=object())
    assert identity.requests == []


# --- identity ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "missing",
    [
        ("CAO_WORKFLOW_RUN_ID",),
        ("CAO_WORKFLOW_GENERATION",),
        ("CAO_API_BASE_URL",),
        ("CAO_WORKFLOW_RUN_ID", "CAO_API_BASE_URL"),
        IDENTITY,
    ],
)
@pytest.mark.parametrize("fn_name", ["step", "run_step"])
def test_missing_identity_names_only_the_missing_variables(
    identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...], fn_name: str
) -> None:
    for name in missing:
        if name == "CAO_WORKFLOW_GENERATION":
            monkeypatch.setenv(name, "")  # empty counts as missing
        else:
            monkeypatch.delenv(name)
    call = getattr(cao_workflow, fn_name)
    with pytest.raises(ShimIdentityError) as info:
        call("kiro_cli", "reviewer", "review", **({"recovery": "manual"} if fn_name == "step" else {}))
    message = str(info.value)
    assert message.startswith(f"{fn_name}():")
    for name in IDENTITY:
        assert (name in message) == (name in missing), message
    for value in ("run-0123456789abcdef", identity.url):  # values are never echoed
        assert value not in message
    assert identity.requests == []


def test_base_url_must_be_http(identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAO_API_BASE_URL", "localhost:9889")
    with pytest.raises(ShimIdentityError, match="CAO_API_BASE_URL"):
        run_step("kiro_cli", "reviewer", "review")


def test_identity_is_read_per_call_not_at_import(identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch) -> None:
    run_step("kiro_cli", "reviewer", "one")
    monkeypatch.setenv("CAO_WORKFLOW_GENERATION", "4")
    run_step("kiro_cli", "reviewer", "two")
    assert [b["env_vars"]["CAO_WORKFLOW_GENERATION"] for b in identity.bodies] == ["3", "4"]


# --- the request ------------------------------------------------------------------


def test_request_body_and_route(identity: FakeRunStep) -> None:
    handle = run_step(
        "kiro_cli",
        "reviewer",
        "review this",
        model="m-1",
        working_directory="/w",
        allowed_tools=["fs_read"],
        use_worktree=False,
        engine="v2",
    )
    request = identity.requests[0]
    assert request["path"] == "/terminals/run-step"
    assert request["content_type"] == "application/json"
    assert request["body"] == {
        "provider": "kiro_cli",
        "agent": "reviewer",
        "prompt": "review this",
        "env_vars": {
            "CAO_WORKFLOW_RUN_ID": "run-0123456789abcdef",
            "CAO_WORKFLOW_GENERATION": "3",
            "CAO_WORKFLOW_STEP_ID": "call-1",
        },
        "model": "m-1",
        "working_directory": "/w",
        "allowed_tools": ["fs_read"],
        "use_worktree": False,
        "engine": "v2",
    }
    assert handle == StepHandle(
        step_id="call-1", terminal_id="term-call-1", output="done: review this", status="completed", replayed=False
    )


def test_timeout_is_sent_as_float_only_when_given(identity: FakeRunStep) -> None:
    step("kiro_cli", "reviewer", "a", recovery="manual", timeout=30)
    step("kiro_cli", "reviewer", "b", recovery="manual")
    first, second = identity.bodies
    assert first["timeout"] == 30.0 and isinstance(first["timeout"], float)
    assert "timeout" not in second


def test_socket_timeout_outlives_the_servers_ready_wait(monkeypatch: pytest.MonkeyPatch, identity: FakeRunStep) -> None:
    seen: list[float] = []
    real_post = _steps.post_json

    def spy(url: str, payload: bytes, socket_timeout: float, fn_name: str) -> tuple[int, str]:
        seen.append(socket_timeout)
        return real_post(url, payload, socket_timeout, fn_name)

    monkeypatch.setattr(_steps, "post_json", spy)
    run_step("kiro_cli", "reviewer", "a")
    run_step("kiro_cli", "reviewer", "b", timeout=10)
    # step timeout (default 600) + 150 s: beyond the server's 120 s ready wait
    assert seen == [750.0, 160.0]
    assert _steps.SOCKET_MARGIN_SECONDS > 120


# --- step keys --------------------------------------------------------------------


def test_default_keys_count_up_and_explicit_ids_are_sent_verbatim(identity: FakeRunStep) -> None:
    keys = [
        run_step("kiro_cli", "reviewer", "a").step_id,
        run_step("kiro_cli", "reviewer", "b", step_id="urgent-branch").step_id,
        step("kiro_cli", "reviewer", "c", recovery="idempotent").step_id,
    ]
    assert keys == ["call-1", "urgent-branch", "call-2"]
    assert [b["env_vars"]["CAO_WORKFLOW_STEP_ID"] for b in identity.bodies] == keys


def test_refused_calls_do_not_use_up_a_key(identity: FakeRunStep) -> None:
    with pytest.raises(ShimError):
        step("kiro_cli", "reviewer", "a", recovery="nope")
    with pytest.raises(ShimError):
        run_step("kiro_cli", "reviewer", "a", reuse_terminal_id="abcd1234")
    assert run_step("kiro_cli", "reviewer", "b").step_id == "call-1"


def test_counter_never_hands_out_a_key_twice_under_threads(identity: FakeRunStep) -> None:
    threads, calls_each = 8, 10
    handles: list[StepHandle] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker() -> None:
        start.wait()
        for _ in range(calls_each):
            handle = run_step("kiro_cli", "reviewer", "shard")
            with lock:
                handles.append(handle)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=30)
    expected = {f"call-{n}" for n in range(1, threads * calls_each + 1)}
    sent = [b["env_vars"]["CAO_WORKFLOW_STEP_ID"] for b in identity.bodies]
    assert len(sent) == len(set(sent)) == threads * calls_each
    assert set(sent) == expected == {h.step_id for h in handles}


# --- answers ----------------------------------------------------------------------


def test_replayed_answer(identity: FakeRunStep) -> None:
    identity.respond = lambda body: (
        200,
        json.dumps({"terminal_id": "gone-1", "last_message": "", "status": "failed", "replayed": True}),
    )
    handle = run_step("kiro_cli", "reviewer", "x")
    assert (handle.replayed, handle.terminal_id, handle.status, handle.output) == (True, "gone-1", "failed", "")


def test_step_handle_is_frozen_and_replayed_defaults_false() -> None:
    handle = StepHandle("k", "t", "out", "completed")
    assert handle.replayed is False
    with pytest.raises(FrozenInstanceError):
        handle.output = "changed"  # type: ignore[misc]


@pytest.mark.parametrize("status", [500, 502, 504, 404, 201])
def test_any_non_200_is_an_http_error_and_is_never_retried(identity: FakeRunStep, status: int) -> None:
    identity.respond = lambda body: (status, '{"detail": "boom"}')
    with pytest.raises(ShimHTTPError) as info:
        run_step("kiro_cli", "reviewer", "x")
    assert (info.value.status, info.value.body) == (status, '{"detail": "boom"}')
    assert str(info.value) == f"run-step returned HTTP {status}"
    assert len(identity.requests) == 1


def test_a_halt_is_a_409_with_the_servers_detail_in_the_traceback(identity: FakeRunStep) -> None:
    detail = {
        "message": "step 'x' [policy_manual]: run 'r' step 'x': halted",
        "kind": "decision_required",
        "step_id": "x",
        "rule": "policy_manual",
    }
    identity.respond = lambda body: (409, json.dumps({"detail": detail}))
    with pytest.raises(ShimHTTPError) as info:
        step("kiro_cli", "reviewer", "x", recovery="manual", step_id="x")
    assert info.value.status == 409
    assert json.loads(info.value.body)["detail"]["kind"] == "decision_required"
    assert any("[decision_required]" in note for note in info.value.__notes__)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"terminal_id": "t", "last_message": "m", "status": "completed"}',  # no replayed
        '{"terminal_id": "t", "last_message": null, "status": "completed", "replayed": false}',
        '{"terminal_id": "t", "last_message": "m", "status": "completed", "replayed": "no"}',
    ],
)
def test_a_200_without_a_usable_result_is_an_http_error(identity: FakeRunStep, text: str) -> None:
    identity.respond = lambda body: (200, text)
    with pytest.raises(ShimHTTPError) as info:
        run_step("kiro_cli", "reviewer", "x")
    assert (info.value.status, info.value.body) == (200, text)
    assert len(identity.requests) == 1


def test_http_error_survives_pickling() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(ShimHTTPError(409, "body")))
    assert (error.status, error.body, str(error)) == (409, "body", "run-step returned HTTP 409")


def test_socket_timeout_is_a_transport_error_and_is_not_retried(
    identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hold(body: dict[str, Any]) -> Reply:
        identity.release.wait(10)
        return completed(body)

    identity.respond = hold
    monkeypatch.setattr(_steps, "SOCKET_MARGIN_SECONDS", 0.0)
    with pytest.raises(ShimTransportError) as info:
        run_step("kiro_cli", "reviewer", "slow", timeout=0.3)
    assert "socket timeout" in str(info.value)
    assert info.value.__cause__ is not None
    assert len(identity.requests) == 1


def test_dropped_connection_is_a_transport_error_and_is_not_retried(
    identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []
    stop = threading.Event()

    def accept_and_drop() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.recv(65536)
            conn.close()

    thread = threading.Thread(target=accept_and_drop, daemon=True)
    thread.start()
    monkeypatch.setenv("CAO_API_BASE_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        with pytest.raises(ShimTransportError) as info:
            run_step("kiro_cli", "reviewer", "x")
        assert "not retried" in str(info.value)
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert accepted == [1]


def test_refused_connection_is_a_transport_error(identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again when the block ends: nothing listens
    monkeypatch.setenv("CAO_API_BASE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(ShimTransportError):
        run_step("kiro_cli", "reviewer", "x")


def test_proxy_settings_are_ignored(identity: FakeRunStep, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert run_step("kiro_cli", "reviewer", "x").status == "completed"


# --- emit_output / get_inputs -------------------------------------------------------


def test_emit_output_prints_one_compact_sentinel_line(capsys: pytest.CaptureFixture[str]) -> None:
    emit_output({"reviewed": True, "notes": "line one\nline two", "n": [1, 2]})
    out = capsys.readouterr().out
    assert out == 'CAO_WORKFLOW_OUTPUT:{"reviewed":true,"notes":"line one\\nline two","n":[1,2]}\n'


def test_emit_output_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Recorder(io.StringIO):
        flushes = 0

        def flush(self) -> None:
            Recorder.flushes += 1

    stream = Recorder()
    monkeypatch.setattr(sys, "stdout", stream)
    emit_output(None)
    assert stream.getvalue() == "CAO_WORKFLOW_OUTPUT:null\n" and Recorder.flushes >= 1


@pytest.mark.parametrize("value", [object(), float("nan")])
def test_emit_output_refuses_what_is_not_json(value: object, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ShimError):
        emit_output(value)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "raw, expected", [(None, {}), ("", {}), ("  ", {}), ('{"n": 3, "tag": "x"}', {"n": 3, "tag": "x"})]
)
def test_get_inputs(monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: dict) -> None:
    if raw is None:
        monkeypatch.delenv("CAO_WORKFLOW_INPUTS", raising=False)
    else:
        monkeypatch.setenv("CAO_WORKFLOW_INPUTS", raw)
    assert get_inputs() == expected


@pytest.mark.parametrize("raw", ["{not json", "[1]", '"text"', "3"])
def test_get_inputs_refuses_bad_json_and_non_objects(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("CAO_WORKFLOW_INPUTS", raw)
    with pytest.raises(ShimError, match="CAO_WORKFLOW_INPUTS"):
        get_inputs()

"""The operations tools: what an agent outside cao uses to drive it, independent of MCP plumbing.

Every method returns `{"success": True, ...}` or `{"success": False, "message": "<line>"}` and
never raises (a raised error reaches the calling agent as an opaque tool error). Terminal ids,
session, profile and flow names are checked here before they go into a URL, so a typo is
reported as such and never becomes a different route.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from ..actor import CLIENT_HEADER
from ..auth_token import auth_headers
from ..clients.aio import ApiResponse, CaoApi
from ..models import SAFE_NAME_RE, SESSION_PREFIX
from ..settings import Settings
from .tools import bad_host, bad_terminal_id
from .workflow_tools import bad_id, guarded_by

Result = dict[str, Any]

# Who this client is to cao-server: the inbox sender of `send_session_message`, and the client
# name (X-CAO-Client) the audit log credits what these tools cause to.
OPS_SENDER_ID = "cao-ops-mcp"
OUTPUT_MODES = ("full", "last")
# On top of the CLI's start-up limit, for a blocking launch's answer to arrive.
LAUNCH_HTTP_MARGIN_S = 60.0
# A call that stops or starts agents (a session's shutdown exits and snapshots each of them;
# a flow run may start one): longer than an ordinary call.
SLOW_CALL_TIMEOUT_S = 120.0
# FastAPI's own detail for a path no route matches: tells "no such route" from "no such flow".
NO_ROUTE_DETAIL = "Not Found"


@dataclass(frozen=True)
class OpsConfig:
    base_url: str
    request_timeout: float  # one ordinary call (CAO_MCP_REQUEST_TIMEOUT)
    launch_timeout: float  # a launch that waits until the agent's CLI is ready
    headers: dict[str, str]  # every request's: the token where it can be read, and our client name

    @classmethod
    def from_env(cls) -> OpsConfig:
        settings = Settings.from_env()
        return cls(
            base_url=settings.base_url,
            request_timeout=settings.mcp_request_timeout,
            launch_timeout=settings.provider_init_timeout + LAUNCH_HTTP_MARGIN_S,
            headers={**auth_headers(settings.home_dir, settings.client_auth_token), CLIENT_HEADER: OPS_SENDER_ID},
        )


def fail(message: str, **extra: Any) -> Result:
    return {"success": False, "message": message, **extra}


guarded = guarded_by(fail)


def http_failure(resp: ApiResponse, doing: str) -> Result:
    return fail(f"{doing} failed: {resp.error or 'unexpected answer from cao-server'}")


def session_name_or_error(name: Any) -> tuple[str, str | None]:
    """The name as cao-server will use it (`cao-` prepended when missing), or an error."""
    if not isinstance(name, str) or not name:
        return "", "session_name must be a non-empty string"
    full = name if name.startswith(SESSION_PREFIX) else SESSION_PREFIX + name
    if not SAFE_NAME_RE.match(full):
        return "", (
            f"invalid session_name {name!r}: use up to 64 of [A-Za-z0-9_-] (with the cao- prefix), "
            "starting with a letter, digit or underscore"
        )
    return full, None


def bad_profile_name(name: Any, what: str = "agent_profile") -> str | None:
    if not isinstance(name, str) or not SAFE_NAME_RE.match(name):
        return f"invalid {what} {name!r}: use 1-64 of [A-Za-z0-9_-], not starting with '-'"
    return None


def bad_tool_list(tools: Any) -> str | None:
    if tools is None:
        return None
    # The list travels as one comma-separated query parameter.
    if not isinstance(tools, list) or not all(isinstance(t, str) and t.strip() and "," not in t for t in tools):
        return "allowed_tools must be a list of non-empty tool names without commas"
    return None


class OpsTools:
    def __init__(self, config: OpsConfig, api: CaoApi | None = None):
        self.config = config
        self.api = api or CaoApi(config.base_url, config.request_timeout, config.headers, reconnect_s=0)

    def _slow_call_timeout(self) -> float:
        return max(self.config.request_timeout, self.config.launch_timeout, SLOW_CALL_TIMEOUT_S)

    async def _read(self, path: str, doing: str, list_key: str | None = None) -> Result:
        """GET `path`: an object answer spread into the result, a list one under `list_key`."""
        resp = await self.api.get(path)
        body = resp.body
        if resp.ok and list_key and isinstance(body, list):
            return {"success": True, list_key: body}
        if resp.ok and not list_key and isinstance(body, dict):
            return {"success": True, **body}
        return http_failure(resp, doing)

    # --- profiles -----------------------------------------------------------------------
    @guarded
    async def list_profiles(self) -> Result:
        return await self._read("/agents/profiles", "listing profiles", "profiles")

    @guarded
    async def get_profile_details(self, name: str) -> Result:
        if error := bad_profile_name(name, "profile name"):
            return fail(error)
        return await self._read(f"/agents/profiles/{name}", f"reading profile {name!r}")

    @guarded
    async def install_profile(
        self, source: str, provider: str | None = None, env_vars: dict[str, str] | None = None
    ) -> Result:
        if not isinstance(source, str) or not source.strip():
            return fail("source must be a profile name or an https URL")
        if env_vars is not None and not (
            isinstance(env_vars, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items())
        ):
            return fail("env_vars must map variable names to string values")
        body: dict[str, Any] = {"source": source.strip()}
        if provider is not None:
            body["provider"] = provider
        if env_vars:
            body["env_vars"] = env_vars
        resp = await self.api.post("/agents/profiles/install", json=body)
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp, f"installing {source.strip()!r}")
        return {"success": True, **resp.body}

    # --- sessions -----------------------------------------------------------------------
    @guarded
    async def launch_session(
        self,
        agent_profile: str,
        provider: str | None = None,
        session_name: str | None = None,
        working_directory: str | None = None,
        allowed_tools: list[str] | None = None,
        model: str | None = None,
        initial_message: str | None = None,
        host: str | None = None,
        env_vars: dict[str, str] | None = None,
    ) -> Result:
        if error := bad_profile_name(agent_profile) or bad_tool_list(allowed_tools) or bad_host(host):
            return fail(error)
        if initial_message is not None and (not isinstance(initial_message, str) or not initial_message.strip()):
            return fail("initial_message must not be empty (leave it out to start the agent idle)")
        # Named here, not by the server, so a launch whose answer is lost can still be found.
        if session_name is None:
            name = SESSION_PREFIX + secrets.token_hex(4)
        else:
            name, error = session_name_or_error(session_name)
            if error:
                return fail(error)
        params = {
            "agent_profile": agent_profile,
            "provider": provider,
            "session_name": name,
            "working_directory": working_directory,
            "allowed_tools": ",".join(t.strip() for t in allowed_tools) if allowed_tools else None,
            "model": model,
            "host": host,
        }
        if env_vars is not None and not (
            isinstance(env_vars, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items())
        ):
            return fail("env_vars must map variable names to text values")
        body: dict[str, Any] | None = {"initial_message": initial_message} if initial_message is not None else None
        if env_vars:
            body = {**(body or {}), "env_vars": env_vars}
        # With an initial message the server answers at once; without, when the CLI is ready.
        timeout = self.config.request_timeout if initial_message is not None else self.config.launch_timeout
        resp = await self.api.post("/sessions", params=params, json=body, timeout=timeout)
        if resp.timed_out:
            return fail(
                f"Launch of {agent_profile} gave no answer within {timeout:.0f}s; the session may "
                f"still be starting: check get_session_info({name!r})",
                session_name=name,
                terminal_id=None,
            )
        if not (resp.ok and isinstance(resp.body, dict)):
            return fail(f"Launch failed: {resp.error or 'unexpected answer'}", session_name=name, terminal_id=None)
        term = resp.body
        then = (
            "the initial message is delivered once the agent is ready"
            if initial_message is not None
            else "the agent is ready for send_session_message"
        )
        return {
            "success": True,
            "message": f"Launched {agent_profile} ({term.get('provider')}) in session "
            f"{term.get('session_name')}, terminal {term.get('id')}; {then}.",
            "session_name": term.get("session_name", name),
            "terminal_id": term.get("id"),
            "provider": term.get("provider"),
            "status": term.get("status"),
            "host": term.get("host"),  # null: cao-server's own machine
        }

    @guarded
    async def list_sessions(self) -> Result:
        return await self._read("/sessions", "listing sessions", "sessions")

    @guarded
    async def get_session_info(self, session_name: str) -> Result:
        name, error = session_name_or_error(session_name)
        if error:
            return fail(error)
        return await self._read(f"/sessions/{name}", f"reading session {name}")

    @guarded
    async def shutdown_session(self, session_name: str) -> Result:
        name, error = session_name_or_error(session_name)
        if error:
            return fail(error)
        resp = await self.api.delete(f"/sessions/{name}", timeout=self._slow_call_timeout())
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp, f"shutting down session {name}")
        answer = resp.body
        problems = answer.get("errors") or []
        text = f"Session {name} shut down." if not problems else f"Session {name} shut down with errors: {problems}"
        return {"message": text, **answer, "success": bool(answer.get("success", not problems))}

    # --- talking to agents ----------------------------------------------------------------
    async def _target(self, terminal_id: str | None, session_name: str | None) -> tuple[str, Result]:
        """The terminal a message or read is for: the given id, else the session's conductor
        (its first terminal). Returns (id, extra result fields), or ("", failure)."""
        if terminal_id is not None and session_name is not None:
            return "", fail("give terminal_id or session_name, not both")
        if terminal_id is not None:
            if error := bad_terminal_id(terminal_id):
                return "", fail(error)
            return terminal_id, {}
        if session_name is None:
            return "", fail("give terminal_id, or session_name to use the session's first (conductor) terminal")
        name, error = session_name_or_error(session_name)
        if error:
            return "", fail(error)
        resp = await self.api.get(f"/sessions/{name}")
        if not (resp.ok and isinstance(resp.body, dict)):
            return "", http_failure(resp, f"reading session {name}")
        ids = [str(t["id"]) for t in resp.body.get("terminals") or [] if isinstance(t, dict) and t.get("id")]
        if not ids:
            return "", fail(f"session {name} has no agent terminals")
        return ids[0], {"session_name": name, "terminals": ids}

    @guarded
    async def send_session_message(
        self, message: str, terminal_id: str | None = None, session_name: str | None = None
    ) -> Result:
        if not isinstance(message, str) or not message.strip():
            return fail("message must not be empty")
        target, extra = await self._target(terminal_id, session_name)
        if not target:
            return extra
        # The inbox, not raw input: it waits until the agent is ready and delivers exactly once.
        resp = await self.api.post(
            f"/terminals/{target}/inbox/messages", json={"sender_id": OPS_SENDER_ID, "message": message}
        )
        if not (resp.ok and isinstance(resp.body, dict)):
            return http_failure(resp, f"sending to terminal {target}")
        return {
            "success": True,
            "message": f"Message queued for terminal {target}; it is typed in as soon as the agent is ready.",
            "terminal_id": target,
            "message_id": resp.body.get("message_id"),
            **{k: v for k, v in extra.items() if k == "session_name"},
        }

    @guarded
    async def read_session_output(
        self,
        terminal_id: str | None = None,
        session_name: str | None = None,
        mode: str = "full",
        max_chars: int | None = None,
    ) -> Result:
        if mode not in OUTPUT_MODES:
            return fail(f"mode must be 'full' or 'last', got {mode!r}")
        if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1):
            return fail(f"max_chars must be a positive integer, got {max_chars!r}")
        target, extra = await self._target(terminal_id, session_name)
        if not target:
            return extra
        read = await self._output(target, mode)
        if not read["success"]:
            return read
        output = read["output"]
        total = len(output)
        truncated = False
        if max_chars is not None and total > max_chars:  # the end is the news: keep the latest characters
            output, truncated = output[-max_chars:], True
        return {
            "success": True,
            "terminal_id": target,
            "mode": mode,
            "output": output,
            "truncated": truncated,
            "total_chars": total,
            **extra,
        }

    # --- terminals ------------------------------------------------------------------------
    @guarded
    async def get_terminal_status(self, terminal_id: str) -> Result:
        if error := bad_terminal_id(terminal_id):
            return fail(error)
        return await self._read(f"/terminals/{terminal_id}", f"reading terminal {terminal_id}")

    @guarded
    async def get_terminal_output(self, terminal_id: str, mode: str = "last") -> Result:
        if error := bad_terminal_id(terminal_id):
            return fail(error)
        if mode not in OUTPUT_MODES:
            return fail(f"mode must be 'full' or 'last', got {mode!r}")
        return await self._output(terminal_id, mode)

    async def _output(self, terminal_id: str, mode: str) -> Result:
        resp = await self.api.get(f"/terminals/{terminal_id}/output", params={"mode": mode})
        if not (resp.ok and isinstance(resp.body, dict) and isinstance(resp.body.get("output"), str)):
            return http_failure(resp, f"reading terminal {terminal_id}'s output")
        return {"success": True, "terminal_id": terminal_id, "mode": mode, "output": resp.body["output"]}

    # --- flows ----------------------------------------------------------------------------
    def _flow_failure(self, resp: ApiResponse, doing: str) -> Result:
        if resp.status == 404 and resp.detail == NO_ROUTE_DETAIL:
            return fail(f"{doing} failed: this cao-server has no flow routes (404 Not Found); update cao-server")
        return http_failure(resp, doing)

    @guarded
    async def list_flows(self) -> Result:
        resp = await self.api.get("/flows")
        if not (resp.ok and isinstance(resp.body, list)):
            return self._flow_failure(resp, "listing flows")
        return {"success": True, "flows": resp.body}

    @guarded
    async def run_flow(self, name: str) -> Result:
        if error := bad_id(name, "flow name"):
            return fail(error)
        resp = await self.api.post(f"/flows/{name}/run", timeout=self._slow_call_timeout())
        if not (resp.ok and isinstance(resp.body, dict)):
            return self._flow_failure(resp, f"running flow {name!r}")
        executed = bool(resp.body.get("executed"))
        answered = resp.body.get("run")
        run: dict[str, Any] = answered if isinstance(answered, dict) else {}
        state, reason = run.get("state") or "skipped", run.get("reason")
        if executed:
            session = run.get("session_name")
            text = (
                f"Flow {name} is starting its agent in session {session} with the prompt; "
                f"read the answer with read_session_output(session_name={session!r})."
            )
        else:
            text = f"Flow {name} did not start its agent: {state}" + (f" ({reason})." if reason else ".")
        # A skipped run is the gate's decision; only a failed one is a failure.
        return {"message": text, **resp.body, "success": state != "failed", "executed": executed}

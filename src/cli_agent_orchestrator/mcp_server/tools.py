"""The orchestration tools, independent of MCP plumbing.

Each method validates what it can locally (so a bad call creates nothing),
makes the cao-server calls, and returns a plain dict. Expected failures become
`success: false` results with a sentence the calling agent can act on; they are
never raised, because a raised error reaches the agent as an opaque tool error.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..clients.aio import CANCELLABLE, ApiResponse, CaoApi, describe_detail
from ..models import TERMINAL_ID_RE
from ..settings import Settings
from .job_tools import HandoffJobTools, job_wait, pending

Result = dict[str, Any]

MIN_HANDOFF_TIMEOUT = 1
MAX_HANDOFF_TIMEOUT = 3600
# run-step answers only when the worker is done; the HTTP wait covers the step plus
# worker start-up and teardown.
HANDOFF_HTTP_MARGIN = 60
MAX_ANSWER_CHARS = 4000
CROWDED_SESSION = 10
WAITING_USER_ANSWER = "waiting_user_answer"
# A registered host's name (`cao host add NAME`) or "local"; cao-server checks the same, and
# answers an unknown host with 400. Checked here too, so a malformed one never leaves this process.
HOST_NAME_RE = re.compile(r"\A[a-z0-9][a-z0-9-]{0,31}\Z")


@dataclass(frozen=True)
class ToolConfig:
    terminal_id: str | None  # CAO_TERMINAL_ID as given (validated on use, so a typo is reported)
    sender_id_injection: bool
    working_directory_param: bool
    home_dir: Path
    base_url: str
    request_timeout: float
    handoff_wait: float = 600.0  # CAO_HANDOFF_WAIT_SECONDS: a handoff call's wait before `pending`

    @classmethod
    def from_env(cls) -> ToolConfig:
        settings = Settings.from_env()
        raw = os.environ.get("CAO_TERMINAL_ID", "").strip()
        return cls(
            terminal_id=raw or None,
            sender_id_injection=settings.sender_id_injection,
            working_directory_param=settings.working_directory_param,
            home_dir=settings.home_dir,
            base_url=settings.base_url,
            request_timeout=settings.mcp_request_timeout,
            handoff_wait=settings.handoff_wait,
        )


def bad_terminal_id(terminal_id: str | None, what: str = "terminal_id") -> str | None:
    """The error for a malformed id, or None; checked here so typos never reach a URL."""
    if not isinstance(terminal_id, str) or not TERMINAL_ID_RE.match(terminal_id):
        return f"invalid {what} {terminal_id!r}: expected 8 lowercase hex characters"
    return None


def bad_host(host: object) -> str | None:
    """The error for a malformed host name, or None (None itself: the placement policy)."""
    if host is None or (isinstance(host, str) and HOST_NAME_RE.match(host)):
        return None
    return f"invalid host {str(host)[:80]!r}: use a registered host's name (`cao host list`) or local"


def host_phrase(answer: dict) -> str:
    """ " on host NAME" when cao-server placed the worker on another host, else ""."""
    host = answer.get("host")
    return f" on host {host}" if isinstance(host, str) and host else ""


def assign_suffix(me: str) -> str:
    return f"\n\n[Assigned by terminal {me}. When done, send results back to terminal {me} using send_message]"


def message_suffix(me: str) -> str:
    return f"\n\n[Message from terminal {me}. Use send_message MCP tool for any follow-up work.]"


def worktree_sentence(worktree: object) -> tuple[str, str | None]:
    """The sentence that names the worker's branch (use_worktree), and the branch; ("", None)
    for a worker without a worktree. `worktree` is cao-server's answer for it."""
    if not isinstance(worktree, dict) or not isinstance(worktree.get("branch"), str):
        return "", None
    branch, path = worktree["branch"], worktree.get("path")
    if worktree.get("state") == "kept":
        return f" The worker's branch is {branch}; its worktree {path} was kept: {worktree.get('note')}.", branch
    if worktree.get("state") == "removed":
        return f" The worker's commits are on branch {branch}; its worktree was removed (it was clean).", branch
    return f" The worker works on branch {branch} in its own worktree {path}.", branch


def engine_sentence(engine: str | None, answer: dict) -> str:
    """A note when the requested engine was ignored (cao-server shows engine null: no engines)."""
    if engine is None or answer.get("engine") is not None:
        return ""
    return f" Note: engine {engine} was ignored: {answer.get('provider') or 'this provider'} has no engines."


class OrchestratorTools(HandoffJobTools):
    def __init__(self, config: ToolConfig, api: CaoApi | None = None):
        self.config = config
        self.api = api or CaoApi(config.base_url, config.request_timeout)

    # --- identity and lookups ---------------------------------------------------------
    def _me(self) -> tuple[str | None, str | None]:
        """(my terminal id, error). The id is None without CAO_TERMINAL_ID."""
        me = self.config.terminal_id
        if me is None:
            return None, None
        error = bad_terminal_id(me, "CAO_TERMINAL_ID")
        return (None, error) if error else (me, None)

    async def _terminal(self, terminal_id: str) -> tuple[dict | None, str | None]:
        resp = await self.api.get(f"/terminals/{terminal_id}")
        if resp.ok and isinstance(resp.body, dict):
            return resp.body, None
        return None, resp.error or "unexpected answer from cao-server"

    async def _crowding_note(self, session_name: str | None) -> str:
        if not session_name:
            return ""
        resp = await self.api.get(f"/sessions/{session_name}/terminals")
        if not (resp.ok and isinstance(resp.body, list)) or len(resp.body) < CROWDED_SESSION:
            return ""
        return (
            f" NOTE: This session has {len(resp.body)} terminals. "
            "Consider calling delete_terminal on terminals you no longer need."
        )

    # --- handoff ------------------------------------------------------------------------
    async def handoff(
        self,
        agent_profile: str,
        message: str,
        timeout: int = 600,
        working_directory: str | None = None,
        model: str | None = None,
        engine: str | None = None,
        use_worktree: bool = False,
        host: str | None = None,
        description: str | None = None,
        wait: int | None = None,
    ) -> Result:
        def fail(text: str, terminal_id: str | None = None) -> Result:
            return {"success": False, "message": text, "output": None, "terminal_id": terminal_id}

        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= 3600):
            return fail(f"Handoff failed: wait must be between 0 and 3600 seconds, got {wait!r}")

        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int)
            or not MIN_HANDOFF_TIMEOUT <= timeout <= MAX_HANDOFF_TIMEOUT
        ):
            return fail(
                f"Handoff failed: timeout must be between {MIN_HANDOFF_TIMEOUT} and "
                f"{MAX_HANDOFF_TIMEOUT} seconds, got {timeout!r}"
            )
        if not message or not message.strip():
            return fail("Handoff failed: message must not be empty")
        if not agent_profile or not agent_profile.strip():
            return fail("Handoff failed: agent_profile must not be empty")
        if error := bad_host(host):
            return fail(f"Handoff failed: {error}")
        me, error = self._me()
        if error:
            return fail(f"Handoff failed: {error}")
        caller = None
        if me is not None:
            caller, error = await self._terminal(me)
            if caller is None:
                return fail(f"Handoff failed: cannot look up the calling terminal {me}: {error}")
        # No provider: cao-server chooses (the profile's, else the caller's, else its default).
        body = {
            "agent": agent_profile,
            "prompt": message,
            "provider": None,
            "caller_id": me,
            "timeout": timeout,
            "teardown": True,
            "working_directory": working_directory,
            "model": model,
            "engine": engine,
            "use_worktree": use_worktree,
            "host": host,
            "description": description,
            # A job of cao-server: after `wait` this call answers `pending` and the work goes on. A
            # wait as long as the timeout waits for the whole job (its start-up and teardown too).
            "wait": job_wait(timeout, self.config.handoff_wait if wait is None else wait),
        }
        started = time.monotonic()
        resp = await self.api.post(
            "/terminals/run-step", json=body, timeout=timeout + HANDOFF_HTTP_MARGIN, headers={CANCELLABLE: "1"}
        )
        if resp.status == 202 and isinstance(resp.body, dict):
            return pending(resp.body, agent_profile)
        if resp.ok and isinstance(resp.body, dict):
            elapsed = resp.body.get("elapsed")
            seconds = float(elapsed) if isinstance(elapsed, (int, float)) else time.monotonic() - started
            note = await self._crowding_note(caller.get("session_name") if caller else None)
            on_branch, branch = worktree_sentence(resp.body.get("worktree"))
            result = {
                "success": True,
                "message": f"Successfully handed off to {agent_profile} "
                f"({resp.body.get('provider') or 'default provider'}){host_phrase(resp.body)} in {seconds:.2f}s"
                f"{on_branch}{engine_sentence(engine, resp.body)}{note}",
                "output": resp.body.get("last_message"),
                "terminal_id": resp.body.get("terminal_id"),
                "status": "completed",
                "job_id": resp.body.get("job_id"),
            }
            if branch is not None:
                result["branch"] = branch
            return result
        return fail(*self._handoff_failure(resp, timeout))

    @staticmethod
    def _handoff_failure(resp: ApiResponse, timeout: int) -> tuple[str, str | None]:
        detail = resp.detail
        worker = detail.get("terminal_id") if isinstance(detail, dict) else None
        if resp.status == 502 and isinstance(detail, dict) and detail.get("kind") == "waiting_user_answer":
            return f"Handoff paused: {detail.get('message')}", worker
        if resp.status == 502:
            return f"Handoff failed: worker errored ({describe_detail(detail)})", worker
        if resp.status == 504 or resp.timed_out:
            return f"Handoff timed out after {timeout} seconds", worker
        if 400 <= resp.status < 500:
            return f"Handoff failed: {resp.error}", worker
        return f"Handoff failed: {resp.error or 'unexpected answer from cao-server'}", worker

    # --- assign ---------------------------------------------------------------------------
    async def assign(
        self,
        agent_profile: str,
        message: str,
        working_directory: str | None = None,
        model: str | None = None,
        engine: str | None = None,
        use_worktree: bool = False,
        host: str | None = None,
        description: str | None = None,
    ) -> Result:
        def fail(text: str) -> Result:
            return {"success": False, "terminal_id": None, "message": f"Assignment failed: {text}"}

        me, error = self._me()
        if error:
            return fail(error)
        if me is None:
            return fail(
                "CAO_TERMINAL_ID not set; assign must be called from an agent running in a cao "
                "terminal, so the worker knows where to send its results"
            )
        if not message or not message.strip():
            return fail("message must not be empty")
        if not agent_profile or not agent_profile.strip():
            return fail("agent_profile must not be empty")
        if error := bad_host(host):
            return fail(error)
        caller, error = await self._terminal(me)
        if caller is None:
            return fail(f"cannot look up the calling terminal {me}: {error}")
        task = message + assign_suffix(me) if self.config.sender_id_injection else message
        session = caller["session_name"]
        params = {
            "agent_profile": agent_profile,
            "caller_id": me,
            "defer_init": "true",
            "working_directory": working_directory,
            "model": model,
            "engine": engine,
            "use_worktree": "true" if use_worktree else None,
            "host": host,
        }
        resp = await self.api.post(
            f"/sessions/{session}/terminals",
            params=params,
            json={"initial_message": task, "initial_message_orchestration_type": "assign", "description": description},
        )
        if not (resp.ok and isinstance(resp.body, dict)):
            return fail(resp.error or "unexpected answer from cao-server")
        worker = resp.body["id"]
        note = await self._crowding_note(session)
        on_branch, branch = worktree_sentence(resp.body.get("worktree"))
        result = {
            "success": True,
            "terminal_id": worker,
            "message": f"Task assigned to {agent_profile} (terminal: {worker}){host_phrase(resp.body)}. "
            "Worker is initializing in "
            "the background; your task will be delivered once it is ready. Call "
            f"delete_terminal('{worker}') when you no longer need this terminal."
            f"{on_branch}{engine_sentence(engine, resp.body)}{note}",
        }
        if branch is not None:
            result["branch"] = branch
        return result

    # --- send_message ---------------------------------------------------------------------
    async def send_message(self, message: str, receiver_id: str | None = None) -> Result:
        def fail(text: str) -> Result:
            return {"success": False, "error": text}

        me, error = self._me()
        if error:
            return fail(error)
        if me is None:
            return fail(
                "CAO_TERMINAL_ID not set; send_message must be called from an agent running in a "
                "cao terminal (the sender)"
            )
        if not message or not message.strip():
            return fail("message must not be empty")
        if receiver_id is None or receiver_id == "":
            me_record, error = await self._terminal(me)
            if me_record is None:
                return fail(f"cannot look up terminal {me} to find its caller: {error}")
            receiver_id = me_record.get("caller_id")
            if not receiver_id:
                return fail(
                    f"no receiver_id given and terminal {me} has no caller to reply to; pass receiver_id explicitly"
                )
        elif error := bad_terminal_id(receiver_id, "receiver_id"):
            return fail(error)
        if receiver_id == me:
            return fail(f"cannot send a message to yourself (terminal {me})")
        text = message + message_suffix(me) if self.config.sender_id_injection else message
        resp = await self.api.post(f"/terminals/{receiver_id}/inbox/messages", json={"sender_id": me, "message": text})
        if resp.ok and isinstance(resp.body, dict):
            return resp.body
        return fail(resp.error or "unexpected answer from cao-server")

    # --- answer_user_prompt ---------------------------------------------------------------
    async def answer_user_prompt(self, terminal_id: str, answer: str) -> Result:
        def fail(text: str, status: str | None = None) -> Result:
            result: Result = {"success": False, "terminal_id": terminal_id, "message": text}
            if status is not None:
                result["status"] = status
            return result

        if error := bad_terminal_id(terminal_id):
            return fail(error)
        if not answer or not answer.strip():
            return fail("answer must not be blank")
        if len(answer) > MAX_ANSWER_CHARS:
            return fail(f"answer too long: {len(answer)} characters (limit {MAX_ANSWER_CHARS})")
        term, error = await self._terminal(terminal_id)
        if term is None:
            return fail(f"cannot look up terminal {terminal_id}: {error}")
        status = term.get("status")
        if status != WAITING_USER_ANSWER:
            return fail(
                f"Terminal {terminal_id} is not waiting for a user answer (status: {status}); nothing was sent", status
            )
        resp = await self.api.post(f"/terminals/{terminal_id}/input", json={"message": answer})
        if not resp.ok:
            return fail(f"could not deliver the answer: {resp.error}")
        return {"success": True, "terminal_id": terminal_id, "message": "User prompt answer delivered."}

    # --- delete_terminal ------------------------------------------------------------------
    async def delete_terminal(self, terminal_id: str) -> Result:
        if error := bad_terminal_id(terminal_id):
            return {"success": False, "message": error}
        resp = await self.api.delete(f"/terminals/{terminal_id}")
        if resp.ok:
            on_branch, _ = worktree_sentence(resp.body.get("worktree") if isinstance(resp.body, dict) else None)
            text = f"Terminal {terminal_id} deleted successfully" + (f".{on_branch}" if on_branch else "")
            return {"success": True, "message": text}
        if resp.status == 404:
            return {"success": False, "message": f"Terminal {terminal_id} not found"}
        return {"success": False, "message": f"Failed to delete terminal {terminal_id}: {resp.error}"}

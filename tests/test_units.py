"""Fast unit tests of pure pieces: the event bus, input neutralising, key names,
profiles, settings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cli_agent_orchestrator.bus import EventBus, topic_matches
from cli_agent_orchestrator.errors import InvalidInput, NotFound
from cli_agent_orchestrator.events import StatusChanged, TerminalOutput
from cli_agent_orchestrator.models import TerminalStatus
from cli_agent_orchestrator.profiles.loading import load_profile, parse_profile
from cli_agent_orchestrator.services.input import neutralise, valid_key
from cli_agent_orchestrator.settings import Settings


def test_topic_wildcards_match_one_segment_and_hash_matches_rest():
    assert topic_matches("terminal.*.status", "terminal.abcd1234.status")
    assert not topic_matches("terminal.*.status", "terminal.abcd1234.output")
    assert not topic_matches("terminal.*", "terminal.abcd1234.output")
    assert topic_matches("terminal.#", "terminal.abcd1234.output")
    assert topic_matches("#", "inbox.x.queued")


def _status(tid: str, n: int) -> StatusChanged:
    return StatusChanged(tid, TerminalStatus.IDLE, TerminalStatus.PROCESSING, "screen", turn=n)


def test_full_queue_drops_output_but_never_status_events():
    async def scenario():
        bus = EventBus(max_queue_size=3)
        bus.bind(asyncio.get_running_loop())
        sub = bus.open_stream("slow", "terminal.#")
        dropped = []
        sub.on_drop = dropped.append
        for i in range(10):
            bus.publish(TerminalOutput("t1", b"x%d" % i))
        for i in range(5):
            bus.publish(_status("t1", i))
        kinds = [type(e).__name__ for e in sub.queue]
        return kinds, sub.dropped, len(dropped)

    kinds, dropped, told = asyncio.run(scenario())
    assert kinds.count("StatusChanged") == 5  # every status edge kept
    assert kinds.count("TerminalOutput") == 3  # output bounded by the queue size
    assert dropped == 7 and told == 7


def test_failing_consumer_is_recorded_and_others_still_get_the_event():
    async def scenario():
        bus = EventBus()
        seen = []

        def broken(event):
            raise RuntimeError("boom")

        bus.subscribe("broken", "terminal.*.status", broken)
        bus.subscribe("fine", "terminal.*.status", seen.append)
        bus.start()
        bus.publish(_status("t1", 1))
        for _ in range(20):
            await asyncio.sleep(0.01)
            if seen and bus.failures:
                break
        await bus.stop()
        return seen, list(bus.failures)

    seen, failures = asyncio.run(scenario())
    assert len(seen) == 1
    assert failures and failures[0].consumer == "broken" and "boom" in failures[0].error


def test_publish_from_another_thread_is_delivered_on_the_loop():
    async def scenario():
        bus = EventBus()
        got = []
        bus.subscribe("c", "terminal.*.output", got.append)
        bus.start()
        await asyncio.get_running_loop().run_in_executor(None, bus.publish, TerminalOutput("t2", b"hi"))
        for _ in range(50):
            if got:
                break
            await asyncio.sleep(0.01)
        await bus.stop()
        return got

    assert [e.data for e in asyncio.run(scenario())] == [b"hi"]


def test_neutralise_keeps_text_and_turns_controls_into_pictures():
    assert neutralise("a\tb\nc") == "a\tb\nc"
    assert neutralise("x\r\ny\rz") == "x\ny\nz"
    assert neutralise("\x1b[201~rm -rf /") == "\u241b[201~rm -rf /"
    assert neutralise("\x03\x04\x7f\x9b") == "\u2403\u2404\u2421\ufffd"
    hostile = "$(whoami) `id` 'q' \"dq\" ünï 🎉"
    assert neutralise(hostile) == hostile


@pytest.mark.parametrize("key", ["Enter", "Escape", "C-c", "Up", "Down", "Left", "Right", "Tab", "y", "M-x"])
def test_named_keys_are_accepted(key):
    assert valid_key(key)


@pytest.mark.parametrize("key", ["", "Enter Enter", "C-", "rm -rf", "a;b", "\x1b", "send-keys", "a\n", "C-c\n"])
def test_bad_keys_are_refused(key):
    assert not valid_key(key)


def test_profile_frontmatter_and_body():
    prof = parse_profile("---\nname: x\nprovider: mock_cli\nallowedTools: [fs_read]\n---\nBe brief.\n", "x", "t")
    assert (prof.name, prof.provider, prof.allowed_tools, prof.system_prompt) == (
        "x",
        "mock_cli",
        ["fs_read"],
        "Be brief.",
    )
    with pytest.raises(InvalidInput):
        parse_profile("---\n: [\n---\nbody", "bad", "t")


def test_user_agent_store_overrides_builtin(tmp_path: Path):
    store = tmp_path / "agent-store"
    store.mkdir()
    (store / "developer.md").write_text("---\nname: developer\ndescription: mine\n---\nCustom.\n")
    assert load_profile(tmp_path, "developer").description == "mine"
    assert load_profile(tmp_path, "reviewer").source == "built-in"
    with pytest.raises(NotFound):
        load_profile(tmp_path, "nobody")
    with pytest.raises(InvalidInput):
        load_profile(tmp_path, "../etc/passwd")


def test_settings_read_env(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("CAO_HOME_DIR", str(tmp_path))
    monkeypatch.setenv("CAO_API_PORT", "9999")
    monkeypatch.setenv("CAO_EVENT_BUS_MAX_QUEUE_SIZE", "7")
    s = Settings.from_env()
    assert s.home_dir == tmp_path.resolve() and s.api_port == 9999 and s.event_queue_size == 7
    assert s.base_url == "http://127.0.0.1:9999"
    assert s.tmux_socket_name.startswith("cao-")


def test_the_monitor_screen_survives_private_sgr_sequences():
    """Gemini CLI sends `CSI > 4 ; 2 m` (xterm modifyOtherKeys); plain pyte raises on it and
    drops the rest of the output it was fed, so a whole start-up screen went unseen."""
    import pyte

    from cli_agent_orchestrator.services.status.screen import EmulatedScreen

    screen = EmulatedScreen(40, 3)
    pyte.ByteStream(screen).feed(b"\x1b[>4;2mready \x1b[1mbold\x1b[0m")
    assert screen.display[0].rstrip() == "ready bold"


@pytest.mark.parametrize("name", ["leak\n", "ok\n", "a:b", "x#y", "", "-lead", "x" * 65])
def test_names_must_match_in_full(name):
    from cli_agent_orchestrator.models import SAFE_NAME_RE

    assert not SAFE_NAME_RE.match(name)


def test_placement_policy_picks_named_then_callers_then_policy_host():
    from cli_agent_orchestrator.services.hosts.placement import choose
    from cli_agent_orchestrator.services.hosts.records import HostRecord, SshTarget

    def host(name: str, state: str = "active", limit: int | None = None) -> HostRecord:
        return HostRecord(name, SshTarget(f"{name}.example"), None, limit, state, "")  # type: ignore[arg-type]

    hosts = [host("a", limit=2), host("b"), host("c", state="draining")]
    live = ["a", "a", "b", None]
    assert choose(None, None, hosts, live, "local") is None
    assert choose("local", "b", hosts, live, "least-loaded") is None
    assert choose("b", None, hosts, live, "local") == "b"
    assert choose(None, "b", hosts, live, "local") == "b"  # beside its caller
    assert choose(None, "a", hosts, live, "local") is None  # the caller's host is full: the policy
    assert choose(None, None, hosts, live, "least-loaded") == "b"  # a is full, c drains
    assert choose(None, None, [*hosts, host("d")], live, "least-loaded") == "d"  # fewest agents
    assert choose(None, None, [host("a", limit=2)], live, "least-loaded") is None  # no host with room: here
    for bad, words in (("x", "unknown host 'x'"), ("a", "is full"), ("c", "draining")):
        with pytest.raises(InvalidInput, match=words):
            choose(bad, None, hosts, live, "local")
    with pytest.raises(InvalidInput, match="placement policy"):
        choose(None, None, hosts, live, "nearest")


@pytest.mark.parametrize(
    ("environ", "channel", "url"),
    [
        ({"CAO_API_PORT": "9911"}, "fifo", "http://127.0.0.1:9911/terminals/0123abcd/hooks"),
        ({"CAO_API_HOST": "0.0.0.0"}, "fifo", "http://127.0.0.1:9889/terminals/0123abcd/hooks"),
        ({"CAO_API_HOST": "::1", "CAO_API_PORT": "7"}, "fifo", "http://[::1]:7/terminals/0123abcd/hooks"),
        ({"CAO_API_HOST": "10.1.2.3"}, "fifo", None),  # not on loopback: the hook channel instead
        ({}, "http", None),  # on another host: cao-hook through the forward, with the token
    ],
)
def test_qwen_posts_its_hooks_itself_where_it_can_reach_the_server(tmp_path, environ, channel, url):
    """Qwen Code's HTTP hooks start no process per event; the secret stays in the agent's
    environment (interpolated by Qwen), never in the settings file."""
    import json

    from cli_agent_orchestrator.providers import qwen_cli
    from cli_agent_orchestrator.providers.base import LaunchContext

    ctx = LaunchContext(
        terminal_id="0123abcd",
        profile_name="p",
        system_prompt="",
        working_directory=str(tmp_path),
        home_dir=tmp_path / "home",
        environ={"QWEN_CODE_SYSTEM_SETTINGS_PATH": str(tmp_path / "none.json"), **environ},
        hook_channel=channel,
    )
    launch = qwen_cli.build_launch(ctx)
    settings = json.loads(Path(launch.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"]).read_text())
    for event in ("UserPromptSubmit", "PostToolUse", "StopFailure", "Notification"):
        (hook,) = settings["hooks"][event][0]["hooks"]
        if url is None:
            assert hook["type"] == "command" and "command" in hook
        else:
            assert hook == {
                "type": "http",
                "name": "cao-hook",
                "url": url,
                "headers": {"X-CAO-Hook-Secret": "${CAO_HOOK_SECRET}"},
                "allowedEnvVars": ["CAO_HOOK_SECRET"],
                "timeout": 2,
            }


def test_the_api_listener_hands_every_connection_tcp_nodelay():
    """uvicorn's bind_socket() makes a socket asyncio does not set TCP_NODELAY on; without it a
    response written in two pieces waited 40 ms for the client's delayed ACK on every request
    of a kept-alive connection (bench/runtime_bench.py's figures). Linux passes the option on
    from the listener to each accepted connection."""
    import socket

    import uvicorn

    from cli_agent_orchestrator.cli.server import no_delay

    listener = no_delay(uvicorn.Config(lambda *a: None, host="127.0.0.1", port=0).bind_socket())
    listener.listen()  # uvicorn's server listens on it when it starts
    try:
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        listener.close()

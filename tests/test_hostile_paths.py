"""Every way client- or agent-supplied text reaches a tmux command, driven through a real
cao-server's HTTP API with values full of tmux and shell syntax: none of it is ever syntax.

Where the text goes (backends/tmux*.py), and which test here drives it:
- new-window/new-session `-c` (a format): the working directory, here and in the home the
  server runs from (test_trust_faults.py drives the request's own working_directory);
- respawn-pane `-c` (a format): Kiro's start-up fallback (test_kiro_fallback.py);
- pipe-pane's command (a format, then a shell): the FIFO path under CAO_HOME_DIR;
- set-buffer on the control client's line (escaped) and load-buffer from stdin (a long text):
  a message typed into an agent;
- new-window's command: the launch file's path under CAO_HOME_DIR;
- send-keys (a key name, quoted into if-shell's command): only names valid_key() accepts get
  there; text on the terminal WebSocket goes as hex bytes (test_web_api.py).
Session, window and profile names never reach tmux unless they match SAFE_NAME_RE
(test_trust_faults.py::test_names_must_match_whole_and_nothing_is_left_behind).
A `#(…)` that tmux expands runs `touch $CAO_TEST_MARKER` in the tmux server's environment, and
`$(…)`/backticks would in a shell: the marker file must never exist.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CaoServer

# Each piece of syntax a path or a message could smuggle into tmux's parser, a format or a shell.
HOSTILE = "#(touch $CAO_TEST_MARKER)#{pane_id};$(touch $CAO_TEST_MARKER)`touch $CAO_TEST_MARKER`'\" ~ \\"
LONG_TEXT = 16 * 1024 + 1  # past tmux_input.MAX_LINE_TEXT: the text goes through load-buffer


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "pwned"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """The tmux socket's directory: a socket path must fit 108 bytes, a hostile home does not."""
    path = Path(tempfile.mkdtemp(prefix="cao-t"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def hostile_server(tmp_path: Path, marker: Path, tmux_dir: Path, **env: str) -> CaoServer:
    # The tmux server inherits cao-server's environment: a `#(…)` it ran would see the marker.
    extra = {"CAO_TEST_MARKER": str(marker), "TMUX_TMPDIR": str(tmux_dir), **env}
    return CaoServer(tmp_path / f"home{HOSTILE}", extra).start()


def last_reply(cao: CaoServer, terminal_id: str) -> str:
    resp = cao.client.get(f"/terminals/{terminal_id}/output", params={"mode": "last"})
    assert resp.status_code == 200, resp.text
    return resp.json()["output"]


def live_directory(cao: CaoServer, terminal_id: str) -> str:
    """The pane's directory as tmux reports it (#{pane_current_path})."""
    return cao.client.get(f"/terminals/{terminal_id}/working-directory").json()["working_directory"]


@pytest.mark.parametrize("source", ["control", "pipe-pane"])
def test_a_hostile_home_is_only_a_path_for_the_window_the_launch_and_the_output_pipe(
    tmp_path: Path, marker: Path, short_dir: Path, source: str
):
    """The home is in the FIFO path (pipe-pane's command), the launch file's path (the window's
    command) and the default working directory (`-c`). The agent starts, its output is read
    (a reply arrives through the pipe), and it runs in exactly that directory."""
    cao = hostile_server(tmp_path, marker, short_dir, CAO_OUTPUT_SOURCE=source)
    try:
        term = cao.create_session()
        cao.send(term["id"], "hello from a hostile home")
        cao.wait_status(term["id"], "completed", timeout=20)
        assert last_reply(cao, term["id"]) == "MOCK: hello from a hostile home"
        assert live_directory(cao, term["id"]) == str(cao.home)
        if source == "pipe-pane":  # the pipe is the one cao set up, to the FIFO in the home
            piped = cao.tmux("list-panes", "-a", "-F", "#{pane_pipe}").stdout.split()
            assert "1" in piped, piped
        assert not marker.exists()
    finally:
        cao.cleanup()


def test_a_hostile_message_reaches_the_agent_as_exactly_its_text(cao_factory, marker: Path):
    """A short message goes on the control client's command line (escaped), a long one
    through load-buffer: both arrive unchanged, and nothing in them runs."""
    cao = cao_factory("home", CAO_TEST_MARKER=str(marker)).start()
    term = cao.create_session()
    short = f"say {HOSTILE} $HOME ${{HOME}} %1 #[fg=red] \\; kill-server"
    cao.send(term["id"], short)
    cao.wait_status(term["id"], "completed", timeout=20)
    assert last_reply(cao, term["id"]) == f"MOCK: {short}"
    long = (HOSTILE + " ") * (LONG_TEXT // (len(HOSTILE) + 1) + 1)
    cao.send(term["id"], long)
    cao.wait_status(term["id"], "completed", timeout=30)
    digest = hashlib.sha256(long.encode()).hexdigest()[:16]
    assert last_reply(cao, term["id"]) == f"MOCK: received {len(long)} chars, 1 lines, sha256 {digest}"
    assert cao.client.get("/health").json()["status"] == "ok"  # the tmux server took no command
    assert not marker.exists()


# At most 16 characters (the route's limit), so that valid_key() is what refuses them.
@pytest.mark.parametrize("key", ["#(touch $M)", "C-c;kill-server", "'#{pane_id}'", "$(touch $M)", "`touch $M`"])
def test_a_hostile_key_name_is_refused_before_tmux(cao_factory, marker: Path, key: str):
    cao = cao_factory("home", M=str(marker)).start()
    term = cao.create_session()
    resp = cao.client.post(f"/terminals/{term['id']}/key", json={"key": key})
    assert resp.status_code == 400 and "invalid key" in resp.text, resp.text
    cao.send(term["id"], "still here")  # the tmux server and the agent are untouched
    cao.wait_status(term["id"], "completed", timeout=20)
    assert last_reply(cao, term["id"]) == "MOCK: still here"
    assert not marker.exists()

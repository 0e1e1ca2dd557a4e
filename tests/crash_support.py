"""What a crash of cao-server between claiming an inbox message and finishing it leaves
behind, made on purpose while the server is down: the row claimed (DELIVERING) with the
mark cao takes before its paste and, optionally, the paste itself (no Enter)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from cao_support import CaoServer, wait_until

from cli_agent_orchestrator.services.inbox import MARK_ROWS_ABOVE, occurrences


def window_of(server: CaoServer, terminal_id: str) -> str:
    return server.sql("SELECT window_id FROM terminals WHERE id = :id", id=terminal_id)[0][0]


def leave_in_flight(server: CaoServer, receiver: str, text: str, *, pasted: bool) -> None:
    assert server.proc is None, "stop the server first: this is what a crash leaves"
    window = window_of(server, receiver)
    history, row = map(
        int, server.tmux("display-message", "-p", "-t", window, "#{history_size} #{cursor_y}").stdout.split()
    )
    region = server.tmux(
        "capture-pane", "-p", "-J", "-t", window, "-S", str(max(row - MARK_ROWS_ABOVE, -history))
    ).stdout
    mark = f"{history},{row},{occurrences(text, region)}"
    server.sql(
        "INSERT INTO inbox_messages (sender_id, receiver_id, message, status, created_at, claimed_at,"
        " paste_mark) VALUES ('tester', :receiver, :text, 'delivering', '2026-01-01T00:00:00', "
        "'2026-01-01T00:00:00', :mark)",
        receiver=receiver,
        text=text,
        mark=mark,
    )
    if not pasted:
        return
    env = {k: v for k, v in server.env.items() if k != "TMUX"}
    load = subprocess.run(
        ["tmux", "-L", server._socket_name(), "load-buffer", "-b", "crash", "-"],
        input=text.encode(),
        env=env,
        capture_output=True,
    )
    assert load.returncode == 0, load.stderr
    assert server.tmux("paste-buffer", "-p", "-d", "-b", "crash", "-t", window).returncode == 0
    wait_until(
        lambda: (
            occurrences(
                text,
                server.tmux(
                    "capture-pane", "-p", "-J", "-t", window, "-S", str(max(row - MARK_ROWS_ABOVE, -history))
                ).stdout,
            )
            > int(mark.rsplit(",", 1)[1])
        ),
        timeout=10,
        message="the paste on screen",
    )


LONG_END = "END-OF-THE-PASTE-BEFORE-THE-CRASH"
LONG = (
    "\n".join(
        f"line {i:02d} of a message pasted just before cao-server crashed: lorem ipsum dolor" for i in range(1, 40)
    )
    + "\n"
    + LONG_END
)


def long_paste_survives_a_crash(cao: CaoServer, terminal_id: str, received: Callable[[str], int]) -> None:
    """cao-server is killed after pasting a long inbox message into a real CLI (which shows
    its own summary of the paste) and before pressing Enter. After the restart the message is
    submitted, not pasted again: the model receives it exactly once. `received(marker)` counts
    the marker in the user messages the model got."""
    cao.kill9()
    leave_in_flight(cao, terminal_id, LONG, pasted=True)
    cao.start()
    wait_until(
        lambda: (
            [m["status"] for m in cao.client.get(f"/terminals/{terminal_id}/inbox/messages").json()] == ["delivered"]
        ),
        timeout=60,
        message="the message delivered after the restart",
    )
    wait_until(lambda: received(LONG_END) >= 1, timeout=90, message="the model got the message")
    cao.wait_status(terminal_id, "completed", timeout=90)
    assert received(LONG_END) == 1

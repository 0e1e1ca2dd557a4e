"""How cao lays out its tmux server: the hidden monitor session every agent window lives in,
the command list that creates a window there and links it into its cao session, and reading
windows back from `list-panes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import WindowInfo, WindowRef
from .tmux_commands import Reply, is_window_id, literal

# A control client sees only the windows of the session it is attached to: every agent window
# is linked into this one, which no cao session is named like.
MONITOR_SESSION = "_cao_monitor"
PANE_WIDTH, PANE_HEIGHT = 220, 50
HISTORY_LIMIT = 100_000
LIST_FORMAT = (
    "#{session_name}\t#{window_id}\t#{pane_id}\t#{window_name}\t#{pane_dead}\t"
    "#{pane_dead_status}\t#{window_width}\t#{window_height}\t#{@cao_tag}"
)


def server_start_commands() -> list[str]:
    """Start the server with the monitor session and cao's global options."""
    # -f /dev/null: a user's tmux.conf must not change how agents are started.
    # remain-on-exit keeps a dead agent's last screen (and its exit code) readable.
    return [
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        MONITOR_SESSION,
        "-x",
        str(PANE_WIDTH),
        "-y",
        str(PANE_HEIGHT),
        "tail -f /dev/null",
        ";",
        "set-option",
        "-g",
        "default-shell",
        "/bin/sh",
        ";",
        "set-option",
        "-g",
        "history-limit",
        str(HISTORY_LIMIT),
        ";",
        "set-option",
        "-g",
        "default-size",
        f"{PANE_WIDTH}x{PANE_HEIGHT}",
        ";",
        "set-option",
        "-g",
        "remain-on-exit",
        "on",
        ";",
        "set-option",
        "-g",
        "allow-rename",
        "off",
        ";",
        "set-option",
        "-g",
        "automatic-rename",
        "off",
    ]


@dataclass(frozen=True)
class WindowCommands:
    """One command list that creates a window: `create` answers `@window %pane`."""

    create: list[str]
    tail: list[str]  # the commands after it in the same list (each starting with ";")
    target: str  # the new window as a target inside that list ("" when there is none)


def create_window_commands(
    terminal_id: str,
    session_name: str,
    window_name: str,
    working_directory: str,
    command: str,
    new_session: bool,
    watch: bool,
    tag: str | None,
) -> WindowCommands:
    ids = "#{window_id} #{pane_id}"
    common = [
        "-n",
        literal(window_name),
        "-c",
        literal(working_directory),
        "-e",
        f"CAO_TERMINAL_ID={terminal_id}",
        "-P",
        "-F",
        ids,
        command,
    ]
    if new_session:
        create = ["new-session", "-d", "-s", session_name, "-x", str(PANE_WIDTH), "-y", str(PANE_HEIGHT), *common]
        this = f"={session_name}:^"  # the new session's only window
        link = ["link-window", "-d", "-s", this, "-t", f"={MONITOR_SESSION}:"] if watch else []
    elif watch:
        # Born in the monitor session, so its first byte of output is read; `-a` after
        # `{end}` makes it the new `{end}` for the commands that follow in this list.
        this = f"={MONITOR_SESSION}:{{end}}"
        create = ["new-window", "-d", "-a", "-t", this, *common]
        link = ["link-window", "-d", "-s", this, "-t", f"={session_name}:"]
    else:
        create = ["new-window", "-d", "-t", f"={session_name}:", *common]
        this, link = "", []
    tail: list[str] = []
    if link:
        tail += [";", *link]
    if tag is not None and this:
        tail += [";", "set-option", "-w", "-t", this, "@cao_tag", tag]
    return WindowCommands(create, tail, this)


def created_window(reply: Reply) -> WindowRef | None:
    """The window and pane the creating command printed, if it printed them."""
    first = reply.blocks[0][0].split() if reply.blocks and reply.blocks[0] else []
    return WindowRef(first[0], first[1]) if len(first) == 2 and is_window_id(first[0]) else None


def parse_window_list(out: str) -> list[WindowInfo]:
    """`list-panes -a -F LIST_FORMAT` output: one WindowInfo per window."""
    seen: dict[str, WindowInfo] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 9:
            continue
        session, window_id, pane_id, name, dead, status, width, height, tag = parts
        if session == MONITOR_SESSION and window_id in seen:
            continue
        info = WindowInfo(
            session,
            window_id,
            pane_id,
            name,
            dead == "1",
            int(status) if status.lstrip("-").isdigit() else None,
            int(width or 0),
            int(height or 0),
            tag,
        )
        # Prefer the cao-* session's view of a window linked into two sessions.
        if window_id not in seen or seen[window_id].session_name == MONITOR_SESSION:
            seen[window_id] = info
    return list(seen.values())

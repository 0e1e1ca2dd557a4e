"""`cao host check`: connect to a host and say, item by item, what is there and what is
missing, with the command that installs it.

One fixed script (PROBE) runs on the host and prints `key=value` lines between two markers;
anything else between them makes the answer unreadable rather than guessed at. The binaries
to look for (cao's tools, and the CLI of every registered provider, built-in or by entry point,
under the name a host's PATH resolves) are passed to it as positional arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from .ssh import SshResult

ItemKind = Literal["connection", "requirement", "cao", "cli"]
MIN_PYTHON = (3, 11)
CAO_TOOLS = ("cao-hook", "cao-mcp-server")
CAO_INSTALL = "pipx install cli-agent-orchestrator  (or: python3 -m pip install --user cli-agent-orchestrator)"
BEGIN, END = "cao-probe-begin", "cao-probe-end"
MAX_VALUE = 1000
BINARY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")

# Runs as `sh -c PROBE cao-probe BINARY...`, whatever the remote user's login shell is.
# `command -v` answers with the PATH a non-interactive ssh session has: the one agents get.
PROBE = r"""
echo cao-probe-begin
for tool in "$@"; do
  found=$(command -v "$tool" 2>/dev/null) || found=
  echo "bin.$tool=$found"
  if [ -z "$found" ] && [ -x "$HOME/.local/bin/$tool" ]; then echo "local.$tool=$HOME/.local/bin/$tool"; fi
done
if command -v tmux >/dev/null 2>&1; then echo "tmux.version=$(tmux -V 2>&1 | head -n 1)"; fi
if command -v python3 >/dev/null 2>&1; then
  echo "python3.version=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>&1 | head -n 1)"
fi
os_id=
if [ -r /etc/os-release ]; then os_id=$(. /etc/os-release 2>/dev/null && echo "$ID"); fi
echo "os.kernel=$(uname -s 2>/dev/null)"
echo "os.id=$os_id"
echo cao-probe-end
"""
FIXED_KEYS = frozenset({"tmux.version", "python3.version", "os.kernel", "os.id"})
KEY_RE = re.compile(r"(?:bin|local)\.[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")

# The providers' CLIs and how each is installed; a plugin's CLI not named here gets a
# general hint.
CLI_INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code",
    "codex": "npm install -g @openai/codex",
    "gemini": "npm install -g @google/gemini-cli",
    "qwen": "npm install -g @qwen-code/qwen-code",
    "opencode": "npm install -g opencode-ai",
    "kiro-cli": "curl -fsSL https://cli.kiro.dev/install | bash",
}


class ProbeUnreadable(Exception):
    """The probe's answer is not what PROBE prints."""


@dataclass(frozen=True)
class CheckItem:
    name: str
    kind: ItemKind
    ok: bool
    detail: str  # what is there, or what is wrong, in one line
    fix: str | None = None  # the command (or step) that makes it ok
    provider: str | None = None  # for a CLI: the provider that runs it


@dataclass(frozen=True)
class CheckReport:
    host: str
    ssh: str
    ready: bool  # cao can run agents there: every requirement, cao's tools and one CLI
    items: list[CheckItem] = field(default_factory=list)

    def as_json(self) -> dict:
        return asdict(self)


def probe_words(binaries: Sequence[str]) -> list[str]:
    """The remote command: fixed words, and binary names that are plain file names."""
    for name in binaries:
        if not BINARY_RE.fullmatch(name):
            raise ValueError(f"not a binary name: {name!r}")
    return ["sh", "-c", PROBE, "cao-probe", *binaries]


def parse_probe(stdout: str) -> dict[str, str]:
    """The `key=value` lines between the markers (a login script may print before them)."""
    lines = stdout.replace("\r\n", "\n").split("\n")
    try:
        start = lines.index(BEGIN)
        end = lines.index(END, start)
    except ValueError:
        raise ProbeUnreadable("the probe's markers are missing from its output") from None
    values: dict[str, str] = {}
    for line in lines[start + 1 : end]:
        key, sep, value = line.partition("=")
        if not sep or not (key in FIXED_KEYS or KEY_RE.fullmatch(key)):
            raise ProbeUnreadable(f"unexpected line in the probe's output: {line[:80]!r}")
        if key in values:
            raise ProbeUnreadable(f"{key} appears twice in the probe's output")
        if len(value) > MAX_VALUE or any(ord(c) < 0x20 for c in value):
            raise ProbeUnreadable(f"unreadable value of {key} in the probe's output")
        values[key] = value
    for key in ("os.kernel", "os.id"):
        if key not in values:
            raise ProbeUnreadable(f"{key} is missing from the probe's output")
    return values


def ssh_failure(result: SshResult, target: str, port: int | None, timeout: float) -> str:
    """ssh's reason for not connecting, in one line, with what to do about it."""
    if result.timed_out:
        return f"no answer from {target} within {timeout:g}s"
    text = result.stderr.replace("\r", "")
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    host = target.rpartition("@")[2]
    keyscan = f"ssh-keyscan {'-p ' + str(port) + ' ' if port else ''}{_bare(host)}"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (
            f"the host key of {host} has changed since it was added to known_hosts: if the change is "
            f"expected, remove the old key (ssh-keygen -R) and add the new one; cao never accepts it on its own"
        )
    if "Host key verification failed" in text or "host key is known" in text:
        return (
            f"the host key of {host} is not in known_hosts, and cao never accepts one on its own: check its "
            f"fingerprint and add it ({keyscan} >> ~/.ssh/known_hosts), or connect once by hand with ssh"
        )
    if "Connection refused" in text:
        return f"connection refused by {host}: no ssh server listens there"
    if "timed out" in text:
        return f"connecting to {host} timed out"
    if "Could not resolve hostname" in text:
        return f"cannot resolve the host name of {host}"
    if "Permission denied" in text:
        return (
            f"{target} refused the login: add your public key to the host's ~/.ssh/authorized_keys, "
            f"give the host an identity (--identity), or load the key into ssh-agent"
        )
    return lines[-1] if lines else f"ssh exited with {result.exit_code} and printed nothing"


def _bare(host: str) -> str:
    """A target's host for ssh-keyscan: without its port and brackets."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.partition(":")[0] if host.count(":") == 1 else host


def report_items(
    values: Mapping[str, str], clis: Mapping[str, str], unplaceable: Mapping[str, str] | None = None
) -> list[CheckItem]:
    """`clis`: provider name → the command it runs on a host (probed); `unplaceable`: provider
    name → a path of cao-server's machine it runs, which no host can be asked for. The ssh item
    comes first, from the caller."""
    system = _System(values.get("os.kernel", ""), values.get("os.id", ""))
    items = [_tmux(values, system), _python(values, system)]
    items += [_binary(values, tool, "cao", CAO_INSTALL) for tool in CAO_TOOLS]
    for provider, binary in sorted(clis.items()):
        fix = CLI_INSTALL.get(binary, f"install the CLI `{binary}` that the {provider} provider runs")
        items.append(_binary(values, binary, "cli", fix, provider))
    for provider, path in sorted((unplaceable or {}).items()):
        detail = f"runs {path[:200]}, a path on cao-server's machine: it cannot run on a host"
        fix = f"give the {provider} provider a `host_binary`: its CLI's command name on a host's PATH"
        items.append(CheckItem(provider, "cli", False, detail, fix, provider))
    return items


def is_ready(items: Sequence[CheckItem]) -> bool:
    needed = all(item.ok for item in items if item.kind != "cli")
    return needed and any(item.ok for item in items if item.kind == "cli")


@dataclass(frozen=True)
class _System:
    kernel: str
    os_id: str

    def package(self, name: str) -> str:
        if self.kernel == "Darwin":
            return f"brew install {name}"
        commands = {
            ("debian", "ubuntu", "raspbian", "linuxmint", "pop"): f"sudo apt-get install {name}",
            ("fedora", "rhel", "centos", "rocky", "almalinux", "amzn"): f"sudo dnf install {name}",
            ("alpine",): f"sudo apk add {name}",
            ("arch", "manjaro"): f"sudo pacman -S {name}",
            ("opensuse-leap", "opensuse-tumbleweed", "sles"): f"sudo zypper install {name}",
        }
        for ids, command in commands.items():
            if self.os_id in ids:
                return command
        return f"install {name} with the system's package manager (e.g. sudo apt-get install {name})"


def _tmux(values: Mapping[str, str], system: _System) -> CheckItem:
    path = values.get("bin.tmux", "")
    if not path:
        return CheckItem("tmux", "requirement", False, "missing", system.package("tmux"))
    version = values.get("tmux.version", "") or "version unknown"
    return CheckItem("tmux", "requirement", True, f"{version} at {path}")


def _python(values: Mapping[str, str], system: _System) -> CheckItem:
    path = values.get("bin.python3", "")
    wanted = ".".join(map(str, MIN_PYTHON))
    if not path:
        return CheckItem("python3", "requirement", False, "missing", system.package("python3"))
    version = values.get("python3.version", "")
    match = re.fullmatch(r"(\d+)\.(\d+)\.\d+", version)
    if match is None:
        return CheckItem("python3", "requirement", False, f"{path} does not run: {version[:80]}", None)
    if (int(match[1]), int(match[2])) < MIN_PYTHON:
        fix = f"install Python {wanted} or newer and make it `python3` on the PATH"
        return CheckItem("python3", "requirement", False, f"Python {version} at {path}; cao needs {wanted}+", fix)
    return CheckItem("python3", "requirement", True, f"Python {version} at {path}")


def _binary(values: Mapping[str, str], name: str, kind: ItemKind, fix: str, provider: str | None = None) -> CheckItem:
    path = values.get(f"bin.{name}", "")
    if path:
        return CheckItem(name, kind, True, path, provider=provider)
    local = values.get(f"local.{name}")
    if local:
        fix = "put ~/.local/bin on the PATH of non-interactive ssh sessions (e.g. in ~/.bashrc, before it returns)"
        return CheckItem(name, kind, False, f"at {local}, but not on the PATH of an ssh command", fix, provider)
    return CheckItem(name, kind, False, "missing", fix, provider)

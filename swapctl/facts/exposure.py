"""Where the daemon listens and how it sizes its memory, from status.sh's `listen` and `config` sections:
pure parsers of the host's text (/proc/PID/net/tcp lines, config lines any user of the host may have written).

cuzk's gRPC (`listen`: built in, a unix socket, cuzk-core/src/config.rs:43-45 at curio e0294b0f; its example
config and docs, `0.0.0.0:9820`, cuzk.example.toml:11) is plaintext: curio's client dials it with
`insecure.NewCredentials()` (lib/cuzk/client.go:81), and its `/status` answers any page's script
(`Access-Control-Allow-Origin: *`, cuzk-daemon/src/main.rs:163-199). `[memory] total_budget = "auto"`, its
default, is MemTotal less a margin (cuzk-core/src/memory.rs:83-91): it never looks at a cgroup."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

DEFAULT_LISTEN = "unix:///run/curio/cuzk.sock"  # cuzk's when neither -l nor [daemon] listen says otherwise


@dataclass(frozen=True)
class Listening:
    """A TCP socket a process listens on."""

    pid: int
    address: str  # as people write it: 0.0.0.0:9820, [::]:9820, 127.0.0.1:9821

    @property
    def public(self) -> bool:
        return is_public(self.address)


@dataclass(frozen=True)
class DaemonConfig:
    """What a cuzk config file says of where it listens and its memory budget (None: the key is absent)."""

    pid: int | None  # the process whose config it is; None: the playbook's (daemon.args)
    path: str
    found: bool  # the file exists and was read (a missing file means cuzk's defaults)
    listen: str | None = None
    status_listen: str | None = None
    total_budget: str | None = None

    @property
    def budget_auto(self) -> bool:
        """Whether cuzk sizes its budget from MemTotal: `total_budget = "auto"`, or no such key."""
        return self.total_budget is None or self.total_budget.lower() == "auto"


def is_public(address: str) -> bool:
    """Whether `HOST:PORT` (or `unix://...`) listens beyond this host: every address (0.0.0.0, ::, an empty
    host), or any that is not loopback. A name that is no address counts as public: it cannot be told."""
    if address.startswith("unix:"):
        return False
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    if host in ("", "localhost"):
        return host == ""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return True
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return not (mapped or ip).is_loopback


def _hex_address(word: str) -> str | None:
    """/proc/net/tcp's local address (`0100007F:2654`, or 32 hex digits for tcp6) as people write it."""
    host, _, port = word.partition(":")
    if not re.fullmatch(r"[0-9A-Fa-f]{4}", port) or not re.fullmatch(r"[0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}", host):
        return None
    raw = bytes.fromhex(host)
    # the kernel prints each 32-bit word in the host's byte order (little-endian on x86_64 and arm64)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    return f"{ip}:{int(port, 16)}" if ip.version == 4 else f"[{ip}]:{int(port, 16)}"


def parse_listen(text: str) -> tuple[Listening, ...]:
    """The `listen` section: `PID LOCAL_ADDRESS` a line."""
    found = []
    for line in text.split("\n"):
        parts = line.split()
        if len(parts) == 2 and parts[0].isdecimal() and (address := _hex_address(parts[1])):
            found.append(Listening(int(parts[0]), address))
    return tuple(dict.fromkeys(found))


def _value(text: str) -> str:
    """A TOML value as cuzk's config writes these keys: a quoted string or a bare word, its comment cut."""
    text = text.strip()
    m = re.match(r'^"([^"]*)"|^\'([^\']*)\'', text)
    if m:
        return m.group(1) if m.group(1) is not None else m.group(2)
    return text.split("#", 1)[0].strip()


def parse_configs(text: str) -> tuple[DaemonConfig, ...]:
    """The `config` section: `file PID PATH` (PID `-` for the playbook's), then the file's lines that open a
    table or set listen, status_listen or total_budget, each indented by two spaces."""
    configs: list[DaemonConfig] = []
    head: tuple[int | None, str] | None = None
    keys: dict[str, str] = {}
    lines_seen = False
    section = ""

    def close() -> None:
        if head is not None:
            configs.append(DaemonConfig(pid=head[0], path=head[1], found=lines_seen, **keys))

    for line in text.split("\n"):
        if line.startswith("file "):
            close()
            _, pid, path = ([*line.split(" ", 2), ""])[:3]
            head = (int(pid) if pid.isdecimal() else None, path) if pid.isdecimal() or pid == "-" else None
            keys, lines_seen, section = {}, False, ""
        elif line.startswith("  ") and head is not None:
            lines_seen = True
            body = line.strip()
            if body.startswith("["):
                section = body.split("]", 1)[0].strip("[ ")
                continue
            key, eq, value = body.partition("=")
            key = key.strip()
            wanted = {"daemon": ("listen", "status_listen"), "memory": ("total_budget",)}.get(section, ())
            if eq and key in wanted and key not in keys:
                keys[key] = _value(value)[:200]
    close()
    return tuple(configs)


def listen_of(argv: tuple[str, ...] | list[str], config: DaemonConfig | None) -> str:
    """Where cuzk listens: its -l/--listen, else the config's [daemon] listen, else its default."""
    for i, a in enumerate(argv):
        if a in ("-l", "--listen") and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--listen="):
            return a.split("=", 1)[1]
    return (config.listen if config and config.listen else None) or DEFAULT_LISTEN


def why_public(address: str) -> str:
    """What to say of a daemon listening on `address` beyond the host, and what to change."""
    every = address.rpartition(":")[0].strip("[]") in ("", "0.0.0.0", "::")
    port = address.rpartition(":")[2] or "9820"
    return (f"the daemon listens on {address} ({'every address' if every else 'an address that is not loopback'}): "
            f"cuzk's gRPC there is plaintext (curio dials it with insecure.NewCredentials(), lib/cuzk/client.go) "
            f"and its /status answers any web page (Access-Control-Allow-Origin: *, cuzk-daemon/src/main.rs:163-199); "
            f'bind it to 127.0.0.1 ([daemon] listen and status_listen = "127.0.0.1:PORT") and reach it over SSH '
            f"(ssh -L {port}:127.0.0.1:{port} HOST)")

"""The playbook reference (docs/playbook.md), made from the loader's own schema: every key the loader
accepts is here with its kind, whether it is required, its default and one line saying what it does, so
the page cannot drift from what `load` checks (tests/test_playbook.py compares both ways). Written by
`bash scripts/docs`."""

from __future__ import annotations

from dataclasses import MISSING, fields

from . import spec
from .schema import KIND_NAMES, SCHEMA

# table -> (the TOML header in the example, what the table is for)
TABLES: dict[str, tuple[str, str]] = {
    "": ("", "Top-level keys, before any table."),
    "host": ("[hosts.gpu-box]", "One table per host, `[hosts.NAME]`; NAME is what commands take as HOST."),
    "groups": ("[groups]", "Named lists of hosts, used as `@NAME` (`deploy @farm`)."),
    "daemon": ("[daemon]", "The daemon on each host: where it runs from, how it is found, when it is ready."),
    "memory": ("[memory]", "What the memory wait waits for between the old daemon's stop and the new start."),
    "gpu": ("[gpu]", "How swapctl asks the host's GPUs."),
    "rollout": ("[rollout]", "How `deploy @group` and `rollback @group` go; an option on the command line wins."),
    "logs": ("[logs]", "What `fetch-logs` takes home."),
    "releases": ("[releases]", "The releases kept on each host."),
    "build": ("[build]", "`swapctl build` and `deploy --build`; paths relative to the playbook's directory."),
    "curio": ("[curio]", "The Curio nodes that feed the daemon, for `stop = \"cordon\"` (docs/curio.md)."),
}

# table -> key -> (an example value, as TOML, and what the key does). Every key of SCHEMA, no other.
DOCS: dict[str, dict[str, tuple[str, str]]] = {
    "": {
        "inventory": ('"hosts.ini"', "an Ansible inventory (INI or YAML) whose hosts and groups are added, "
                                     "relative to the playbook"),
        "become": ('"none"', f"every host's default way to become root: {' | '.join(spec.BECOME)} (a host's own wins)"),
    },
    "host": {
        "address": ('"192.0.2.10"', "the host's name or IP address"),
        "port": ("40612", "SSH port; else ~/.ssh/config's, else 22"),
        "user": ('"root"', "login user; else ~/.ssh/config's"),
        "identity_file": ('"~/.ssh/id_ed25519"', "private key; else ssh-agent and ~/.ssh/config decide"),
        "known_hosts": ('"~/.ssh/known_hosts"', "the file that verifies (and with accept-new records) its key"),
        "host_key_policy": ('"strict"', f"{' | '.join(spec.HOST_KEY_POLICIES)}: an unknown key is refused, or "
                                        f"recorded the first time; a changed key is always refused"),
        "transport": ('"ssh"', f"{' | '.join(spec.TRANSPORTS)}: local runs on this machine, no SSH"),
        "become": ('"sudo"', "sudo: every command through `sudo -n` (NOPASSWD); none; else the top-level one"),
        "curio_nodes": ('["10.0.0.5:12300"]', "the Curio nodes that feed this host's cuzk (host:port, as [curio] "
                                              "nodes): its swap cordons these; else [curio] nodes (docs/curio.md)"),
    },
    "groups": {},
    "daemon": {
        "binary": ('"/data/cuzk"', "the path the daemon runs from on the host (needed to change a host)"),
        "args": ('["--config", "/data/cuzk.toml"]', "its arguments; else the running daemon's own"),
        "match": ('"cuzk"', "regex on the command line that finds a daemon swapctl did not start; "
                            "else the binary's file name"),
        "log": ('"/data/cuzk.log"', 'its stdout and stderr (needed to change a host); "journal": its unit\'s '
                                    'journal (needs unit)'),
        "ready_log": ('"cuzk-daemon ready"', "extended regex: this line in the log after the start means ready"),
        "ready_port": ("9820", "ready when this port accepts a connection"),
        "ready_timeout_s": ("600", "not ready this long after the start: roll back"),
        "ready_stable_s": ("30", "once ready it must stay up this long, or roll back"),
        "stop_grace_s": ("30", "SIGTERM, then SIGKILL after this"),
        "cwd": ('"/data"', "its working directory; else the running daemon's"),
        "env": ('{ RUST_LOG = "info" }', "added to the recorded environment"),
        "secret_env": ('["AWS_SECRET_ACCESS_KEY"]', "variables never printed, logged or journaled"),
        "unit": ('"cuzk.service"', "the systemd unit it runs under; else found from its cgroup"),
        "user": ('"cuzk"', "the user it runs as (adopted only as it); else root or the binary's owner"),
        "keep_loader_env": ('["LD_LIBRARY_PATH"]', "loader variables a running daemon's environment may pass on"),
        "status_url": ('"http://127.0.0.1:9821/status"', "the daemon's own GET /status (cuzk's status_listen), "
                       "read on the host: proofs in flight, workers, counters"),
        "stop": ('"drain"', "term: SIGTERM at once (what is in flight is lost); drain: wait until a reading shows "
                 "nothing in flight first (needs status_url; a proof begun since is lost: docs/daemon.md); "
                 "cordon: Curio's nodes under [curio] take no new work first, and the swap waits until they own none "
                 "(docs/curio.md)"),
        "drain_timeout_s": ("300", "how long a drain (or a cordon) waits for the proofs in flight (the tasks owned)"),
        "drain_timeout": ('"refuse"', "proofs still in flight then: stop (they are lost) or refuse (nothing changes)"),
        "ready": ('"proof"', "log: the ready line; status: /status answers; proof: a first proof completed"),
        "lock_silence_s": ("30", "the host's deploy lock ends once its deploy's heartbeat is silent this long"),
        "gone_before_stop": ('"deploy"', "a daemon that exits by itself before the stop: refuse (exit 3) or go on "
                             "with none"),
    },
    "memory": {
        "min_available_gib": ("400", "start the new daemon only once MemAvailable >= this"),
        "release_timeout_s": ("900", "memory not back this long after the stop: stop waiting (exit 5)"),
        "gpu_slack_mib": ("1024", "GPU memory may stay this far above its level without the daemon"),
    },
    "gpu": {
        "nvidia_smi_timeout_s": ("10", "each nvidia-smi call's limit on the host: past it the GPU counts as wedged"),
    },
    "rollout": {
        "parallel": ("2", "--parallel: this many hosts at once"),
        "canary": ("1", "--canary: this many hosts first; if one fails, nothing else is touched"),
        "canary_wait_s": ("300", "--canary-wait: how long the canaries run before the rest"),
        "max_fail": ('"20%"', "--max-fail: past this many failed hosts (or this share), no new host starts"),
    },
    "logs": {
        "paths": ('["/data/*.log"]', "absolute globs: fetch-logs takes only the files they match"),
    },
    "releases": {
        "keep": ("5", "releases kept on each host (at least 2); pruned after a deploy that went well"),
    },
    "build": {
        "dockerfile": ('"Dockerfile.cuzk-rebuild"', "the Dockerfile"),
        "context": ('"."', "the build context"),
        "binary_in_image": ('"/cuzk"', "where the final stage holds the binary"),
        "args": ('{ TIMING = "1", PINNED = "1" }', "build args; --build-arg K=V overrides"),
        "platform": ('"linux/amd64"', "the binary taken out must be for this platform"),
    },
    "curio": {
        "nodes": ('["10.0.0.5:12300"]', "each node's `curio run --listen` host:port: cordoned around the swap"),
        "via": ('"cli"', "how the host cordons a node: \"cli\", `curio cli --machine NODE cordon`; \"api\", the "
                         "node's JSON-RPC (Filecoin.Cordon at http://NODE/rpc/v0, with curl; env's CURIO_API_TOKEN)"),
        "cli": ('"curio"', "the curio program on the host (an absolute path, or a name in /usr/local/bin, /usr/bin, "
                           "/bin): `curio cli --machine NODE cordon`"),
        "sql": ('"psql"', "a PostgreSQL client on the host (psql, or YugabyteDB's ysqlsh) that reads the nodes' tasks"),
        "env": ('{ CURIO_DB_HOST = "10.0.0.2" }', "the harmony database, as Curio reads it (CURIO_DB_HOST, _PORT, "
                                                  "_NAME, _USER, _PASSWORD), and with via = \"api\" the nodes' "
                                                  "admin token (CURIO_API_TOKEN): sent on stdin, never printed"),
        "poll_s": ("30", "Curio's poll (pollRarely): a node may claim work this long after the cordon"),
        "post_wait_s": ("120", "how long a swap waits for a node's WdPost or WinPost before it refuses"),
        "max_cordon_s": ("1800", "the host uncordons after this long, whatever the swap does (never sooner than "
                                 "the swap's own longest: poll_s, drain_timeout_s, its stop, memory wait and starts)"),
        "tasks": ('["PoRep", "UpdateProve", "PSProve", "WdPost", "WinPost"]', "the task types the nodes send to "
                                                                             "this daemon"),
    },
}

_SPECS = {"host": spec.HostSpec, "daemon": spec.DaemonSpec, "memory": spec.MemorySpec, "gpu": spec.GpuSpec,
          "rollout": spec.RolloutSpec, "curio": spec.CurioSpec}
_DEFAULTS = {  # keys whose default is not a dataclass field of the same name
    ("", "inventory"): None, ("", "become"): "none", ("logs", "paths"): None,
    ("releases", "keep"): next(f.default for f in fields(spec.Playbook) if f.name == "keep_releases"),
    ("build", "dockerfile"): "Dockerfile.cuzk-rebuild", ("build", "context"): ".",
    ("build", "binary_in_image"): "/cuzk", ("build", "args"): None, ("build", "platform"): "linux/amd64",
}
_TOP_KINDS = {"inventory": ("str", False), "become": ("str", False)}


def schema(table: str) -> dict[str, tuple[str, bool]]:
    """The loader's keys for a table ("" is the top level; groups has names, not keys)."""
    return _TOP_KINDS if table == "" else {} if table == "groups" else SCHEMA[table]


def default(table: str, key: str) -> str:
    """The default as the page shows it: `-` where there is none (the key is required, or not set means
    "take it from the running daemon")."""
    if (table, key) in _DEFAULTS:
        value = _DEFAULTS[(table, key)]
    else:
        field = next((f for f in fields(_SPECS[table]) if f.name == key), None)
        value = None if field is None or field.default is MISSING else field.default
    if value is None or value in ((), ""):
        return "-"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def example() -> str:
    """A complete playbook using every key, each line commented: a valid playbook (tested)."""
    lines = []
    for table, (header, _) in TABLES.items():
        if header:
            lines += ["", header]
        if table == "groups":
            lines.append('farm = ["gpu-box"]                    # used as @farm')
        for key, (value, what) in DOCS[table].items():
            lines.append(f"{key} = {value}".ljust(37) + f" # {what}")
    return "\n".join(lines).strip() + "\n"


def render() -> str:
    """docs/playbook.md."""
    out = ["<!-- written by `bash scripts/docs` from the loader's schema (swapctl/playbook/reference.py): "
           "do not edit -->", "", "# Playbook reference", "",
           "A playbook (`./swapctl.toml`, `$SWAPCTL_PLAYBOOK` or `-p FILE`) says where the hosts are and how the "
           "daemon runs. `swapctl init` writes one to start from; `swapctl init --from HOST` writes it from the "
           "daemon running there. Unknown keys are errors with a \"did you mean\"; a bad playbook gets one line "
           "naming the file, the line, the key and the fix, and exit code 2:", "",
           "```", "swapctl: lab.toml:3: hosts.a.port: must be an integer, not 'x'", "```", "",
           "Numbers may be fractions (`min_available_gib = 22.5`). Local state lives in `~/.local/state/swapctl` "
           "and `~/.cache/swapctl`, never beside the playbook.", "", "## Every key at once", "",
           "```toml", example().rstrip(), "```"]
    for table, (header, what) in TABLES.items():
        out += ["", f"## {header.replace('gpu-box', 'NAME') or 'top level'}", "", what, ""]
        if table == "groups":
            out.append("Each key is a group's name, its value a list of host names under `[hosts]` or in the "
                       "inventory.")
            continue
        out += ["| key | kind | default | what it does |", "| --- | --- | --- | --- |"]
        for key, (kind, required) in schema(table).items():
            shown = "**required**" if required else default(table, key)
            what = DOCS[table][key][1].replace("|", "\\|")  # a bar inside a cell ends the cell
            out.append(f"| `{key}` | {KIND_NAMES[kind]} | {shown} | {what} |")
    return "\n".join(out) + "\n"

# The modules' settings (the playbook's [daemon], [memory], [gpu], [releases] and [curio] under the same
# names), checked as the playbook loader checks them, and the error every step raises.
from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts, sh_texts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.masking import looks_secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.playbook.spec import (
    CurioSpec,
    DaemonSpec,
    GpuSpec,
    MemorySpec,
    service_name,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.playbook.spec import (
    curio_problem as spec_curio_problem,
)
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.swap import inputs as core

scripts.TEXTS.update(sh_texts.TEXTS)

PROOF_LOG = core.PROOF_PASSED  # cuzk's line for a proof it verified (engine.rs:529): status's proof_log


class HostError(Exception):
    """A step that did not go: the message says what state the host is in; `result` the module's fields."""

    def __init__(self, message: str, **result: Any):
        super().__init__(message)
        self.message, self.result = message, result


@dataclass(frozen=True)
class Settings:
    """The playbook's [daemon], [memory], [gpu] and [releases] as the modules take them (same names)."""

    binary: str
    log: str
    args: tuple[str, ...] | None = None
    match: str | None = None
    ready_log: str = "cuzk-daemon ready"
    ready_port: int | None = None
    ready_timeout_s: float = 600
    ready_stable_s: float = 0
    stop_grace_s: float = 30
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[tuple[str, str], ...] = ()  # name -> value, never logged (the module's no_log option)
    unit: str = ""
    keep_loader_env: tuple[str, ...] = ()
    min_available_gib: float = 0
    release_timeout_s: float = 900
    gpu_slack_mib: float = 1024
    nvidia_smi_timeout_s: float = 10
    keep_releases: int = 5
    status_url: str = ""  # the daemon's GET /status ("": none)
    stop: str = "term"
    drain_timeout_s: float = 300
    drain_timeout: str = "stop"
    ready: str = "log"
    lock_silence_s: float = 30
    gone_before_stop: str = "refuse"
    user: str = ""
    host: str = ""  # the name the journal gives the host (the inventory's)
    curio: CurioSpec = CurioSpec()  # the Curio nodes that feed this cuzk, which stop "cordon" cordons

    @classmethod
    def of(cls, params: dict[str, Any]) -> Settings:
        d = {k: v for k, v in (params.get("daemon") or {}).items() if v is not None}
        c = {k: v for k, v in (params.get("curio") or {}).items() if v is not None}
        for key in ("nodes", "tasks"):
            if key in c:
                c[key] = tuple(str(w) for w in c[key])
        c["env"] = tuple((str(k), str(v)) for k, v in (c.get("env") or {}).items())
        d["curio"] = CurioSpec(**c)
        for table in ("memory", "gpu"):
            d.update({k: v for k, v in (params.get(table) or {}).items() if v is not None})
        keep = (params.get("releases") or {}).get("keep")
        if keep is not None:
            d["keep_releases"] = keep
        for key in ("env", "secret_env"):
            d[key] = tuple((str(k), str(v)) for k, v in (d.get(key) or {}).items())
        for key in ("args", "keep_loader_env"):
            if key in d:
                d[key] = tuple(str(a) for a in d[key])
        if d.get("unit"):
            d["unit"], ok = service_name(str(d["unit"]))
            if not ok:
                raise HostError(f"daemon.unit {d['unit']!r} is not a systemd service name (e.g. \"cuzk.service\"); "
                                "nothing changed")
        return cls(host=params.get("host") or socket.gethostname(), **d).checked()

    def checked(self) -> Settings:
        """Itself, once the keys that need each other agree (as the playbook loader holds them): a drain or a
        status probe reads the daemon's status_url, which must be an http:// URL."""
        if self.status_url and not re.fullmatch(r"http://[A-Za-z0-9.\-\[\]:]+(:\d+)?/\S*", self.status_url):
            raise HostError(f"daemon.status_url {self.status_url!r} is not an http:// URL (e.g. "
                            f"\"http://127.0.0.1:9821/status\", the daemon's status_listen); nothing changed")
        for key, needs in (("stop", "drain"), ("ready", "status")):
            if getattr(self, key) == needs and not self.status_url:
                raise HostError(f"daemon.{key} \"{needs}\" reads the daemon's own status: set daemon.status_url "
                                f"(cuzk's status_listen, e.g. \"http://127.0.0.1:9821/status\"); nothing changed")
        if not 5 <= self.lock_silence_s <= 3600 or self.drain_timeout_s <= 0:
            key = "lock_silence_s" if self.drain_timeout_s > 0 else "drain_timeout_s"
            raise HostError(f"daemon.{key} {getattr(self, key):g} is out of range (lock_silence_s: 5 to 3600 s; "
                            f"drain_timeout_s: more than 0 s); nothing changed")
        if problem := curio_problem(self.curio, self.stop):
            raise HostError(f"{problem}; nothing changed")
        return self

    def knobs(self) -> core.Knobs:
        """These settings as the swap core reads them (swapctl/swap/inputs.py): the playbook's own types."""
        daemon = DaemonSpec(
            binary=self.binary, args=self.args, match=self.match, log=self.log, ready_log=self.ready_log,
            ready_port=self.ready_port, ready_timeout_s=self.ready_timeout_s, ready_stable_s=self.ready_stable_s,
            stop_grace_s=self.stop_grace_s, status_url=self.status_url or None, stop=self.stop,
            drain_timeout_s=self.drain_timeout_s, drain_timeout=self.drain_timeout, ready=self.ready, cwd=self.cwd,
            env=self.env, secret_env=tuple(k for k, _ in self.secret_env), unit=self.unit or None,
            user=self.user or None, keep_loader_env=self.keep_loader_env, lock_silence_s=self.lock_silence_s,
            gone_before_stop=self.gone_before_stop)
        return core.Knobs(daemon, MemorySpec(self.min_available_gib, self.release_timeout_s, self.gpu_slack_mib),
                          GpuSpec(self.nvidia_smi_timeout_s), self.curio)

    @property
    def state(self) -> str:
        """Where releases, the journal and the lock live, as DaemonSpec.state_dir."""
        head, name = self.binary.rsplit("/", 1) if "/" in self.binary else ("", self.binary)
        return f"{head}/.swapctl/{name}"

    @property
    def environment(self) -> tuple[tuple[str, str], ...]:
        """daemon.env, then the secret ones."""
        return tuple({**dict(self.env), **dict(self.secret_env)}.items())

    def secret(self, name: str, value: str) -> bool:
        return name in dict(self.secret_env) or looks_secret(name, value)


def curio_problem(c: CurioSpec, stop: str) -> str:
    """What is wrong with the curio option, as the playbook loader says it of [curio] ("": nothing)."""
    if stop == "cordon" and not c.nodes:
        return ('daemon.stop "cordon" cordons the Curio nodes that feed the daemon: name them in curio.nodes '
                '(each node\'s `curio run --listen` host:port)')
    problem = spec_curio_problem(c, nodes=bool(c.nodes))
    return f"curio.{problem[0]}: {problem[1]}" if problem else ""

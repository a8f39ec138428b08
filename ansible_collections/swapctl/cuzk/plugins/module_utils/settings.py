# The modules' settings (the playbook's [daemon], [memory], [gpu], [releases] and [curio] under the same
# names), checked as the playbook loader checks them, and the error every step raises.
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.host import scripts, sh_texts
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.masking import looks_secret
from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.playbook.spec import (
    KEEP_RELEASES,
    CurioSpec,
    DaemonSpec,
    GpuSpec,
    MemorySpec,
    daemon_problem,
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


_D, _M, _G = DaemonSpec(), MemorySpec(), GpuSpec()  # the playbook's defaults: the one home of each


@dataclass(frozen=True)
class Settings:
    """The playbook's [daemon], [memory], [gpu] and [releases] as the modules take them (same names), each
    default the playbook's own (spec.py)."""

    binary: str
    log: str
    args: tuple[str, ...] | None = _D.args
    match: str | None = _D.match
    ready_log: str = _D.ready_log
    ready_port: int | None = _D.ready_port
    ready_timeout_s: float = _D.ready_timeout_s
    ready_stable_s: float = _D.ready_stable_s
    stop_grace_s: float = _D.stop_grace_s
    cwd: str | None = _D.cwd
    env: tuple[tuple[str, str], ...] = _D.env
    secret_env: tuple[tuple[str, str], ...] = ()  # name -> value, never logged (the module's no_log option)
    unit: str = ""  # "": none (DaemonSpec's None)
    keep_loader_env: tuple[str, ...] = _D.keep_loader_env
    min_available_gib: float = _M.min_available_gib
    release_timeout_s: float = _M.release_timeout_s
    gpu_slack_mib: float = _M.gpu_slack_mib
    nvidia_smi_timeout_s: float = _G.nvidia_smi_timeout_s
    keep_releases: int = KEEP_RELEASES
    status_url: str = ""  # the daemon's GET /status ("": none)
    stop: str = _D.stop
    drain_timeout_s: float = _D.drain_timeout_s
    drain_timeout: str = _D.drain_timeout
    ready: str = _D.ready
    lock_silence_s: float = _D.lock_silence_s
    gone_before_stop: str = _D.gone_before_stop
    user: str = ""  # "": root or the binary's owner (DaemonSpec's None)
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
        """Itself, once the keys that need each other or a range agree, as the playbook loader holds them (the
        same function says what is wrong: spec.daemon_problem)."""
        if wrong := daemon_problem(self.knobs().daemon):
            raise HostError(f"daemon.{wrong[0]}: {wrong[1]}; nothing changed")
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
        """Where releases, the journal and the lock live (DaemonSpec.state_dir: beside the binary)."""
        return DaemonSpec(binary=self.binary).state_dir

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

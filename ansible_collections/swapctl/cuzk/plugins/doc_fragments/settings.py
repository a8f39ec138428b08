# The options every swapctl.cuzk module takes: the swapctl playbook's [daemon], [memory], [gpu] and
# [releases] tables, by the same names (plugins/module_utils/args.py).
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  daemon:
    description:
      - The daemon, as the swapctl playbook's C([daemon]) table names it.
      - C(swapctl export-ansible) writes it as the group variable C(swapctl_daemon).
    type: dict
    required: true
    suboptions:
      binary:
        description: The path the daemon runs from; it becomes a symlink to the release that runs.
        type: str
        required: true
      log:
        description: The file the daemon's output is appended to (C(journal) with I(unit)).
        type: str
        required: true
      args:
        description: Its arguments; left out, the arguments the running daemon has.
        type: list
        elements: str
      match:
        description: A regular expression on the command line that finds the daemon; left out, the binary's name.
        type: str
      ready_log:
        description: The log line that says it is ready.
        type: str
        default: cuzk-daemon ready
      ready_port:
        description: A TCP port on 127.0.0.1 that answers once it is ready, instead of I(ready_log).
        type: int
      ready_timeout_s:
        description: How long a new start may take to be ready before it is rolled back.
        type: float
        default: 600
      ready_stable_s:
        description: Once ready, how long it must stay up, or it is rolled back.
        type: float
        default: 0
      stop_grace_s:
        description: Seconds between SIGTERM and SIGKILL.
        type: float
        default: 30
      status_url:
        description:
          - The daemon's own C(GET /status) (cuzk's C(status_listen)), read on the host, e.g.
            C(http://127.0.0.1:9821/status); needed by I(stop=drain) and I(ready=status).
        type: str
      stop:
        description:
          - C(term) sends SIGTERM at once (a proof in flight is lost); C(drain) first stops the daemon taking
            new work (SIGINT) and waits until no proof is in flight, at most I(drain_timeout_s).
          - C(cordon) first cordons the Curio nodes in I(curio.nodes) (C(curio cli --machine NODE cordon)), waits
            one poll and until they own no cuzk task and the daemon has nothing in flight, and uncordons them on
            every path, the host's own rollback included (swapctl's docs/curio.md).
        type: str
        default: term
        choices: [term, drain, cordon]
      drain_timeout_s:
        description: How long a drain waits for the proofs in flight.
        type: float
        default: 300
      drain_timeout:
        description: What a drain does when proofs are still in flight at its limit - C(stop) anyway, or C(refuse)
          (nothing is stopped, the task fails).
        type: str
        default: stop
        choices: [stop, refuse]
      ready:
        description:
          - When a new start counts as ready - C(log) (I(ready_log) or I(ready_port)), C(status) (I(status_url)
            answers), C(proof) (a proof that passed cuzk's self-check).
        type: str
        default: log
        choices: [log, status, proof]
      cwd:
        description: Where it runs; left out, where the running daemon runs.
        type: str
      env:
        description: Environment it gets on top of what the running daemon has.
        type: dict
        default: {}
      secret_env:
        description:
          - Environment values that are secrets (name to value), added to I(env); never in Ansible's output,
            the host's command lines or its log of module arguments (C(no_log)).
          - The playbook's C(secret_env) lists names of C(env); here the secret values travel apart.
        type: dict
        default: {}
      unit:
        description: The systemd service it runs under; stopped, started and rolled back through it.
        type: str
      user:
        description: Who the daemon runs as (a name or uid); left out, root or the binary's owner.
        type: str
      keep_loader_env:
        description: Loader variables (C(LD_PRELOAD)...) the running daemon's environment may pass on.
        type: list
        elements: str
        default: []
      lock_silence_s:
        description: The host's deploy lock ends when the module's heartbeat is silent this long (5 to 3600).
        type: float
        default: 30
      gone_before_stop:
        description: A daemon that exits by itself before the stop - C(refuse) (nothing changes), or C(deploy) on
          with none.
        type: str
        default: refuse
        choices: [refuse, deploy]
  memory:
    description: The memory wait between the stop and the start (the playbook's C([memory])).
    type: dict
    default: {}
    suboptions:
      min_available_gib:
        description: MemAvailable the host must have back before the start.
        type: float
        default: 0
      release_timeout_s:
        description: How long the old daemon's memory may take to come back.
        type: float
        default: 900
      gpu_slack_mib:
        description: GPU memory used may stay this far above the daemon-less level.
        type: float
        default: 1024
  gpu:
    description: How the GPUs are asked (the playbook's C([gpu])).
    type: dict
    default: {}
    suboptions:
      nvidia_smi_timeout_s:
        description: Each nvidia-smi call's time limit.
        type: float
        default: 10
  releases:
    description: The playbook's C([releases]).
    type: dict
    default: {}
    suboptions:
      keep:
        description: Releases kept on the host (the current one and the rollback target always).
        type: int
        default: 5
  curio:
    description: The playbook's C([curio]) (a host's own C(curio_nodes) as I(nodes)); read with I(daemon.stop=cordon).
    type: dict
    default: {}
    suboptions:
      nodes:
        description: The Curio nodes that feed this cuzk, each its C(curio run --listen) host:port.
        type: list
        elements: str
        default: []
      via:
        description: >-
          How the host cordons a node - C(cli), C(curio cli --machine NODE cordon); C(api), the node's JSON-RPC
          (C(Filecoin.Cordon) at C(http://NODE/rpc/v0) with curl, the admin token as C(CURIO_API_TOKEN) in I(env)).
        type: str
        default: cli
      cli:
        description: The curio executable on the host (an absolute path, or a name in the system's directories).
        type: str
        default: curio
      sql:
        description: A psql client on the host (psql, or YugabyteDB's ysqlsh), to read the nodes' tasks.
        type: str
        default: psql
      env:
        description: >-
          Curio's database variables (C(CURIO_DB_HOST), C(CURIO_DB_PASSWORD), ...) and with I(via=api)
          C(CURIO_API_TOKEN); never logged.
        type: dict
        default: {}
      poll_s:
        description: Curio's poll (pollRarely) - a node may claim work this long after the cordon.
        type: float
        default: 30
      post_wait_s:
        description: How long a swap waits for a PoSt task the nodes own before it refuses (no cordon meanwhile).
        type: float
        default: 120
      max_cordon_s:
        description: The host uncordons after this long, whatever the swap does.
        type: float
        default: 1800
      tasks:
        description: The task types the nodes send to this cuzk.
        type: list
        elements: str
        default: [PoRep, UpdateProve, PSProve, WdPost, WinPost]
  host:
    description: The host's name in the journal; the role passes C(inventory_hostname). Default, its hostname.
    type: str
"""

#!/usr/bin/python
# swapctl status, as facts.
from __future__ import annotations

DOCUMENTATION = r"""
module: status
short_description: The GPU daemon's host as facts (swapctl_status), for when conditions and reports
description:
  - Sets the fact C(swapctl_status) - the daemon (pid, release, command line, uptime, what its log holds since
    this release started - proofs and timing lines), memory, GPUs (nvidia-smi), the releases on the host, the
    systemd unit, the journal's last line and the release a rollback would go back to; with curio.nodes, Curio's
    cordon (one swapctl left, each node's flag, the nodes' cuzk tasks).
  - Changes nothing; reads what C(swapctl status) and C(swapctl history) read.
version_added: 0.1.0
author: swapctl (@swapctl)
extends_documentation_fragment: [swapctl.cuzk.settings]
options:
  proof_log:
    description: The log line a proof that passed cuzk's self-check writes (counted since the release started).
    type: str
    default: PoRep proof self-check PASSED
attributes:
  check_mode:
    description: The dry run - what would change, nothing changed.
    support: full
  diff_mode:
    description: Nothing to show - it changes nothing.
    support: none
  facts:
    description: Sets C(swapctl_status).
    support: full
"""

EXAMPLES = r"""
- swapctl.cuzk.status:
    daemon: "{{ swapctl_daemon }}"
- name: The canary's new build made proofs
  ansible.builtin.assert:
    that: swapctl_status.daemon.since_start.proofs > 0
"""

RETURN = r"""
ansible_facts:
  description: C(swapctl_status) - daemon, memory, gpus, gpu_error, releases, current, unit, journal, rollback_to,
    and cordon (with curio.nodes, as C(swapctl status --json) has it; else null).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.swapctl.cuzk.plugins.module_utils import args, engine  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec={**args.SETTINGS, "proof_log": {"type": "str", "default": engine.PROOF_LOG}},
                           supports_check_mode=True)
    args.main(module, lambda s: engine.status(s, module.params["proof_log"]))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# swapctl rollback, run by Ansible on the host itself.
from __future__ import annotations

DOCUMENTATION = r"""
module: rollback
short_description: Roll the GPU daemon back to the release that ran before, as swapctl rollback does
description:
  - Starts again what ran before the current release - the C(from) of the journal line that made it current
    (a failed start and its way back land nothing; a bad release is passed over, by the same rule) - or the
    release I(to), with the command line and environment it was recorded with.
  - The same host scripts and steps as M(swapctl.cuzk.swap); a rollback that does not come up goes back to
    what ran, and the task fails.
  - Check mode is the dry run.
version_added: 0.1.0
author: swapctl (@swapctl)
extends_documentation_fragment: [swapctl.cuzk.settings]
options:
  to:
    description: The release to go back to (a sha256 prefix, or an index of C(swapctl history), 1 = newest).
    type: str
attributes:
  check_mode:
    description: The dry run - what would change, nothing changed.
    support: full
  diff_mode:
    description: The command line and environment before and after, secrets as C(***).
    support: full
"""

EXAMPLES = r"""
- name: Back to what ran before
  swapctl.cuzk.rollback:
    daemon: "{{ swapctl_daemon }}"
    memory: "{{ swapctl_memory }}"
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
outcome:
  description: rolled-back, or dry-run.
  returned: always
  type: str
release:
  description: The release that ran (C(from)) and the one that runs now (C(to)).
  returned: always
  type: dict
steps:
  description: Seconds each step took.
  returned: when it swapped
  type: dict
journal:
  description: The line written to the host's journal.
  returned: when it swapped
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.swapctl.cuzk.plugins.module_utils import args, engine  # noqa: E402


def main() -> None:
    module = AnsibleModule(argument_spec={**args.SETTINGS, "to": {"type": "str"}}, supports_check_mode=True)
    args.main(module, lambda s: engine.rollback(s, module.params["to"], module.check_mode))


if __name__ == "__main__":
    main()

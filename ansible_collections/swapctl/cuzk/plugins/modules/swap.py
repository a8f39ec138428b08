#!/usr/bin/python
# The swap of swapctl deploy, run by Ansible on the host itself.
from __future__ import annotations

DOCUMENTATION = r"""
module: swap
short_description: Swap a new build of the GPU daemon in on the host, with swapctl's safe swap
description:
  - Runs C(swapctl deploy)'s host side on the target host, through the same host scripts
    (swapctl/host/swap), in the same order - lock, release, adopt, swap, auto-rollback, journal.
  - I(src) is a file already on the host (after M(ansible.builtin.copy) or M(ansible.builtin.get_url)
    with its checksum); it becomes a release under C(<binary dir>/.swapctl/<name>/releases/).
  - The running daemon is saved as a release first (adopt), stopped (SIGTERM, SIGKILL after
    I(daemon.stop_grace_s)), its memory awaited (MemAvailable, the old processes gone, GPU memory back), then the
    release is started with the recorded command line and environment and awaited until ready.
  - A start that is not ready is rolled back to what ran before, on the host, and the task fails with
    C(rolled_back=true).
  - Every outcome is a line of the host's journal, which C(swapctl history) and C(swapctl rollback) read too.
  - Check mode is the dry run; C(--diff) shows the command line and environment, secrets as C(***).
version_added: 0.1.0
author: swapctl (@swapctl)
extends_documentation_fragment: [swapctl.cuzk.settings]
options:
  src:
    description: The new build, a file on the host. One of I(src) and I(release).
    type: path
  sha256:
    description: The sha256 I(src) must have; a mismatch changes nothing.
    type: str
  release:
    description: A release already on the host (a sha256 prefix, or an index of C(swapctl history)) to swap to.
    type: str
  restart:
    description: Restart the daemon even when it runs this build already.
    type: bool
    default: false
attributes:
  check_mode:
    description: The dry run - what would change, nothing changed.
    support: full
  diff_mode:
    description: The command line and environment before and after, secrets as C(***).
    support: full
notes:
  - Needs only the host's Python 3 and the tools the swap scripts use (sh, flock, ps, awk, sha256sum or openssl).
"""

EXAMPLES = r"""
- name: The new build, checked on the way
  ansible.builtin.copy:
    src: build/cuzk
    dest: /data/cuzk.new
    mode: "0755"
    checksum: "{{ cuzk_sha1 }}"

- name: Swap it in
  swapctl.cuzk.swap:
    src: /data/cuzk.new
    sha256: "{{ cuzk_sha256 }}"
    daemon: "{{ swapctl_daemon }}"
    memory: "{{ swapctl_memory }}"
    host: "{{ inventory_hostname }}"
  register: swapped
"""

RETURN = r"""
outcome:
  description: deployed, unchanged, dry-run; a failure's journal line says rolled-back, no-daemon or rollback-failed.
  returned: always
  type: str
release:
  description: The release that ran (C(from)) and the one that runs now (C(to)), by id (12 hex digits).
  returned: always
  type: dict
rolled_back:
  description: The new build failed to start and what ran before runs again (the task failed).
  returned: always
  type: bool
steps:
  description: Seconds each step took (lock, release, adopt, stop, memory, start, ready).
  returned: when it swapped
  type: dict
journal:
  description: The line written to the host's journal (journal.jsonl).
  returned: when it swapped, or failed after the stop
  type: dict
pid:
  description: The daemon's pid now.
  returned: when it swapped
  type: int
adopt:
  description: Release ids saved from the running daemon or the file at the binary path before the stop.
  returned: always
  type: list
  elements: str
pruned:
  description: Release ids removed beyond I(releases.keep).
  returned: when it swapped
  type: list
  elements: str
log_tail:
  description: The failed build's last log lines.
  returned: on a failed start
  type: str
command:
  description: The command line it would start (check mode).
  returned: in check mode
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.swapctl.cuzk.plugins.module_utils import args, engine  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={**args.SETTINGS, "src": {"type": "path"}, "sha256": {"type": "str"},
                       "release": {"type": "str"}, "restart": {"type": "bool", "default": False}},
        required_one_of=[("src", "release")], mutually_exclusive=[("src", "release")], supports_check_mode=True)
    p = module.params
    args.main(module, lambda s: engine.deploy(s, p["src"], p["sha256"], p["release"], p["restart"],
                                              module.check_mode))


if __name__ == "__main__":
    main()

"""Ansible inventories (INI and YAML) as the hosts source: `swapctl -i FILE`, or the playbook's key."""

import json
import shutil

import pytest

from swapctl import playbook as pb
from swapctl.playbook.inventory import expand, load_inventory

from lab import swapctl

INI = """\
# a farm's inventory
bastion ansible_host=10.0.0.1

[rack_a]
gpu-a[01:03] ansible_user=root

[rack_b]
gpu-b1 ansible_host=10.1.2.11 ansible_port=40612   # its own port wins over rack_b's

[rack_b:vars]
ansible_user=ops
ansible_port=2222

[gpus:children]
rack_a
rack_b

[gpus:vars]
ansible_ssh_private_key_file=~/.ssh/farm
ansible_user=nobody
"""

YAML = """\
all:
  hosts:
    bastion: {ansible_host: 10.0.0.1}
  children:
    gpus:
      vars: {ansible_ssh_private_key_file: ~/.ssh/farm, ansible_user: nobody}
      children:
        rack_a:
          hosts:
            gpu-a[01:03]: {ansible_user: root}
        rack_b:
          vars: {ansible_user: ops, ansible_port: 2222}
          hosts:
            gpu-b1: {ansible_host: 10.1.2.11, ansible_port: 40612}
"""


@pytest.fixture(autouse=True)
def _state(swapctl_env):
    """Local state and ~/.ssh stay inside the test."""


@pytest.mark.parametrize("name,text", [("hosts.ini", INI), ("hosts.yml", YAML), ("hosts", YAML)])
def test_ini_and_yaml_inventories_give_the_same_hosts_and_groups(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    hosts, groups = load_inventory(str(tmp_path / name))
    assert groups == {"all": ("bastion", "gpu-a01", "gpu-a02", "gpu-a03", "gpu-b1"),
                      "rack_a": ("gpu-a01", "gpu-a02", "gpu-a03"), "rack_b": ("gpu-b1",),
                      "gpus": ("gpu-a01", "gpu-a02", "gpu-a03", "gpu-b1")}
    assert hosts["bastion"] == pb.HostSpec(name="bastion", address="10.0.0.1")
    # a child group's vars override its parent's; the host's own override both
    assert hosts["gpu-a02"] == pb.HostSpec(name="gpu-a02", address="gpu-a02", user="root",
                                           identity_file="~/.ssh/farm")
    assert hosts["gpu-b1"] == pb.HostSpec(name="gpu-b1", address="10.1.2.11", port=40612, user="ops",
                                          identity_file="~/.ssh/farm")


@pytest.mark.parametrize("pattern,hosts", [
    ("gpu-[1:3]", ["gpu-1", "gpu-2", "gpu-3"]),
    ("gpu-[08:10]", ["gpu-08", "gpu-09", "gpu-10"]),
    ("r[1:2]-g[1:2]", ["r1-g1", "r1-g2", "r2-g1", "r2-g2"]),
    ("plain", ["plain"]),
])
def test_host_ranges_expand_as_in_ansible(pattern, hosts):
    assert expand(pattern) == hosts


@pytest.mark.parametrize("text,message", [
    ("[gpus]\ngpu1 ansible_user\n", "hosts.ini:2: 'ansible_user' is not key=value"),
    ("[gpus:hostvars]\n", "hosts.ini:1: [gpus:hostvars]: unknown section kind"),
    ("[a:children]\nb\n[b:children]\na\n", "contains itself"),
    ("[gpus]\ngpu1 ansible_port=ssh\n", "host 'gpu1': ansible_port must be a port number, not 'ssh'"),
])
def test_a_bad_inventory_names_the_file_and_line(tmp_path, text, message):
    (tmp_path / "hosts.ini").write_text(text)
    with pytest.raises(pb.PlaybookError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_inventory(str(tmp_path / "hosts.ini"))


def test_the_playbooks_own_hosts_and_groups_win_over_the_inventorys(tmp_path):
    (tmp_path / "hosts.ini").write_text(INI)
    book = pb.parse('inventory = "hosts.ini"\n\n[hosts.gpu-b1]\naddress = "10.9.9.9"\n\n'
                    '[groups]\nrack_a = ["gpu-a01", "gpu-b1"]\n', str(tmp_path / "swapctl.toml"))
    assert book.hosts["gpu-b1"].address == "10.9.9.9"
    assert book.groups["rack_a"] == ("gpu-a01", "gpu-b1") and book.groups["gpus"][0] == "gpu-a01"
    with pytest.raises(pb.PlaybookError, match="not under \\[hosts\\] or in the inventory"):
        pb.parse('[groups]\nx = ["gpu-a01"]\n', str(tmp_path / "swapctl.toml"))


@pytest.mark.parametrize("name,text", [
    ("hosts.ini", "[rack_a]\ngpu-a1 swapctl_curio_nodes=10.20.1.11:12300\n"
                  "gpu-a2 swapctl_curio_nodes=10.20.1.12:12300,[fd00::1]:12301\ngpu-a3\n"),
    ("hosts.yml", "rack_a:\n  hosts:\n    gpu-a1: {swapctl_curio_nodes: [\"10.20.1.11:12300\"]}\n"
                  "    gpu-a2: {swapctl_curio_nodes: [\"10.20.1.12:12300\", \"[fd00::1]:12301\"]}\n    gpu-a3:\n"),
])
def test_an_inventory_host_names_its_own_curio_nodes_and_a_cordon_fleet_of_them_loads(tmp_path, name, text):
    """issue 43: `curio_nodes` could be set under [hosts.NAME] only, so a farm whose hosts live in its Ansible
    inventory had to restate each host in the playbook to swap them at once with stop = "cordon"."""
    (tmp_path / name).write_text(text)
    book = pb.parse(f'inventory = "{name}"\n[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\n'
                    f'stop = "cordon"\n[curio]\nnodes = ["10.0.0.5:12300"]\n', str(tmp_path / "swapctl.toml"))
    assert book.curio_of("gpu-a1").nodes == ("10.20.1.11:12300",)
    assert book.curio_of("gpu-a2").nodes == ("10.20.1.12:12300", "[fd00::1]:12301")
    assert book.curio_of("gpu-a3").nodes == ("10.0.0.5:12300",)  # none of its own: [curio] nodes
    from swapctl.cli.fleet import check_cordons
    check_cordons(book, [book.hosts["gpu-a1"], book.hosts["gpu-a2"]], 2)  # nodes of their own: at once


@pytest.mark.parametrize("value", ["10.20.1.11", "-o:12300", "10.20.1.11:70000", "' '"])
def test_a_bad_swapctl_curio_nodes_names_the_inventory_line_and_host(tmp_path, value):
    (tmp_path / "hosts.ini").write_text(f"[rack_a]\ngpu-a1\ngpu-a2 swapctl_curio_nodes={value}\n")
    with pytest.raises(pb.PlaybookError) as info:
        load_inventory(str(tmp_path / "hosts.ini"))
    said = str(info.value)
    assert said.startswith(f"{tmp_path}/hosts.ini:3: host 'gpu-a2': swapctl_curio_nodes: ") and "\n" not in said
    assert ("names no node" if value == "' '" else f"{value!r} is not a node's host:port") in said, said


def box_inventory(box, swapctl_env, name: str) -> str:
    """An inventory naming the box's sshd as gpu-01 in group gpus; its key known as ssh would know it."""
    s = box.server
    (swapctl_env / "home" / ".ssh").mkdir(exist_ok=True)
    shutil.copy(s.known_hosts, swapctl_env / "home" / ".ssh" / "known_hosts")
    path = box.workdir / name
    if name.endswith(".ini"):
        path.write_text(f"[gpus]\ngpu-01 ansible_host={s.address} ansible_port={s.port} ansible_user=root "
                        f"ansible_ssh_private_key_file={s.client_key}\n")
    else:
        path.write_text(f"gpus:\n  hosts:\n    gpu-01:\n      ansible_host: {s.address}\n"
                        f"      ansible_port: {s.port}\n      ansible_user: root\n"
                        f"      ansible_ssh_private_key_file: {s.client_key}\n")
    return str(path)


def test_dash_i_inventory_groups_are_hosts_for_status(box, prover, swapctl_env):
    pid = box.start_by_hand(prover)
    inventory = box_inventory(box, swapctl_env, "hosts.ini")
    r = swapctl("-i", inventory, "status", "@gpus", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    [daemon] = json.loads(r.stdout)["hosts"]["gpu-01"]["daemons"]
    assert daemon["pid"] == pid


def test_the_playbooks_inventory_key_deploys_to_an_inventory_host(box, prover, prover_b, swapctl_env):
    box.start_by_hand(prover)
    box_inventory(box, swapctl_env, "hosts.yml")
    box.playbook_path.write_text('inventory = "hosts.yml"  # beside this file\n\n' + box.playbook_path.read_text())
    r = swapctl("deploy", "gpu-01", "--binary", str(prover_b), "--yes", "--json", "-p", str(box.playbook_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hosts"]["gpu-01"]["outcome"] == "deployed"

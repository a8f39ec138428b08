"""Each host's Curio nodes (`curio_nodes` under [hosts.NAME], issue 43): loaded and checked as [curio] nodes,
the nodes a host's swap cordons, and the refusal of two hosts that would cordon one node at once."""

import pytest

from swapctl import playbook as pb
from swapctl.cli.deploy import shared_lines
from swapctl.cli.fleet import check_cordons
from swapctl.errors import BadInput, ExitCode, PlaybookError

DAEMON = '[daemon]\nbinary = "/data/cuzk"\nlog = "/data/cuzk.log"\nstop = "cordon"\n'
CURIO = '[curio]\nnodes = ["10.0.0.5:12300"]\ncli = "/opt/curio"\n'


def farm(a: str = "", b: str = "", rollout: str = "", curio: str = CURIO, daemon: str = DAEMON) -> str:
    """Two hosts, each with the lines given (e.g. its curio_nodes), and the playbook's other tables."""
    return (f'[hosts.gpu-a]\naddress = "10.20.1.11"\n{a}\n[hosts.gpu-b]\naddress = "10.20.1.12"\n{b}\n'
            f"{daemon}\n{curio}\n{rollout}")


def refused(text: str) -> PlaybookError:
    with pytest.raises(PlaybookError) as info:
        pb.parse(text, "farm.toml")
    assert "\n" not in str(info.value) and info.value.exit_code == ExitCode.BAD_INPUT
    return info.value


def test_a_hosts_own_nodes_are_what_its_swap_cordons_and_the_others_fall_back_to_curio_nodes():
    book = pb.parse(farm(a='curio_nodes = ["10.20.1.11:12300", "[fd00::1]:12301"]'), "farm.toml")
    assert book.hosts["gpu-a"].curio_nodes == ("10.20.1.11:12300", "[fd00::1]:12301")
    own, rest = book.curio_of("gpu-a"), book.curio_of("gpu-b")
    assert own.nodes == ("10.20.1.11:12300", "[fd00::1]:12301") and own.cli == "/opt/curio"  # [curio]'s other keys
    assert rest == book.curio and rest.nodes == ("10.0.0.5:12300",)
    assert book.curio_of("user@10.9.9.9").nodes == ("10.0.0.5:12300",)  # a host not under [hosts]


@pytest.mark.parametrize("line,fragment", [
    ('curio_nodes = ["10.20.1.11"]', "'10.20.1.11' is not a node's host:port"),
    ('curio_nodes = ["10.20.1.11:70000"]', "'10.20.1.11:70000' is not a node's host:port"),
    ('curio_nodes = ["-o:12300"]', "'-o:12300' is not a node's host:port"),
    ("curio_nodes = []", "names no node: name the nodes that feed this host's cuzk, or leave it out"),
    ('curio_nodes = "10.20.1.11:12300"', "must be a list of strings"),
])
def test_a_bad_curio_nodes_names_the_file_line_and_key(line, fragment):
    error = refused(farm(b=line))
    assert str(error).startswith("farm.toml:6: hosts.gpu-b.curio_nodes: ") and fragment in str(error), error


def test_cordon_needs_curio_nodes_or_every_hosts_own():
    mine = 'curio_nodes = ["10.20.1.11:12300"]'
    book = pb.parse(farm(a=mine, b='curio_nodes = ["10.20.1.12:12300"]', curio=""), "farm.toml")
    assert book.curio.nodes == () and book.curio_of("gpu-b").nodes == ("10.20.1.12:12300",)
    error = refused(farm(a=mine, curio=""))
    assert "daemon.stop: " in str(error) and "host 'gpu-b' names no curio_nodes" in str(error), error


@pytest.mark.parametrize("a,b", [
    ("", ""),  # both fall back to [curio] nodes
    ('curio_nodes = ["10.20.1.11:12300", "10.0.0.5:12300"]', ""),  # one names a node of [curio]
    ('curio_nodes = ["10.20.1.11:12300"]', 'curio_nodes = ["10.20.1.12:12300", "10.20.1.11:12300"]'),
])
def test_hosts_that_would_cordon_one_node_at_once_are_refused_a_swap_and_still_answer_status(a, b):
    """The refusal was made at load, so `status` and `history` refused the playbook too, at the moment an
    engineer most needs them; it now stops the verbs that swap (select_fleet), before any host."""
    book = pb.parse(farm(a, b, rollout="[rollout]\nparallel = 2\n"), "farm.toml")  # status, history: load
    with pytest.raises(BadInput) as info:
        check_cordons(book, list(book.hosts.values()), book.rollout.parallel)
    said = str(info.value)
    assert said.startswith("farm.toml: 2 hosts at once (--parallel or [rollout] parallel): "), said
    assert "hosts 'gpu-a' and 'gpu-b' would both cordon node" in said and "uncordon it under the other" in said
    assert "curio_nodes" in said and "parallel = 1" in said and "\n" not in said  # what to do


@pytest.mark.parametrize("text", [
    farm('curio_nodes = ["10.20.1.11:12300"]', 'curio_nodes = ["10.20.1.12:12300"]',
         rollout="[rollout]\nparallel = 2\n"),
    farm(rollout="[rollout]\nparallel = 1\n"),  # one host at a time: a shared node is cordoned by one swap at once
    farm(rollout="[rollout]\nparallel = 2\n", daemon=DAEMON.replace('"cordon"', '"term"')),  # no cordon
])
def test_hosts_with_nodes_of_their_own_or_one_at_a_time_or_no_cordon_load(text):
    pb.parse(text, "farm.toml")


def test_a_parallel_rollout_on_the_command_line_over_hosts_sharing_a_node_is_refused():
    book = pb.parse(farm(), "farm.toml")  # [rollout] parallel = 1: loads
    specs = list(book.hosts.values())
    with pytest.raises(BadInput) as info:
        check_cordons(book, specs, 2)
    said = str(info.value)
    assert said.startswith("farm.toml: 2 hosts at once (--parallel or [rollout] parallel): ") and "\n" not in said
    assert "would both cordon node 10.0.0.5:12300 ([curio] nodes)" in said and "--parallel 1" in said
    check_cordons(book, specs, 1)  # one at a time: allowed
    check_cordons(book, specs[:1], 2)  # one host: nothing shared
    own = pb.parse(farm('curio_nodes = ["10.20.1.11:12300"]', 'curio_nodes = ["10.20.1.12:12300"]'), "farm.toml")
    check_cordons(own, list(own.hosts.values()), 2)


def test_the_plan_warns_where_another_host_is_fed_by_a_node_this_swap_cordons():
    book = pb.parse(farm(), "farm.toml")
    [line] = shared_lines(book, "gpu-a")
    assert line.startswith("warning: node 10.0.0.5:12300 also feeds gpu-b: this swap cordons it for them too")
    own = pb.parse(farm('curio_nodes = ["10.20.1.11:12300"]'), "farm.toml")
    assert shared_lines(own, "gpu-a") == () and shared_lines(own, "gpu-b") == ()


@pytest.mark.parametrize("curio,fragment", [
    (CURIO + 'via = "api"\n', 'curio.via: "api" calls each node\'s Filecoin.Cordon, which needs an admin token: '
                              "put it in [curio] env as CURIO_API_TOKEN"),
    (CURIO + 'via = "rpc"\n', "curio.via: 'rpc': \"cli\" cordons with `curio cli --machine NODE cordon` on the host, "
                              '"api" through each node\'s JSON-RPC'),
    (CURIO + 'env = { CURIO_API_KEY = "x" }\n', "curio.env: 'CURIO_API_KEY' is not one of Curio's database "
                                               "variables (CURIO_DB_HOST,"),
])
def test_the_cordon_through_the_nodes_api_is_checked_at_load(curio, fragment):
    """[curio] via = "api" (issue 43, item 1): one of two words, and the token it needs in env, said in one line
    that names the key, before any host is asked."""
    error = refused(farm(curio=curio))
    assert fragment in str(error), error
    book = pb.parse(farm(curio=CURIO + 'via = "api"\nenv = { CURIO_API_TOKEN = "eyJ.x.y" }\n'), "farm.toml")
    assert book.curio.via == "api" and dict(book.curio.env) == {"CURIO_API_TOKEN": "eyJ.x.y"}
    assert pb.parse(farm(), "farm.toml").curio.via == "cli"

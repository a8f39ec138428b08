"""The plan's pure readers and choices, in tables: no host needed."""

import json

import pytest

from swapctl.errors import BadInput
from swapctl.fleet import fail_budget
from swapctl.logs.timings import release_segments
from swapctl.swap.plan import cgroup_unit, config_paths, read_catalog
from swapctl.swap.releases import Release


@pytest.mark.parametrize("argv, paths", [
    (("/data/cuzk", "--config", "/data/cuzk.toml"), ["/data/cuzk.toml"]),
    (("/data/cuzk", "-c", "a.toml", "--config=b.toml"), ["a.toml", "b.toml"]),
    (("/data/cuzk", "--config"), []),  # a flag without its value names nothing
    (("/data/cuzk", "--listen", "0.0.0.0:9820"), []),
])
def test_config_paths(argv, paths):
    assert config_paths(argv) == paths


@pytest.mark.parametrize("cgroup, unit", [
    ("0::/system.slice/cuzk.service\n", "cuzk.service"),  # cgroup v2
    ("12:pids:/system.slice/cuzk.service\n1:name=systemd:/system.slice/cuzk.service\n", "cuzk.service"),  # v1
    ("0::/user.slice/user-0.slice/session-3.scope\n", None),  # started by hand in a login session
    ("0::/user.slice/user-0.slice/user@0.service\n", None),
    ("", None),
])
def test_cgroup_unit(cgroup, unit):
    assert cgroup_unit(cgroup) == unit


def manifest(rid: str) -> str:
    return Release(sha256=rid * 4, size=1, name="cuzk", created="2026-01-01", by="t").to_json()


@pytest.mark.parametrize("facts, current, ids, journal", [
    ({}, None, [], 0),
    ({"binary": "file 3f2a"}, None, [], 0),
    ({"binary": "link /data/.swapctl/cuzk/releases/aaaaaaaaaaaa/cuzk",
      "releases": manifest("aaa") + "\n{\"sha256\": \"half-writ", "journal":
      json.dumps({"action": "deploy", "outcome": "deployed", "current": "aaaaaaaaaaaa"}) + "\n{\"cut"},
     "aaaaaaaaaaaa", ["aaaaaaaaaaaa"], 1),  # a half-written manifest and a cut journal line are skipped
])
def test_read_catalog(facts, current, ids, journal):
    cat = read_catalog(facts)
    assert (cat.current, sorted(cat.releases), len(cat.journal)) == (current, ids, journal)
    assert cat.deployed == (("aaaaaaaaaaaa",) if journal else ())


@pytest.mark.parametrize("max_fail, hosts, budget", [
    (None, 10, None), ("0", 10, 0), ("2", 10, 2), ("25%", 10, 2), ("50%", 3, 1), ("100%", 4, 4), ("0%", 8, 0),
])
def test_fail_budget(max_fail, hosts, budget):
    assert fail_budget(max_fail, hosts) == budget


@pytest.mark.parametrize("max_fail", ["two", "%", "1.5x"])
def test_a_fail_budget_that_is_no_number_is_bad_input(max_fail):
    with pytest.raises(BadInput, match="neither a number of hosts nor a percentage"):
        fail_budget(max_fail, 4)


@pytest.mark.parametrize("journal, size, segments", [
    ([], 100, []),
    ([{"log_offset": 0, "current": "aaa"}], 100, [("aaa", 0, 100)]),
    # what came before the first start is labelled by the release that start replaced
    ([{"log_offset": 40, "current": "bbb", "from": "aaaaaaaaaaaaffff"}], 100,
     [("aaaaaaaaaaaa", 0, 40), ("bbb", 40, 100)]),
    ([{"log_offset": 10, "current": "aaa"}, {"log_offset": 60, "current": "bbb"}, {"action": "history"}], 100,
     [("before", 0, 10), ("aaa", 10, 60), ("bbb", 60, 100)]),
    # a log truncated since: offsets past its end are skipped
    ([{"log_offset": 0, "current": "aaa"}, {"log_offset": 500, "current": "bbb"}], 100, []),
])
def test_release_segments(journal, size, segments):
    assert release_segments(journal, size) == segments

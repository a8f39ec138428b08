"""The collection's settings against the playbook's: args.py (what the modules accept), the doc fragment (what
ansible-doc shows) and engine.Settings (what the module reads) hold every key, kind, default and choice that
swapctl/playbook/schema.py and spec.py hold, so a key added to the playbook cannot be left out of the play
that `swapctl export-ansible` writes (issue 46: the module refused status_url, stop and drain_timeout_s)."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import yaml
from test_ansible import collection  # noqa: F401

from swapctl.playbook import options, schema, spec

TABLES, NOT_TAKEN, REQUIRED = options.TABLES, options.NOT_TAKEN, options.REQUIRED


def imported(installed, name: str):
    """A module of the installed collection (`installed`: its ANSIBLE_COLLECTIONS_PATH)."""
    sys.path.insert(0, str(installed))
    try:
        return __import__(f"ansible_collections.swapctl.cuzk.plugins.{name}", fromlist=["_"])
    finally:
        sys.path.remove(str(installed))


def test_every_table_of_the_playbook_is_taken_by_the_modules_or_said_why_not(collection):  # noqa: F811
    args = imported(collection, "module_utils.args")
    taken = set(args.SETTINGS) - {"host"}
    assert taken == {*TABLES, "releases"}
    assert set(schema.TOP) - taken <= set(NOT_TAKEN), "a new playbook table: take it in options.settings or say why not"


def test_the_modules_options_are_made_from_the_playbooks_schema_and_spec(collection):  # noqa: F811
    """args.py writes none of them: the collection's copy of playbook/options.py makes them, as swapctl's does."""
    args = imported(collection, "module_utils.args")
    assert args.SETTINGS == options.settings()
    assert "DAEMON" not in vars(args) and '"default"' not in (collection / "ansible_collections/swapctl/cuzk/plugins/"
                                                                "module_utils/args.py").read_text()


@pytest.mark.parametrize("table", TABLES)
def test_every_key_of_the_playbook_is_an_option_of_its_kind(table):
    kinds = {"str": "str", "int": "int", "num": "float", "strlist": "list", "strtable": "dict"}
    got = options.options(table)
    assert set(got) == set(schema.SCHEMA[table])
    for key, (kind, _) in schema.SCHEMA[table].items():
        assert got[key]["type"] == ("dict" if (table, key) in options.SECRET else kinds[kind]), (table, key)


def test_the_options_defaults_choices_and_secrets_are_the_playbooks():
    """Read off spec.py by hand: the values a module run gets when the play leaves a key out."""
    d, c = options.options("daemon"), options.options("curio")
    assert d["stop"] == {"type": "str", "default": "term", "choices": ["term", "drain", "cordon"]}
    assert d["ready"] == {"type": "str", "default": "log", "choices": ["log", "status", "proof"]}
    assert d["drain_timeout_s"] == {"type": "float", "default": 300}
    assert d["args"] == {"type": "list", "elements": "str"} and d["binary"] == {"type": "str", "required": True}
    assert d["secret_env"] == c["env"] == {"type": "dict", "default": {}, "no_log": True}
    assert c["tasks"]["default"] == ["PoRep", "UpdateProve", "PSProve", "WdPost", "WinPost"]
    assert options.settings()["releases"]["options"] == {
        "keep": {"type": "int", "default": spec.Playbook.__dataclass_fields__["keep_releases"].default}}


def test_the_doc_fragment_documents_each_option_as_args_declares_it(collection):  # noqa: F811
    args = imported(collection, "module_utils.args")
    fragment = imported(collection, "doc_fragments.settings").ModuleDocFragment
    documented = yaml.safe_load(fragment.DOCUMENTATION)["options"]
    assert set(documented) == set(args.SETTINGS)
    for table, option in args.SETTINGS.items():
        for key, declared in option.get("options", {}).items():
            doc = documented[table]["suboptions"][key]
            assert doc["description"], (table, key)
            assert {k: v for k, v in doc.items() if k != "description"} == \
                {k: v for k, v in declared.items() if k != "no_log"}, (table, key)


def test_engine_settings_defaults_are_the_playbooks(collection):  # noqa: F811
    engine = imported(collection, "module_utils.engine")
    ours = {f.name: f.default for f in dataclasses.fields(engine.Settings)}
    renamed = {"keep_releases": "keep_releases"}
    assert dataclasses.asdict(ours.pop("curio")) == dataclasses.asdict(spec.CurioSpec())  # [curio], whole
    for table, cls in (*((t, c) for t, c in TABLES.items() if t != "curio"), ("releases", None)):
        fields = dataclasses.fields(cls) if cls else [spec.Playbook.__dataclass_fields__["keep_releases"]]
        for f in fields:
            if f.name in REQUIRED or f.name == "secret_env":
                continue
            mine = ours[renamed.get(f.name, f.name)]
            theirs = "" if f.default is None and isinstance(mine, str) else f.default
            assert mine == theirs, (table, f.name, mine, theirs)


def test_a_drain_or_status_probe_without_status_url_is_one_clear_line(collection):  # noqa: F811
    engine = imported(collection, "module_utils.engine")
    base = {"binary": "/data/cuzk", "log": "/data/cuzk.log"}
    for extra, said in (({"stop": "drain"}, 'daemon.stop: "drain" reads the daemon\'s own status'),
                        ({"ready": "status"}, 'daemon.ready: "status" reads'),
                        ({"status_url": "file:///x"}, "daemon.status_url: 'file:///x' is not an http:// URL"),
                        ({"lock_silence_s": 1}, "daemon.lock_silence_s: must be between 5 and 3600 seconds, not 1"),
                        ({"drain_timeout_s": 0}, "daemon.drain_timeout_s: must be more than 0 s"),
                        ({"match": "cuzk("}, "daemon.match: not a valid regular expression"),
                        ({"binary": "data/cuzk"}, "daemon.binary: must be an absolute path on the host"),
                        ({"unit": "cuzk;reboot"}, "daemon.unit 'cuzk;reboot.service' is not a systemd service name"),
                        ({"unit": "-H evil.service"}, "is not a systemd service name")):
        with pytest.raises(engine.HostError, match=said):
            engine.Settings.of({"daemon": {**base, **extra}})
    assert engine.Settings.of({"daemon": {**base, "stop": "drain", "status_url": "http://127.0.0.1:9821/status"}})
    assert engine.Settings.of({"daemon": {**base, "unit": "cuzk"}}).unit == "cuzk.service"  # as the loader takes it


@pytest.mark.parametrize("curio,said", [
    ({}, 'daemon.stop "cordon" cordons the Curio nodes that feed the daemon: name them in curio.nodes'),
    ({"nodes": ["10.0.0.5"]}, "curio.nodes: '10.0.0.5' is not a node's host:port"),
    ({"nodes": ["-oProxyCommand=x:1"]}, "is not a node's host:port"),
    ({"nodes": ["10.0.0.5:12300"], "cli": "curio; rm -rf /"}, "curio.cli: 'curio; rm -rf /' is not a program's"),
    ({"nodes": ["10.0.0.5:12300"], "env": {"LD_PRELOAD": "/x.so"}}, "curio.env: 'LD_PRELOAD' is not one of"),
    ({"nodes": ["10.0.0.5:12300"], "tasks": ["PoRep'--"]}, "curio.tasks: \"PoRep'--\" is not a Curio task name"),
    ({"nodes": ["10.0.0.5:12300"], "max_cordon_s": 5}, "curio.max_cordon_s: must be at least poll_s (30 s)"),
])
def test_a_cordon_the_module_cannot_make_safely_is_one_clear_line_and_changes_nothing(collection, curio, said):  # noqa: F811
    """issue 43: the modules refused stop = "cordon"; they take [curio] now, checked as the loader checks it
    (each word reaches the host's shell scripts and SQL), before anything on the host is touched."""
    engine = imported(collection, "module_utils.engine")
    daemon = {"binary": "/data/cuzk", "log": "/data/cuzk.log", "stop": "cordon"}
    with pytest.raises(engine.HostError) as info:
        engine.Settings.of({"daemon": daemon, "curio": curio})
    assert said in info.value.message and info.value.message.endswith("; nothing changed"), info.value.message
    ok = engine.Settings.of({"daemon": daemon, "curio": {"nodes": ["10.0.0.5:12300", "[fd00::1]:12301"]}})
    assert ok.curio.nodes == ("10.0.0.5:12300", "[fd00::1]:12301")


def test_the_doc_fragment_says_each_key_in_the_playbook_references_words(collection):  # noqa: F811
    """issue 46: the fragment is generated (swapctl/playbook/ansible_doc.py), each line docs/playbook.md's own
    (reference.DOCS, `code` as ansible-doc's C(code)); it was a third hand-written copy of every key's default
    and kind. Only where a module takes a key otherwise (secret_env's values) are the words its own."""
    import re

    from swapctl.playbook.ansible_doc import OWN
    from swapctl.playbook.reference import DOCS

    fragment = imported(collection, "doc_fragments.settings").ModuleDocFragment
    documented = yaml.safe_load(fragment.DOCUMENTATION)["options"]
    for table in TABLES:
        assert set(documented[table]["suboptions"]) == set(DOCS[table]), table
        for key, doc in documented[table]["suboptions"].items():
            words = OWN.get((table, key)) or re.sub(r"`([^`]+)`", r"C(\1)", DOCS[table][key][1])
            assert doc["description"] in (words, f"{words}."), (table, key, doc["description"])
    said = documented["daemon"]["suboptions"]
    assert said["ready_log"]["description"] == "extended regex: this line in the log after the start means ready."
    assert "the secret values travel apart" in said["secret_env"]["description"]

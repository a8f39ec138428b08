# The modules' options, in one place: the playbook's tables (swapctl/playbook/schema.py, spec.py) by their names
# and defaults. Documented once too, in plugins/doc_fragments/settings.py; tests/test_ansible_settings.py fails
# when a key, kind, default or choice here, there or in engine.Settings differs from the playbook's.
from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

DAEMON = {
    "binary": {"type": "str", "required": True},
    "log": {"type": "str", "required": True},
    "args": {"type": "list", "elements": "str"},
    "match": {"type": "str"},
    "ready_log": {"type": "str", "default": "cuzk-daemon ready"},
    "ready_port": {"type": "int"},
    "ready_timeout_s": {"type": "float", "default": 600},
    "ready_stable_s": {"type": "float", "default": 0},
    "stop_grace_s": {"type": "float", "default": 30},
    "status_url": {"type": "str"},
    "stop": {"type": "str", "default": "term", "choices": ["term", "drain", "cordon"]},
    "drain_timeout_s": {"type": "float", "default": 300},
    "drain_timeout": {"type": "str", "default": "stop", "choices": ["stop", "refuse"]},
    "ready": {"type": "str", "default": "log", "choices": ["log", "status", "proof"]},
    "cwd": {"type": "str"},
    "env": {"type": "dict", "default": {}},
    "secret_env": {"type": "dict", "default": {}, "no_log": True},
    "unit": {"type": "str"},
    "user": {"type": "str"},
    "keep_loader_env": {"type": "list", "elements": "str", "default": []},
    "lock_silence_s": {"type": "float", "default": 30},
    "gone_before_stop": {"type": "str", "default": "refuse", "choices": ["refuse", "deploy"]},
}
MEMORY = {
    "min_available_gib": {"type": "float", "default": 0},
    "release_timeout_s": {"type": "float", "default": 900},
    "gpu_slack_mib": {"type": "float", "default": 1024},
}
CURIO = {
    "nodes": {"type": "list", "elements": "str", "default": []},
    "cli": {"type": "str", "default": "curio"},
    "sql": {"type": "str", "default": "psql"},
    "env": {"type": "dict", "default": {}, "no_log": True},
    "poll_s": {"type": "float", "default": 30},
    "post_wait_s": {"type": "float", "default": 120},
    "max_cordon_s": {"type": "float", "default": 1800},
    "tasks": {"type": "list", "elements": "str", "default": ["PoRep", "UpdateProve", "PSProve", "WdPost", "WinPost"]},
}
SETTINGS = {
    "daemon": {"type": "dict", "required": True, "options": DAEMON},
    "memory": {"type": "dict", "default": {}, "options": MEMORY},
    "gpu": {"type": "dict", "default": {}, "options": {"nvidia_smi_timeout_s": {"type": "float", "default": 10}}},
    "releases": {"type": "dict", "default": {}, "options": {"keep": {"type": "int", "default": 5}}},
    "curio": {"type": "dict", "default": {}, "options": CURIO},
    "host": {"type": "str"},
}


def main(module: Any, do: Callable[[Any], dict[str, Any]]) -> None:
    """Runs `do(settings)` for `module`: its result as the module's, a HostError as a failure with its fields;
    the daemon's secret values (secret_env, and env values that look like secrets) never in the output."""
    from ansible_collections.swapctl.cuzk.plugins.module_utils.engine import HostError, Settings

    try:
        settings = Settings.of(module.params)
        for k, v in settings.environment:
            if v and settings.secret(k, v):
                module.no_log_values.add(v)
        result = do(settings)
    except HostError as exc:
        module.fail_json(msg=exc.message, changed=exc.result.get("rolled_back", False) or "journal" in exc.result,
                         **exc.result)
    except Exception as exc:  # noqa: BLE001 - the module's one answer: what broke, never a bare traceback
        module.fail_json(msg=f"{type(exc).__name__}: {exc}", exception=traceback.format_exc())
    if not module._diff:
        result.pop("diff", None)
    for warning in result.pop("warnings", ()):  # ansible-core 2.19 deprecates them as a result's key
        module.warn(warning)
    module.exit_json(**result)

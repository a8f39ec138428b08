# The modules' options: the playbook's tables by their names, kinds, defaults and choices, made from the
# playbook's own schema and spec (swapctl/playbook/options.py, which scripts/build_collection.py ships), never
# written again here. Documented in plugins/doc_fragments/settings.py; tests/test_ansible_settings.py fails when
# the fragment or engine.Settings differs from them.
from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from ansible_collections.swapctl.cuzk.plugins.module_utils.swapctl.playbook.options import settings

# every module's options, made from the playbook's schema and spec (swapctl/playbook/options.py, shipped)
SETTINGS = settings()


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

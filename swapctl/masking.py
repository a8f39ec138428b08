"""Which environment values are secrets, for what swapctl shows: the playbook's `secret_env`, and any
whose name or value looks like one. Shown as `***`; a false alarm costs a look at the host."""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"

# names: AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, DB_PASSWORD, PGPASSWORD, API_KEY, PRIVATE_KEY, *_CREDENTIALS...
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASS(WORD|WD|PHRASE)?($|_)|PASSWORD|PWD$|CREDENTIAL|PRIVATE|API_?KEY|"
                          r"ACCESS_?KEY|AUTH|COOKIE|SESSION", re.IGNORECASE)
_NOT_SECRET_NAME = {"PWD", "OLDPWD"}  # the working directory, not a password
# values: a private key, a URL with a password, AWS key ids, GitHub/Slack tokens, JWTs
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|://[^/\s:@]*:[^/\s@]+@|\bA[KS]IA[0-9A-Z]{16}\b|"
                           r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}|\bxox[abposr]-|"
                           r"\beyJ[\w-]{8,}\.[\w-]{8,}\.")


def looks_secret(name: str, value: str) -> bool:
    """Whether a variable's name or value looks like a secret's."""
    if name.upper() not in _NOT_SECRET_NAME and _SECRET_NAME.search(name):
        return True
    return bool(_SECRET_VALUE.search(value))


def masked_env(env: object, secret_env: Iterable[str] = ()) -> list[list[str]] | None:
    """A recorded environment ([[name, value], ...], as a manifest holds it) with its secrets as `***`:
    those `secret_env` lists and those that look like secrets. Anything not of that shape is dropped."""
    if not isinstance(env, (list, tuple)):
        return None
    listed = set(secret_env)
    shown = []
    for pair in env:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            continue  # a manifest is read from the host: what is not a pair is not shown
        name, value = pair
        shown.append([name, MASK if name in listed or looks_secret(name, value) else value])
    return shown

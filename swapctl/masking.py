"""Which environment values are secrets, for what swapctl shows: the playbook's `secret_env`, and any
whose name or value looks like one. Shown as `***`; a false alarm costs a look at the host."""

from __future__ import annotations

import re
import shlex
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


def masked_unit_text(text: str, secret_env: Iterable[str] = ()) -> str:
    """A unit file's text (`systemctl cat`) with the secret values of its `Environment=` lines as `***`."""
    listed = set(secret_env)

    def word(assignment: str) -> str:
        name, _, value = assignment.partition("=")
        if name in listed or looks_secret(name, value):
            value = MASK
        return f'"{name}={value}"' if " " in value else f"{name}={value}"

    out = []
    for line in text.splitlines():
        key, sep, rest = line.partition("=")
        if sep and key.strip() == "Environment":
            try:
                words = shlex.split(rest)
            except ValueError:
                words = [f"{rest.partition('=')[0]}={MASK}"]  # quoting it cannot read: show no value
            line = f"{key}={' '.join(word(w) for w in words)}"
        out.append(line)
    return "\n".join(out)

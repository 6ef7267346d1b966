"""`$(NAME)` in a program's argv, expanded with Kubernetes' rules, once, in the pod.

Why this exists: Kubernetes expands `$(NAME)` in a container's `command` and
`args` from the variables it declares, when it starts the container. A
replica's cluster variables (`TF_CONFIG`, `PS_HOSTS`, `WORKER_HOSTS`,
`CHIEF_HOSTS`, `JOB_NAME`, `TASK_INDEX`) only exist later, once every pod of
the run has an IP and the bootstrap has read `cluster.json`; so the bootstrap
expands the entrypoint and args itself, right before it starts the program,
against the program's whole environment. Seed-era programs that take their
cluster only from flags (`--job_name=$(JOB_NAME)`) then run unchanged.

The rules are those of k8s.io/kubernetes `third_party/forked/golang/expansion`:
- `$(NAME)` becomes the value of NAME; a NAME that is not set stays as written;
- `$$` becomes `$`, so `$$(NAME)` is the literal text `$(NAME)`;
- a `$` before anything else (or at the end) stays, and so does `$(` with no
  closing `)`;
- the name is everything up to the first `)`: `$()` or `$(A B)` name no
  variable and stay as written;
- values are inserted as they are, never expanded again.

`escape` is the inverse for a text that must pass through Kubernetes'
expansion unchanged (`$` doubled), so that only this one expansion applies.
Standard library only: shipped to pods with the other runtime files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

OPERATOR = "$"
OPENER = "("
CLOSER = ")"


def expand_with(text: str, lookup: Callable[[str], str | None]) -> str:
    """`text` with every reference replaced by `lookup(name)`; None keeps `$(name)` as written."""
    parts: list[str] = []
    copied_to = 0
    cursor = 0
    while cursor < len(text) - 1:  # a `$` in the last place is never an operator
        if text[cursor] != OPERATOR:
            cursor += 1
            continue
        parts.append(text[copied_to:cursor])
        following = text[cursor + 1]
        if following == OPERATOR:
            parts.append(OPERATOR)
            cursor += 2
        elif following == OPENER:
            closer = text.find(CLOSER, cursor + 2)
            if closer < 0:  # no closing `)`: `$(` is plain text, scanning goes on after it
                parts.append(OPERATOR + OPENER)
                cursor += 2
            else:
                name = text[cursor + 2 : closer]
                value = lookup(name)
                parts.append(OPERATOR + OPENER + name + CLOSER if value is None else value)
                cursor = closer + 1
        else:
            parts.append(OPERATOR + following)
            cursor += 2
        copied_to = cursor
    parts.append(text[copied_to:])
    return "".join(parts)


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` with `$(NAME)` replaced by `variables[NAME]` where set (Kubernetes' rules)."""
    return expand_with(text, variables.get)


def expand_argv(argv: Sequence[str], variables: Mapping[str, str]) -> list[str]:
    """Every item of `argv` expanded against `variables`."""
    return [expand(item, variables) for item in argv]


def escape(text: str) -> str:
    """`text` with every `$` doubled: one expansion gives back `text` whatever is set."""
    return text.replace(OPERATOR, OPERATOR + OPERATOR)

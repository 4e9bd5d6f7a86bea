"""YAML files from users (gate configs, scenario files, agent configs), read with a bound on
what they may expand to.

YAML aliases (``*name``) repeat an anchored part without writing it again, and aliases of
aliases multiply: a file of a few hundred bytes can stand for billions of values (the
"billion laughs"). PyYAML builds such a document cheaply, by sharing, but anything that then
walks it as the tree it stands for (locating keys for error messages, validating, printing)
takes gigabytes and minutes. So a file may use aliases, but they may add at most
``ALIAS_BUDGET`` values beyond those the file writes out, and may not refer to themselves;
a file past that is refused before anything walks it, as a usage error.
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import UsageError

ALIAS_BUDGET = 10_000  # values aliases may add: far more than a config repeats by hand


def compose(text: str, source: str) -> yaml.Node | None:
    """The node graph of ``text`` (None for an empty document). Raises ``yaml.YAMLError`` for
    malformed YAML (callers say where), UsageError for aliases past the budget or nesting
    too deep to read."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:  # PyYAML composes recursively
        raise UsageError(f"{source}: nested too deeply to read; flatten the file") from None
    if node is not None:
        _check_expansion(node, source)
    return node


def construct(node: yaml.Node | None, source: str) -> Any:
    """The Python data of a node graph from :func:`compose`, as ``yaml.safe_load`` builds it
    (merge keys, ``<<``, are applied to ``node`` in place)."""
    if node is None:
        return None
    try:
        return yaml.SafeLoader("").construct_document(node)
    except RecursionError:
        raise UsageError(f"{source}: nested too deeply to read; flatten the file") from None


def load(text: str, source: str) -> Any:
    """The Python data of ``text`` (as ``yaml.safe_load``), checked as :func:`compose` does."""
    return construct(compose(text, source), source)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Count the values the document stands for, each aliased node as often as it is
    referred to, without expanding anything: one pass over the nodes, sizes memoised."""
    size: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # a loop, not recursion: the file decides how deep it nests
        node, finished = stack.pop()
        key = id(node)
        if finished:
            visiting.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            continue
        if key in size:
            continue
        if key in visiting:  # reached again below itself: the alias refers to its own anchor
            raise UsageError(f"{source}: a YAML alias refers to the value that contains it (at line "
                             f"{node.start_mark.line + 1}); write the value out")
        visiting.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node))
    extra = size[id(root)] - len(size)
    if extra > ALIAS_BUDGET:
        raise UsageError(f"{source}: YAML aliases (*name) would expand this file by {extra:,} values, more "
                         f"than the {ALIAS_BUDGET:,} allowed (a small file must not take gigabytes to read); "
                         "write the repeated parts out")

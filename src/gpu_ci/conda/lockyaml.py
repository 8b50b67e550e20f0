"""A lock's YAML read safely: plain data, errors naming their line, no alias bombs.

conda-lock's unified lock and pixi's lock are YAML. They are read with libyaml's safe loader
where PyYAML has it (several times faster on a large CUDA lock), else the pure-Python one;
both build only plain data and report a bad line the same way.
"""

from __future__ import annotations

import re
from typing import Any

from gpu_ci.errors import GpuCiError


def yaml_loader(libyaml: bool = True) -> Any:
    """The safe YAML loader: libyaml's ``CSafeLoader`` where PyYAML was built with it (a
    scikit-learn-sized CUDA lock, thousands of lines, parses several times faster than with
    the pure-Python ``SafeLoader``), else ``SafeLoader``. Both build only plain data (the same
    ``SafeConstructor``) and report a bad line the same way."""
    import yaml

    if libyaml and getattr(yaml, "__with_libyaml__", False):
        return getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.SafeLoader


def _expanded_size(doc: Any, limit: int) -> int:
    """The size of ``doc`` written out, aliases expanded, up to ``limit``.

    The characters of its strings plus one per other node, each alias counted as the
    data it stands for (the count stops once past ``limit``). A loader shares one object per
    anchor, so loading stays cheap, but every ``str()`` of the data (platforms, names, URLs,
    the messages quoting them) writes it out in full: ten aliases to a list of ten aliases
    ... grow tenfold a line. Without aliases the count stays within a few times the text's
    length. One pass over each container (by id; a container inside itself counts once)."""
    if not isinstance(doc, (dict, list)):
        return len(doc) if isinstance(doc, str) else 1
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        obj, done = stack.pop()
        children = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
        if not done:
            if id(obj) in sizes:
                continue
            sizes[id(obj)] = 1  # in progress: a cycle's back reference counts once
            stack.append((obj, True))
            stack.extend(
                (c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in sizes
            )
            continue
        size = 1
        for child in children:
            if isinstance(child, str):
                size += len(child)
            elif isinstance(child, (dict, list)):
                size += sizes[id(child)]
            else:
                size += 1
        sizes[id(obj)] = size
        if size > limit:
            return size
    return sizes[id(doc)]


_YAML_BREAK = re.compile("\r\n|[\r\n\x85\u2028\u2029]")


def _reader_line(exc: Exception, text: str, loader: Any) -> int | None:
    """The line of a character YAML's reader refuses (a control character, U+FFFE...): its
    error has a position, not a line mark; libyaml counts the position in UTF-8 bytes, the
    pure-Python reader in characters. Lines end as YAML's do (``\\r\\n``, ``\\r``, ...)."""
    import yaml

    position = getattr(exc, "position", None)
    if not isinstance(position, int):
        return None
    if isinstance(loader, type) and issubclass(loader, yaml.reader.Reader):
        before = text[:position]
    else:
        before = text.encode("utf-8", "surrogatepass")[:position].decode("utf-8", "ignore")
    return len(_YAML_BREAK.findall(before)) + 1


def load_yaml(text: str, path: str, loader: Any = None) -> Any:
    """A lock's YAML as plain data, or an error naming its line.

    Aliases that would expand the text many times over (as in 'billion laughs') are
    refused: lock writers use none."""
    import yaml

    try:
        doc = yaml.load(text, Loader=loader or yaml_loader())  # a safe loader, either way
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else _reader_line(exc, text, loader or yaml_loader())
        where = f" (line {line})" if line else ""
        raise GpuCiError(f"{path} is not valid YAML{where}.") from None
    except RecursionError:  # SafeLoader recurses per level; libyaml stops at 1000 (a YAMLError)
        raise GpuCiError(f"{path} is not valid YAML (nested too deeply).") from None
    limit = 4 * len(text) + 10_000
    if _expanded_size(doc, limit) > limit:
        raise GpuCiError(
            f"{path}: its YAML aliases (*name) expand its {len(text)} characters to more "
            f"than {limit} characters of data (anchors reused as in 'billion laughs'); "
            "lock writers use none. Re-lock it."
        )
    return doc


__all__ = ["load_yaml", "yaml_loader"]

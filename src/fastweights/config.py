"""Typed configs: dataclasses + YAML presets + ``key=value`` overrides (OmegaConf).

The presets ship inside the package as ``fastweights/configs/<recipe>/<preset>.yaml`` (package data,
located with :mod:`importlib.resources`), so a non-editable install finds them from any folder.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import sys
import textwrap
import tokenize
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, get_args, get_type_hints, overload

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

__all__ = [
    "CONFIG_DIR",
    "available_presets",
    "preset_path",
    "preset_description",
    "ConfigKey",
    "ConfigSection",
    "config_sections",
    "load_config",
    "apply_overrides",
    "config_to_yaml",
    "config_from_yaml",
    "config_from_mapping",
    "load_run_config",
    "deprecated_keys",
    "rename_deprecated",
    "warn_deprecated",
]

T = TypeVar("T")
M = TypeVar("M", bound=MutableMapping[str, Any])

# The package is installed as plain files (setuptools wheels are never zip-imported), so the
# resource folder is a real directory.
CONFIG_DIR = Path(str(resources.files("fastweights") / "configs"))

_YAML_SUFFIXES = (".yaml", ".yml")


def available_presets(recipe: str) -> list[str]:
    """Names of the presets shipped for ``recipe`` (sorted; empty for an unknown recipe)."""
    folder = resources.files("fastweights") / "configs" / recipe
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def preset_path(recipe: str, preset: str) -> Path:
    """Path of the YAML file that ``--preset`` names.

    A value ending in ``.yaml``/``.yml`` is a file path; anything else is the name of a preset
    shipped in ``fastweights/configs/<recipe>/<preset>.yaml``.

    Raises:
        FileNotFoundError: a YAML path that does not exist (naming it), or an unknown preset name
            (listing the available presets of ``recipe``).
    """
    if preset.endswith(_YAML_SUFFIXES):
        path = Path(preset)
        if not path.is_file():
            named = path.stem if path.parent == Path(".") and path.stem in available_presets(recipe) else None
            hint = f" (for the shipped preset, give its name: --preset {named})" if named else ""
            raise FileNotFoundError(f"preset: YAML file {path} not found{hint}")
        return path
    path = CONFIG_DIR / recipe / f"{preset}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"preset: unknown preset {preset!r} for {recipe!r}; available presets: "
            f"{available_presets(recipe)} (or give a path ending in .yaml)"
        )
    return path


# words whose final period does not end a sentence ("Irie et al. 2022", "e.g. Omniglot")
_ABBREVIATIONS = ("al", "cf", "e.g", "etc", "i.e", "incl", "vs")


def _at_depth_zero(text: str, stop: Callable[[str, int], bool]) -> int:
    """Index of the first character outside brackets for which ``stop(text, index)`` holds (``len(text)``
    if there is none)."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and stop(text, i):
            return i
    return len(text)


def _sentence_end(text: str, i: int) -> bool:
    if text[i] != "." or text[i + 1 : i + 2] not in ("", " "):
        return False
    return text[:i].rsplit(" ", 1)[-1].lower() not in _ABBREVIATIONS


def preset_description(recipe: str, preset: str, width: int = 100) -> str:
    """One line (at most ``width`` characters) describing a shipped preset, from the comment its YAML file
    starts with: the first sentence, without its parentheses and anything after a ``;``; still too long,
    the part before its first ``:`` when that says enough (30 characters or more), else the sentence
    shortened at a word with ``…``. ``""`` for a file that starts with no comment.

    Raises:
        FileNotFoundError: an unknown preset (as :func:`preset_path`).
    """
    lines = []
    for line in preset_path(recipe, preset).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    text = " ".join(part for part in lines if part)
    text = text[: _at_depth_zero(text, _sentence_end)]
    text = text[: _at_depth_zero(text, lambda t, i: t[i] == ";")]
    while True:  # innermost parentheses first
        shorter = re.sub(r"\s*\([^()]*\)", "", text)
        if shorter == text:
            break
        text = shorter
    text = " ".join(text.split()).rstrip(",.")
    if len(text) > width:
        head = text[: _at_depth_zero(text, lambda t, i: t[i : i + 2] == ": ")]
        text = head if 30 <= len(head) <= width else textwrap.shorten(text, width, placeholder=" …")
    return text


def _key_line(node: yaml.Node | None, dotted_key: str) -> int | None:
    """1-based line of ``dotted_key`` (``a.b.c``) in a composed YAML tree, or ``None`` if absent."""
    for part in dotted_key.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        match = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part]
        if not match:
            return None
        key_node, node = match[0]
    return key_node.start_mark.line + 1


def _unknown_key_hint(err: OmegaConfBaseException) -> str:
    """The keys an unknown key of a config section could have been (``; expected one of [...]``), for an
    unknown key that OmegaConf found no close match for; ``""`` for any other error."""
    section, key = getattr(err, "object_type", None), getattr(err, "key", None)
    if not (isinstance(err, ConfigKeyError) and isinstance(section, type) and is_dataclass(section)):
        return ""
    names = [f.name for f in dataclasses.fields(section)]
    if not isinstance(key, str) or key in names or "did you mean" in str(err).lower():
        return ""
    return f"; expected one of {names}"


def _config_error(err: OmegaConfBaseException, where: str = "config") -> ValueError:
    """One-line ``ValueError`` from an OmegaConf error (whose message spans several lines)."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "is not a ListConfig" in first:  # a scalar given for a list field ("AnyNode is not a ListConfig")
        first = f"expected a list, got {getattr(err, 'value', None)!r}"
    first += _unknown_key_hint(err)
    key = getattr(err, "full_key", None)
    return ValueError(f"{where}: {key}: {first}" if key else f"{where}: {first}")


def _kind(node: Any) -> str | None:
    return "a list" if isinstance(node, ListConfig) else "a mapping" if isinstance(node, DictConfig) else None


def _container_clash(base: Any, other: Any, path: str = "") -> tuple[str, str, str] | None:
    """``(dotted key, expected kind, given kind)`` of the first key where ``other`` gives a mapping for
    a list of ``base`` or a list for a mapping; ``None`` if there is none."""
    if not (isinstance(base, DictConfig) and isinstance(other, DictConfig)):
        return None
    for key in other.keys():
        if key not in base:
            continue
        sub = f"{path}.{key}" if path else str(key)
        b, o = base._get_node(key), other._get_node(key)
        want, got = _kind(b), _kind(o)
        if want and got and want != got:
            return sub, want, got
        found = _container_clash(b, o, sub)
        if found:
            return found
    return None


def _merge(base: Any, other: Any, where: str) -> Any:
    """``OmegaConf.merge(base, other)``; OmegaConf's ``TypeError`` for a mapping merged into a list
    (which names no key) becomes a one-line ``ValueError`` naming ``where`` and the key."""
    try:
        return OmegaConf.merge(base, other)
    except TypeError:
        clash = _container_clash(base, other)
        if clash is None:
            raise
        key, want, got = clash
        raise ValueError(f"{where}: {key}: expected {want}, got {got}") from None


def _codepoint(character: int | str) -> str:
    """``U+0000`` for a character (PyYAML reports it as its code point or as a one-character string)."""
    return f"U+{character if isinstance(character, int) else ord(character[:1] or chr(0)):04X}"


def _load_yaml_mapping(path: Path) -> tuple[DictConfig, yaml.Node]:
    """Read a YAML preset file: its OmegaConf mapping and its composed node tree (for line numbers).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: one line naming the file: not a YAML text file (binary data, not UTF-8), a YAML
            syntax error or a duplicate key (with the line), an empty file, or a top level that is not a
            mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config: YAML file {path} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:  # e.g. a binary file given as a preset
        raise ValueError(
            f"config: {path}: not a YAML text file (byte 0x{err.object[err.start]:02x} at offset {err.start} "
            "is not UTF-8 text); expected a YAML mapping of config keys"
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        cfg = OmegaConf.load(path)  # OmegaConf's YAML rules: e.g. `1e-3` is a float, duplicate keys fail
    except yaml.reader.ReaderError as err:  # control characters: binary data that happens to be UTF-8
        raise ValueError(
            f"config: {path}: not a YAML text file (control character {_codepoint(err.character)} at "
            f"offset {err.position}); "
            "expected a YAML mapping of config keys"
        ) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"
        problem = " ".join(str(err.problem or err.context or "invalid YAML").split())
        raise ValueError(f"config: {path}: {where}: YAML syntax error: {problem}") from err
    except yaml.YAMLError as err:
        raise ValueError(f"config: {path}: YAML error: {' '.join(str(err).split())}") from err
    if node is None:
        raise ValueError(f"config: {path}: expected a YAML mapping of config keys, got an empty file")
    if not isinstance(node, yaml.MappingNode) or not isinstance(cfg, DictConfig):
        kind = "list" if isinstance(node, yaml.SequenceNode) else "scalar"
        line = node.start_mark.line + 1
        raise ValueError(f"config: {path}: line {line}: expected a YAML mapping of config keys, got a {kind}")
    return cfg, node


def warn_deprecated(old: str, new: str, where: str = "") -> None:
    """Print the one-line warning for a deprecated spelling (a config key, a CLI flag, a keyword) to
    stderr: ``fastweights: warning: OLD is deprecated; use NEW`` (+ `` (WHERE)`` when given). Deprecated
    spellings keep working for one release."""
    print(
        f"fastweights: warning: {old} is deprecated; use {new}" + (f" ({where})" if where else ""),
        file=sys.stderr,
    )


def deprecated_keys(cls: Any) -> dict[str, str]:
    """The ``DEPRECATED_KEYS`` (old dotted key → new dotted key) of a config class or instance; ``{}`` for
    a config without deprecated keys."""
    return dict(getattr(cls, "DEPRECATED_KEYS", {}))


def _is_under(key: str, name: str) -> bool:
    """``key`` is ``name`` or a key below it (``model.layer_options.x`` is under ``model.layer_options``)."""
    return key == name or key.startswith(name + ".")


def _parent(
    data: MutableMapping[str, Any], dotted: str, create: bool = False
) -> MutableMapping[str, Any] | None:
    """The mapping that holds the last part of ``dotted`` (``None`` if a part above it is missing or not a
    mapping; created as empty mappings with ``create``)."""
    node: Any = data
    for part in dotted.split(".")[:-1]:
        if create and part not in node:
            node[part] = {}
        node = node[part] if isinstance(node, MutableMapping) and part in node else None
        if not isinstance(node, MutableMapping):
            return None
    return node  # type: ignore[no-any-return]


def _has(data: MutableMapping[str, Any], dotted: str) -> bool:
    parent = _parent(data, dotted)
    return parent is not None and dotted.rsplit(".", 1)[-1] in parent


def _both_given(where: str, old: str, new: str) -> ValueError:
    return ValueError(f"{where}: both {old} (deprecated) and {new} are given; keep only {new}")


@overload
def rename_deprecated(data: list[str], renames: Mapping[str, str], where: str) -> list[str]: ...
@overload
def rename_deprecated(data: M, renames: Mapping[str, str], where: str) -> M: ...
def rename_deprecated(data: Any, renames: Mapping[str, str], where: str) -> Any:
    """Rename deprecated keys before a merge, with one :func:`warn_deprecated` line per renamed key.

    Args:
        data: a loaded mapping (an OmegaConf ``DictConfig`` or a plain dict), renamed in place and
            returned; or a ``key=value`` dotlist, returned as a new list (``OLD.sub=v`` becomes
            ``NEW.sub=v``).
        renames: old dotted key → new dotted key (a config's ``DEPRECATED_KEYS``).
        where: what ``data`` is, for the warning and the error (``config: FILE``, ``overrides``).

    Raises:
        ValueError: one line naming both keys when ``data`` gives a deprecated key and its new spelling.
    """
    if isinstance(data, list):
        items = list(data)
        for old, new in renames.items():
            keys = [item.split("=", 1)[0].strip() for item in items]
            hits = [i for i, item in enumerate(items) if "=" in item and _is_under(keys[i], old)]
            if not hits:
                continue
            if any(_is_under(key, new) for key in keys):
                raise _both_given(where, old, new)
            warn_deprecated(old, new, where)
            for i in hits:
                items[i] = new + keys[i][len(old) :] + "=" + items[i].split("=", 1)[1]
        return items
    for old, new in renames.items():
        parent, leaf = _parent(data, old), old.rsplit(".", 1)[-1]
        if parent is None or leaf not in parent:
            continue
        if _has(data, new):
            raise _both_given(where, old, new)
        warn_deprecated(old, new, where)
        value = parent.pop(leaf)
        target = _parent(data, new, create=True)
        if target is None:
            raise ValueError(f"{where}: {new}: expected a mapping above it to move {old} into")
        target[new.rsplit(".", 1)[-1]] = value
    return data


def _line(node: yaml.Node, key: str, renames: Mapping[str, str]) -> int | None:
    """Line of ``key`` in the file, or of the deprecated key the file gave for it."""
    line = _key_line(node, key)
    for old, new in renames.items():
        if line is None and _is_under(key, new):
            line = _key_line(node, old + key[len(new) :])
    return line


def load_config(cls: type[T], yaml_path: Path | None = None, overrides: list[str] | None = None) -> T:
    """Merge ``cls`` defaults ← YAML file ← ``key=value`` overrides and return a typed ``cls``.

    Deprecated keys of ``cls.DEPRECATED_KEYS`` in the file or the overrides are renamed (with a warning
    on stderr, :func:`rename_deprecated`).

    Raises:
        TypeError: ``cls`` is not a dataclass type.
        FileNotFoundError: ``yaml_path`` does not exist.
        ValueError: one line, for YAML syntax errors and empty or non-mapping files (naming the file
            and line), unknown keys or values of the wrong type (naming the key, and the file and line
            when the key comes from the file), or a deprecated key given with its new spelling.
    """
    if not is_dataclass(cls):
        raise TypeError(f"cls: expected a dataclass type, got {cls!r}")
    merged = OmegaConf.structured(cls)
    if yaml_path is not None:
        loaded, node = _load_yaml_mapping(Path(yaml_path))
        renames = deprecated_keys(cls)
        rename_deprecated(loaded, renames, f"config: {yaml_path}")
        try:
            merged = _merge(merged, loaded, f"config: {yaml_path}")
        except OmegaConfBaseException as err:
            line = _line(node, str(getattr(err, "full_key", "") or ""), renames)
            raise _config_error(err, f"config: {yaml_path}" + (f": line {line}" if line else "")) from err
    cfg = _to_object(merged, f"config: {yaml_path}: " if yaml_path is not None else "")
    return apply_overrides(cfg, overrides or [])  # type: ignore[return-value]


def _sections(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """The structured (dataclass) nodes below ``node``, deepest first, with their dotted paths."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, DictConfig):
        for key in node.keys():
            child = node._get_node(key)
            out += _sections(child, f"{path}.{key}" if path else str(key))
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            out += _sections(node._get_node(i), f"{path}[{i}]")
    if path and isinstance(node, DictConfig) and is_dataclass(OmegaConf.get_type(node)):
        out.append((path, node))
    return out


def _to_object(merged: Any, where: str = "") -> Any:
    """``OmegaConf.to_object`` that runs the dataclasses' ``__post_init__`` checks section by section,
    deepest first, so an error names its full key (``train.lr: expected …``, not ``lr: …``).

    Raises:
        ValueError: one line, prefixed with ``where`` (e.g. the YAML file).
    """
    try:
        for path, node in _sections(merged):
            try:
                OmegaConf.to_object(node)
            except ValueError as err:
                raise ValueError(f"{where}{path}.{err}") from None
        try:
            return OmegaConf.to_object(merged)
        except ValueError as err:
            raise ValueError(f"{where}{err}") from None
    except OmegaConfBaseException as err:
        raise _config_error(err, f"{where}config" if not where else where.rstrip(": ")) from err


def apply_overrides(cfg: T, overrides: list[str]) -> T:
    """Return a copy of the config dataclass ``cfg`` with ``key=value`` overrides applied (deprecated
    keys of ``type(cfg).DEPRECATED_KEYS`` renamed, with a warning on stderr).

    Raises:
        ValueError: one line, for unknown keys or values of the wrong type (naming the key), items
            without ``=``, or a deprecated key given with its new spelling.
    """
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides: expected key=value items, got {bad}")
    empty = [o.split("=", 1)[0] for o in overrides if not o.split("=", 1)[1].strip()]
    if empty:  # OmegaConf would read `key=` as null: make the user say so
        raise ValueError(
            f"{empty[0]}: expected a value after '=', got nothing (write {empty[0]}=null for none)"
        )
    overrides = rename_deprecated(list(overrides), deprecated_keys(cfg), "overrides")
    try:
        merged = _merge(OmegaConf.structured(cfg), OmegaConf.from_dotlist(overrides), "config")
    except OmegaConfBaseException as err:
        if getattr(err, "full_key", None):
            raise _config_error(err) from err
        for item in overrides:  # OmegaConf did not say which key: find the override that fails alone
            try:
                _merge(OmegaConf.structured(cfg), OmegaConf.from_dotlist([item]), "config")
            except OmegaConfBaseException:
                raise _config_error(err, f"config: {item.split('=', 1)[0]}") from err
        raise _config_error(err) from err
    return _to_object(merged)  # type: ignore[no-any-return]


def config_to_yaml(cfg: Any) -> str:
    """Serialise a config dataclass to YAML (saved as ``config.yaml`` in every run folder)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def config_from_yaml(cls: type[T], text: str) -> T:
    """Inverse of :func:`config_to_yaml` (deprecated keys renamed, with a warning on stderr).

    Raises:
        ValueError: one line, for YAML errors, unknown keys, wrong types, values the config refuses, or
            a deprecated key given with its new spelling.
    """
    return config_from_mapping(cls, text)


def config_from_mapping(cls: type[T], data: Any, where: str = "config") -> T:
    """A config of ``cls`` from a mapping (e.g. an export's ``config.json`` ``"config"``) or YAML text,
    validated like a preset (deprecated keys renamed, with a warning on stderr).

    Raises:
        ValueError: one line starting with ``where``, for YAML errors, unknown keys, wrong types, values
            the config refuses, or a deprecated key given with its new spelling.
    """
    try:
        loaded = OmegaConf.create(data)
        if isinstance(loaded, DictConfig):
            rename_deprecated(loaded, deprecated_keys(cls), where)
        merged = _merge(OmegaConf.structured(cls), loaded, where)
    except (OmegaConfBaseException, yaml.YAMLError) as err:
        raise _config_error(err, where) from err
    return _to_object(merged, "" if where == "config" else f"{where}: ")  # type: ignore[no-any-return]


def load_run_config(cls: type[T], path: Path) -> T:
    """The config of a run folder: ``path`` is its ``config.yaml``. A run written before a key was renamed
    still loads: deprecated keys are renamed, with a warning on stderr.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: one line naming ``path`` (and the line) for a YAML error, an empty file, unknown keys
            (e.g. the folder holds another recipe's run), wrong types, refused values, or a deprecated
            key given with its new spelling.
    """
    loaded, node = _load_yaml_mapping(Path(path))
    renames = deprecated_keys(cls)
    rename_deprecated(loaded, renames, f"config: {path}")
    try:
        merged = _merge(OmegaConf.structured(cls), loaded, f"config: {path}")
    except OmegaConfBaseException as err:
        line = _line(node, str(getattr(err, "full_key", "") or ""), renames)
        raise _config_error(err, f"config: {path}" + (f": line {line}" if line else "")) from err
    return _to_object(merged, f"config: {path}: ")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ConfigKey:
    """One key of a config: its dotted ``key``, ``type`` as the dataclass annotates it, ``default`` as YAML
    flow text (``"required"`` for a field without one) and ``doc`` (the field's comments)."""

    key: str
    type: str
    default: str
    doc: str


@dataclass(frozen=True)
class ConfigSection:
    """The keys of one config section: its dotted ``key`` (``""``: the top level; ``train.curriculum[]``:
    the fields of each item of a list of sections), the ``doc`` of its dataclass and its ``keys`` (the
    fields that are not sections themselves)."""

    key: str
    doc: str
    keys: tuple[ConfigKey, ...]


# a docstring section that says how the class is used, not what its fields mean
_DOC_SECTION = re.compile(r"^(Args|Arguments|Attributes|Raises|Returns|Examples?|Notes?):\s*$")


def _markdown(text: str) -> str:
    """reST inline markup as Markdown: ``:class:`~a.B``` → `` `B` ``, ``:func:`a.b``` → `` `a.b` ``,
    ````x```` → `` `x` ``."""
    text = re.sub(r":\w+:`~(?:[\w.]+\.)?(\w+)`", r"`\1`", text)
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _class_doc(cls: type) -> str:
    """The docstring of ``cls`` (or of its nearest dataclass base that has one: the generated signature
    of a dataclass without one is skipped) up to its first ``Raises:``-style section, paragraphs joined
    into lines, as Markdown."""
    for klass in cls.__mro__:
        doc = klass.__dict__.get("__doc__") if is_dataclass(klass) else None
        if doc and not doc.startswith(f"{klass.__name__}("):
            lines = inspect.cleandoc(doc).splitlines()
            cut = next((i for i, line in enumerate(lines) if _DOC_SECTION.match(line)), len(lines))
            paragraphs = "\n".join(lines[:cut]).strip().split("\n\n")
            return "\n\n".join(_markdown(" ".join(p.split())) for p in paragraphs)
    return ""


def _comment_text(comment: str) -> str:
    text = comment.strip()[1:]
    return (text[1:] if text.startswith(":") else text).strip()


def _field_comments(cls: type) -> dict[str, str]:
    """Field name → the comments that document it in the source of ``cls`` and its dataclass bases: the
    comment lines right above the field (``#:`` or ``#``) and the comments on its own lines. A subclass's
    comments replace its base's for the fields it redefines."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source (e.g. a class made at run time)
            continue
        lines = source.splitlines()
        comments = {
            tok.start[0]: tok.string
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        }
        body = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)).body
        for node in body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            above: list[str] = []
            line = node.lineno - 1
            while line >= 1 and lines[line - 1].lstrip().startswith("#"):
                above.insert(0, _comment_text(lines[line - 1]))
                line -= 1
            own = [
                _comment_text(comments[n])
                for n in range(node.lineno, (node.end_lineno or 0) + 1)
                if n in comments
            ]
            text = " ".join(part for part in above + own if part)
            if text:
                docs[node.target.id] = _markdown(text)
    return docs


def _plain(value: Any) -> Any:
    """``value`` as plain YAML data: dataclasses as mappings, tuples as lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _flow(value: Any) -> str:
    """``value`` as one line of YAML (flow style): ``auto``, ``null``, ``[digits, fashion_mnist]``."""
    text = yaml.safe_dump(
        _plain(value), default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False
    )
    return text.strip().removesuffix("...").strip()


def _annotation(field: dataclasses.Field[Any]) -> str:
    return field.type if isinstance(field.type, str) else inspect.formatannotation(field.type)


def _item_class(cls: type, name: str) -> type | None:
    """The dataclass of the items of the list field ``name`` of ``cls`` (``list[CurriculumStage]``), or
    ``None``."""
    try:
        hint = get_type_hints(cls)[name]
    except Exception:  # an annotation that does not resolve at run time: no item section
        return None
    args = get_args(hint)
    return args[0] if len(args) == 1 and is_dataclass(args[0]) else None


def _field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def config_sections(cls: type) -> list[ConfigSection]:
    """Every key of the config dataclass ``cls``, section by section (the top level first, then each
    section in field order, its subsections after it), with the defaults of ``cls()`` (so a section's
    own default, such as sequential's ``domain_b``, is the one shown) and the comments of the source (a
    section's doc: the comments on its field, then its class's docstring).

    Raises:
        TypeError: ``cls`` is not a dataclass type.
    """
    if not (isinstance(cls, type) and is_dataclass(cls)):
        raise TypeError(f"cls: expected a dataclass type, got {cls!r}")
    out: list[ConfigSection] = []

    def visit(klass: type, values: Any, path: str, lead: str) -> None:
        docs = _field_comments(klass)
        keys, below = [], []
        for f in dataclasses.fields(klass):
            key = f"{path}.{f.name}" if path else f.name
            doc = docs.get(f.name, "")
            value = getattr(values, f.name) if values is not None else _field_default(f)
            if is_dataclass(value) and not isinstance(value, type):
                below.append((type(value), value, key, doc))
                continue
            default = "required" if value is dataclasses.MISSING else _flow(value)
            keys.append(ConfigKey(key, _annotation(f), default, doc))
            item = _item_class(klass, f.name)
            if item is not None:
                below.append((item, None, f"{key}[]", ""))
        doc = "\n\n".join(part for part in (lead[:1].upper() + lead[1:], _class_doc(klass)) if part)
        out.append(ConfigSection(path, doc, tuple(keys)))
        for sub, value, key, sub_lead in below:
            visit(sub, value, key, sub_lead)

    visit(cls, cls(), "", "")
    return out

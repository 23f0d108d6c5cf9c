"""Reading YAML and JSON documents strictly: one reader for every file fabric-te takes.

Stricter than `json.loads` and `yaml.safe_load` in what they let through silently:

- a key given twice in one mapping is an error (both libraries keep the last value);
- YAML anchors and aliases are refused (a file of aliases can expand without bound), and so
  is the `<<` merge key (it would hide a duplicate);
- the file must be UTF-8 text ("not UTF-8 text" names the file and the byte offset),
  at most MAX_DOCUMENT_BYTES long, and nested no deeper than Python can walk.

Every failure is raised as the caller's error class (an InputError subclass, or DriverError
for a driver's own tables), with the file name first.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

import yaml

from controller.errors import FabricTeError
from controller.model.validation import MAX_DOCUMENT_BYTES

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _DuplicateKey(Exception):
    pass


class _StrictLoader(_Base):  # type: ignore[misc]
    """SafeLoader that refuses duplicate keys, aliases and merge keys."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        if node in self.constructed_objects or node in self.recursive_objects:
            raise yaml.constructor.ConstructorError(
                None, None, "anchors and aliases are not allowed", node.start_mark
            )
        return super().construct_object(node, deep=deep)

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, "expected a mapping", node.start_mark
            )
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value", key_node.start_mark
                ) from None
            if key in out:
                line = key_node.start_mark.line + 1
                raise _DuplicateKey(f"line {line}: duplicate key {key!r}")
            out[key] = self.construct_object(value_node, deep=deep)
        return out


_StrictLoader.add_constructor(
    "tag:yaml.org,2002:map",
    lambda loader, node: loader.construct_mapping(node, deep=True),
)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_text(text: str, kind: str, source: str, err: type[FabricTeError]) -> Any:
    """Decode `text` as `kind` ("json" or "yaml"); errors are `err` naming `source`."""
    if not text.strip():  # YAML reads it as null, which every caller would call a wrong type
        raise err(f"{source}: the file is empty")
    try:
        if kind == "json":
            return json.loads(text, object_pairs_hook=_no_duplicates)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        raise err(f"{source}: {dup}") from None
    except RecursionError:
        raise err(f"{source}: nested too deeply") from None
    except json.JSONDecodeError as bad:
        raise err(f"{source}: not valid JSON: {bad}") from None
    except yaml.YAMLError as bad:
        raise err(f"{source}: not valid YAML: {_one_line(bad)}") from None
    except ValueError as bad:  # e.g. an integer of more than 4,300 digits
        raise err(f"{source}: not valid {kind.upper()}: {bad}") from None


def read_text(
    path: str | Path,
    err: type[FabricTeError],
    what: str = "file",
    unreadable: type[FabricTeError] | None = None,
) -> str:
    """The UTF-8 text of a file, size-capped; errors are `err` (`unreadable`, if given, when
    the file cannot be read at all) naming the file."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a FIFO or a device would block or never end
            raise err(f"{path}: not a regular file")
        if path.exists() and path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise err(f"{path}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
        with path.open("rb") as fh:
            data = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as bad:
        raise (unreadable or err)(f"{path}: cannot read {what}: {bad.strerror or bad}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise err(f"{path}: larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # as editors on
    try:  # Windows write it; JSON refuses it, YAML and CSV would take it as text
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as bad:
        at = bom + bad.start
        raise err(f"{path}: not UTF-8 text (byte {at} is {data[at]:#04x})") from None


def read_document(
    path: str | Path,
    err: type[FabricTeError],
    what: str = "file",
    kind: str | None = None,
) -> Any:
    """Read and decode a JSON or YAML file (by `kind`, else by suffix: .json is JSON)."""
    path = Path(path)
    text = read_text(path, err, what)
    if kind is None:
        kind = "json" if path.suffix == ".json" else "yaml"
    return parse_text(text, kind, str(path), err)


def _one_line(err: yaml.YAMLError) -> str:
    return " ".join(str(err).replace('in "<unicode string>", ', "").split())

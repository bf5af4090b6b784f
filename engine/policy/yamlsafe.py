"""Load one YAML policy document safely, keeping a mark for every node.

PyYAML's own loaders silently accept duplicate keys, expand alias bombs and
recurse on deep nesting. We build the document from the parser's *event*
stream instead (libyaml's parser is iterative), so we can

- refuse files that are too large, not UTF-8, empty, or indented with tabs;
- count nesting depth and expanded nodes as we go (billion laughs stops at a
  budget instead of exhausting memory);
- report duplicate keys and non-string keys at their own line and column;
- remember where every value and every mapping key is (``Marks``).

Scalars are resolved with PyYAML's safe resolver (YAML 1.1 plain scalars);
explicit tags other than the standard scalar ones are refused.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import yaml

from innerguard.engine.policy.lint_rules import make
from innerguard.engine.policy.diagnostics import Finding, Location

MAX_BYTES = 1 << 20  # 1 MiB: a policy is a page of YAML, not a data set
MAX_DEPTH = 32
MAX_NODES = 20_000  # nodes after alias expansion
MAX_ALIASES = 100

Path_ = tuple  # a JSON path: keys (str) and indices (int)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_resolver = yaml.resolver.Resolver()
_constructor = yaml.constructor.SafeConstructor()
_SCALAR_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp",
}


@dataclass(frozen=True)
class Marks:
    """Where things are. ``values[path]`` is the (line, col) of the value at
    ``path``; ``keys[path]`` the (line, col) of the key that introduces it.
    Both are 1-based."""

    file: str
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    styles: dict[Path_, str] = field(default_factory=dict)  # quoted/block scalars: '"', "'", '|', '>'

    def inside(self, path: Path_, offset: int) -> Location:
        """The location of character ``offset`` inside the string scalar at
        ``path`` (exact for plain and quoted one-line scalars)."""
        loc = self.at(path)
        style = self.styles.get(tuple(path))
        if style in ("|", ">"):
            return Location(self.file, loc.line + 1, 0)
        return Location(self.file, loc.line, loc.col + offset + (1 if style in ('"', "'") else 0))

    def at(self, path: Path_ = (), *, key: bool = False) -> Location:
        """The location of ``path`` (its key if ``key``), or of its nearest
        ancestor that has one."""
        path = tuple(path)
        if key and path in self.keys:
            return Location(self.file, *self.keys[path])
        while path:
            if path in self.values:
                return Location(self.file, *self.values[path])
            path = path[:-1]
        return Location(self.file, *self.values.get((), (1, 1)))


@dataclass(frozen=True)
class Document:
    data: Any
    marks: Marks
    sha256: str


class _Stop(Exception):
    def __init__(self, finding: Finding):
        self.finding = finding


def load_document(raw: bytes, file: str) -> tuple[Document | None, list[Finding]]:
    """Parse ``raw`` into plain data with marks, or return findings saying why not."""
    sha = hashlib.sha256(raw).hexdigest()
    loc = Location(file, 1, 1)
    if len(raw) > MAX_BYTES:
        return None, [make("IG004", f"file is {len(raw)} bytes; a policy may be at most {MAX_BYTES} bytes", loc)]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return None, [make("IG002", f"byte 0x{raw[exc.start]:02x} at offset {exc.start} is not valid UTF-8; save the file as UTF-8", Location(file, line, col))]
    if not _has_content(text):
        return None, [make("IG003", "file is empty; a policy file holds one YAML mapping", loc)]
    findings = _tab_findings(text, file)
    try:
        data, marks = _build(text, file)
    except _Stop as stop:
        return None, findings + [stop.finding]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(file, mark.line + 1, mark.column + 1) if mark else loc
        if findings and any(f.location.line == where.line for f in findings):
            return None, findings  # the tab is the syntax error; say it once
        problem = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        if "nesting depth" in problem:  # libyaml's own limit, hit while scanning ahead
            return None, findings + [make("IG009", f"nesting deeper than {MAX_DEPTH} levels; a policy never needs that", where)]
        return None, findings + [make("IG005", f"YAML syntax error: {problem}", where)]
    except yaml.YAMLError as exc:
        return None, findings + [make("IG005", f"YAML error: {str(exc).splitlines()[0]}", loc)]
    if findings:
        return None, findings
    return Document(data, marks, sha), []


def _has_content(text: str) -> bool:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and stripped not in ("---", "..."):
            return True
    return False


def _tab_findings(text: str, file: str) -> list[Finding]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip():
            found.append(make("IG006", "tab in indentation; YAML indents with spaces only", Location(file, number, indent.index("\t") + 1)))
            if len(found) >= 5:
                break
    return found


def _pos(event) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1)


class _Builder:
    """Turns the event stream into plain data. Containers are open frames on
    an explicit stack, so depth costs no Python recursion."""

    def __init__(self, file: str):
        self.file = file
        self.marks = Marks(file)
        self.anchors: dict[str, tuple[Any, tuple[int, int], int]] = {}
        self.nodes = 0
        self.aliases = 0

    def stop(self, rule: str, message: str, pos: tuple[int, int]) -> _Stop:
        return _Stop(make(rule, message, Location(self.file, *pos)))

    def count(self, n: int, pos: tuple[int, int]) -> None:
        self.nodes += n
        if self.nodes > MAX_NODES:
            raise self.stop("IG008", f"document expands to more than {MAX_NODES} nodes (alias bomb?); write it out plainly", pos)

    def scalar(self, event) -> Any:
        tag = event.tag
        if tag in (None, "!"):
            tag = _resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
        if tag not in _SCALAR_TAGS:
            raise self.stop("IG005", f"YAML tag {event.tag!r} is not allowed; policies use plain values", _pos(event))
        if tag == "tag:yaml.org,2002:str" or tag == "tag:yaml.org,2002:timestamp":
            return event.value
        node = yaml.ScalarNode(tag, event.value)
        try:
            if tag == "tag:yaml.org,2002:int":
                return _constructor.construct_yaml_int(node)
            if tag == "tag:yaml.org,2002:float":
                return _constructor.construct_yaml_float(node)
            if tag == "tag:yaml.org,2002:bool":
                return _constructor.construct_yaml_bool(node)
        except (ValueError, yaml.YAMLError):
            raise self.stop("IG005", f"cannot read {event.value!r} as {tag.rsplit(':', 1)[-1]}", _pos(event)) from None
        return None


def _size(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_size(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_size(v) for v in value)
    return 1


def _copy_marks(marks: Marks, source: Path_, target: Path_) -> None:
    # An alias repeats a node; give the copy the marks of the original.
    n = len(source)
    for table in (marks.values, marks.keys):
        for path, pos in list(table.items()):
            if path[:n] == source and len(path) > n:
                table[target + path[n:]] = pos


def _build(text: str, file: str) -> tuple[Any, Marks]:
    b = _Builder(file)
    # A frame: [container, path, pending_key, pending_key_pos, seen_keys]
    stack: list[list] = []
    root: list[Any] = []
    anchor_paths: dict[str, Path_] = {}
    documents = 0

    def place(value: Any, pos: tuple[int, int], event) -> Path_ | None:
        """Attach a finished value to the open container; return its path
        (None when it was a mapping key)."""
        if not stack:
            root.append(value)
            b.marks.values[()] = pos
            return ()
        frame = stack[-1]
        container, path = frame[0], frame[1]
        if isinstance(container, list):
            child = path + (len(container),)
            container.append(value)
            b.marks.values[child] = pos
            return child
        if frame[2] is _NO_KEY:
            if not isinstance(value, str):
                raise b.stop("IG005", "mapping keys must be plain strings", pos)
            if value in frame[4]:
                first = frame[4][value]
                raise b.stop("IG007", f"duplicate key {value!r} (first defined at line {first[0]}); YAML keeps only the last one", pos)
            frame[4][value] = pos
            frame[2], frame[3] = value, pos
            return None
        key = frame[2]
        child = path + (key,)
        container[key] = value
        b.marks.values[child] = pos
        b.marks.keys[child] = frame[3]
        frame[2] = _NO_KEY
        return child

    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise b.stop("IG010", "more than one YAML document; put each policy in its own file", _pos(event))
        elif isinstance(event, yaml.ScalarEvent):
            b.count(1, _pos(event))
            if stack and isinstance(stack[-1][0], dict) and stack[-1][2] is _NO_KEY:
                # a key: keys are their source text, so `on:` stays "on"
                value = event.value if event.tag in (None, "!", "tag:yaml.org,2002:str") else b.scalar(event)
            else:
                value = b.scalar(event)
            path = place(value, _pos(event), event)
            if path is not None and event.style:
                b.marks.styles[path] = event.style
            if event.anchor and path is not None:
                anchor_paths[event.anchor] = path
                b.anchors[event.anchor] = (value, _pos(event), 1)
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            b.count(1, _pos(event))
            if event.tag not in (None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):
                raise b.stop("IG005", f"YAML tag {event.tag!r} is not allowed; policies use plain values", _pos(event))
            if len(stack) >= MAX_DEPTH:
                raise b.stop("IG009", f"nesting deeper than {MAX_DEPTH} levels; a policy never needs that", _pos(event))
            if stack and isinstance(stack[-1][0], dict) and stack[-1][2] is _NO_KEY:
                raise b.stop("IG005", "mapping keys must be plain strings", _pos(event))
            container: Any = {} if isinstance(event, yaml.MappingStartEvent) else []
            path = place(container, _pos(event), event)
            stack.append([container, path, _NO_KEY, None, {}, event.anchor, _pos(event)])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            frame = stack.pop()
            if frame[5]:
                anchor_paths[frame[5]] = frame[1]
                b.anchors[frame[5]] = (frame[0], frame[6], _size(frame[0]))
        elif isinstance(event, yaml.AliasEvent):
            b.aliases += 1
            pos = _pos(event)
            if b.aliases > MAX_ALIASES:
                raise b.stop("IG008", f"more than {MAX_ALIASES} aliases; write the document out plainly", pos)
            if event.anchor not in b.anchors:
                raise b.stop("IG005", f"alias *{event.anchor} names no anchor", pos)
            value, _, size = b.anchors[event.anchor]
            b.count(size, pos)
            path = place(copy.deepcopy(value), pos, event)
            if path is not None and isinstance(value, (dict, list)):
                _copy_marks(b.marks, anchor_paths[event.anchor], path)
    return (root[0] if root else None), b.marks


_NO_KEY = object()

"""DESIGN.md and docs/ cite only what exists: files, headings and Python names.

Checked mechanically, each against the checkout or the installed package:

- every relative link of DESIGN.md, docs/*.md and README.md names a file that exists, and its
  ``#anchor`` a heading of that file;
- every backquoted repository path in DESIGN.md and docs/*.md (``actors/read/path.py``,
  ``tests/test_*.py``) names files that exist, and every backquoted bare module name
  (``local.py``) a module somewhere in the checkout;
- every citation ``docs/x.md, 'Heading'`` or ``DESIGN.md, 'Heading'`` in DESIGN.md, docs/,
  README.md and the code names a heading of that document;
- no citation of a numbered DESIGN.md section is left (the design has no numbered sections);
- every backquoted dotted name DESIGN.md and docs/ cite that starts with ``inkpen.`` imports or
  resolves by attribute, and every ``Class.attribute`` whose class inkpen defines names an
  attribute, field or ``self.`` assignment of that class.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import inkpen

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
DESIGN_DOCS = [ROOT / "DESIGN.md", *DOCS]
PACKAGE_DIRS = ("inkpen", "actors", "manifest", "formats", "objectstore", "pipeline")
CODE_DIRS = (*PACKAGE_DIRS, "tests", "benchmarks", "scripts", "examples")
REPO_PREFIXES = (*CODE_DIRS, "docs")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BACKQUOTED = re.compile(r"`([^`\n]+)`")
CITATION = re.compile(r"((?:docs/[\w-]+|DESIGN)\.md),\s+'([^']+)'")
NUMBERED_SECTION = re.compile(
    r"DESIGN\.md,?\s+sections?\s+\d|sections?\s+\d+(?:\.\d+)?\s+of\s+DESIGN|\(sections?\s+\d+\.\d+"
)
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_files() -> Iterator[Path]:
    for name in CODE_DIRS:
        for path in sorted((ROOT / name).rglob("*")):
            if path.suffix in (".py", ".sh") or (path.parent.name == "scripts" and path.is_file()):
                yield path
    yield ROOT / "pyproject.toml"
    yield ROOT / "pyspark_inkpen.py"


def headings(path: Path) -> list[str]:
    found = []
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.append(line.lstrip("#").strip())
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", ""))
    return text.replace(" ", "-")


def prose(path: Path) -> str:
    """The text of a markdown file without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)


@pytest.mark.parametrize("doc", [*DESIGN_DOCS, ROOT / "README.md"], ids=rel)
def test_every_relative_link_names_a_file_and_heading(doc: Path) -> None:
    broken = []
    for target in LINK.findall(prose(doc)):
        if re.match(r"[a-z]+:", target):
            continue
        name, _, anchor = target.partition("#")
        path = (doc.parent / name).resolve() if name else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in map(slug, headings(path)):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{rel(doc)} links to what does not exist: {broken}"


@cache
def module_names() -> frozenset[str]:
    return frozenset(p.name for d in CODE_DIRS for p in (ROOT / d).rglob("*.py"))


def missing_path(token: str) -> bool:
    if "<" in token or " " in token:
        return False
    if token.split("/", 1)[0] in REPO_PREFIXES and "/" in token:
        return not any(ROOT.glob(token.rstrip("/"))) and not (ROOT / token).exists()
    if re.fullmatch(r"[\w-]+\.py", token):
        return token not in module_names()
    return False


@pytest.mark.parametrize("doc", DESIGN_DOCS, ids=rel)
def test_every_backquoted_path_exists(doc: Path) -> None:
    missing = sorted({t for t in BACKQUOTED.findall(prose(doc)) if missing_path(t)})
    assert not missing, f"{rel(doc)} names files that do not exist: {missing}"


def citing_files() -> list[Path]:
    """Every file that may cite the design, but this one, whose docstring shows the forms."""
    return [*DESIGN_DOCS, ROOT / "README.md", *(p for p in code_files() if p != Path(__file__))]


@pytest.mark.parametrize("path", citing_files(), ids=rel)
def test_every_citation_names_a_heading(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    broken = []
    for doc, heading in CITATION.findall(text):
        target = ROOT / doc
        wanted = " ".join(heading.split())
        if not target.exists():
            broken.append(f"{doc}: no such document")
        elif wanted not in headings(target):
            broken.append(f"{doc}, '{wanted}': no such heading")
    stale = NUMBERED_SECTION.findall(text)
    assert not broken, f"{rel(path)} cites what does not exist: {broken}"
    assert not stale, f"{rel(path)} cites numbered DESIGN.md sections: {stale}"


@cache
def inkpen_classes() -> dict[str, list[type]]:
    """Every class defined in an importable module of the package, by name."""
    classes: dict[str, list[type]] = {}
    for info in pkgutil.walk_packages(inkpen.__path__, "inkpen."):
        if info.name.endswith("__main__"):  # runs the command line when imported
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__:
                classes.setdefault(value.__name__, []).append(value)
    return classes


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(value, part):
                return False
            value = getattr(value, part)
        return True
    return False


def has_member(cls: type, attribute: str) -> bool:
    if hasattr(cls, attribute):
        return True
    for klass in cls.__mro__:
        if attribute in getattr(klass, "__annotations__", {}):
            return True
        module = importlib.import_module(klass.__module__)
        if not klass.__module__.startswith("inkpen."):
            continue
        source = Path(module.__file__ or "").read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.ClassDef)
                and node.name == klass.__name__
                and re.search(rf"\bself\.{attribute}\s*[:=]", ast.unparse(node))
            ):
                return True
    return False


def cited_names(doc: Path) -> set[str]:
    names = set()
    for token in BACKQUOTED.findall(prose(doc)):
        token = re.sub(r"\(.*\)$", "", token)  # a call: the name called
        if DOTTED.fullmatch(token) and not re.search(r"\.(py|md|json|toml|jnl|sst)$", token):
            names.add(token)
    return names


@pytest.mark.parametrize("doc", DESIGN_DOCS, ids=rel)
def test_every_cited_name_resolves(doc: Path) -> None:
    unresolved = []
    for name in sorted(cited_names(doc)):
        head, _, rest = name.partition(".")
        if head == "inkpen":
            if not resolves(name):
                unresolved.append(name)
        elif (
            head in inkpen_classes()
            and "." not in rest
            and not any(has_member(cls, rest) for cls in inkpen_classes()[head])
        ):
            unresolved.append(name)
    assert not unresolved, f"{rel(doc)} cites names that do not exist: {unresolved}"


def test_the_checks_see_the_documents() -> None:
    """Guards against a check that passes because it reads nothing."""
    assert len(DOCS) >= 10
    cited = set().union(*(cited_names(doc) for doc in DESIGN_DOCS))
    assert "inkpen.open_reader" in cited and "Bookie.transaction" in cited
    assert any(CITATION.search(path.read_text(encoding="utf-8")) for path in code_files())
    assert "Rooms and imports" in headings(ROOT / "DESIGN.md")
    assert slug("Errors, exit statuses, output") == "errors-exit-statuses-output"

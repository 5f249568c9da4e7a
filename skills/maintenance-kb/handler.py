"""BM25 search over the sections of the Markdown maintenance documents in ``references/``."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from agents.skills.context import ToolContext

K1 = 1.5
B = 0.75
# Extra weight of titles: a section's own title counts twice, its document's title once more.
SECTION_TITLE_BOOST = 2
DOC_TITLE_BOOST = 1
SNIPPET_CHARS = 280

_WORD = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*|[\u3400-\u9fff]+")
_CJK = re.compile(r"[\u3400-\u9fff]")
_STOPWORD_TEXT = """
a an and are as at be by do does for from has have how i if in into is it its me my no
not of on or our so than that the their then there these this to was we what when
where which while who why will with you your can should after before
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _stem(word: str) -> str:
    """A light suffix stripper, so overheating/overheated and calibrate/calibration meet."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ation", "ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    for suffix in ("ate", "at", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
            break
    return word


def tokenize(text: str) -> list[str]:
    """Lower-case stemmed English words, and overlapping character pairs of Chinese text."""
    tokens: list[str] = []
    for match in _WORD.finditer(text.lower()):
        word = match.group()
        if _CJK.match(word):
            pairs = [word[i : i + 2] for i in range(len(word) - 1)]
            tokens.extend(pairs or [word])
            continue
        parts = re.split(r"[.-]", word)
        if len(parts) > 1:  # part numbers stay whole; "through-spindle" also gives "spindle"
            tokens.append(word)
            tokens.extend(_stem(p) for p in parts if p not in _STOPWORDS and not p.isdigit())
        elif word not in _STOPWORDS and (len(word) > 1 or word.isdigit()):
            tokens.append(_stem(word))
    return tokens


class Section(NamedTuple):
    path: str
    doc_title: str
    title: str
    body: str
    terms: Counter[str]
    length: int


class Index(NamedTuple):
    sections: tuple[Section, ...]
    df: Counter[str]
    avg_length: float


_cache: dict[str, tuple[tuple[tuple[str, int, int], ...], Index]] = {}


def _references(context: ToolContext | None) -> Path:
    skill_dir = context.skill_dir if context else Path(__file__).resolve().parent
    return Path(skill_dir) / "references"


def split_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The document title (first ``#`` heading) and its ``##`` sections as (title, body).

    Text before the first ``##`` heading becomes an ``Overview`` section.
    """
    doc_title = ""
    sections: list[tuple[str, list[str]]] = [("Overview", [])]
    for line in text.splitlines():
        if line.startswith("# ") and not doc_title:
            doc_title = line[2:].strip()
        elif line.startswith("## "):
            sections.append((line[3:].strip(), []))
        else:
            sections[-1][1].append(line)
    out = [(title, "\n".join(lines).strip()) for title, lines in sections]
    return doc_title, [(title, body) for title, body in out if body]


def _build(root: Path) -> Index:
    sections = []
    for file in sorted(root.rglob("*.md")):
        rel = file.relative_to(root.parent).as_posix()
        doc_title, parts = split_sections(file.read_text(encoding="utf-8"))
        for title, body in parts:
            terms = Counter(tokenize(body))
            for _ in range(SECTION_TITLE_BOOST):
                terms.update(tokenize(title))
            for _ in range(DOC_TITLE_BOOST):
                terms.update(tokenize(doc_title))
            sections.append(Section(rel, doc_title, title, body, terms, sum(terms.values())))
    df: Counter[str] = Counter()
    for section in sections:
        df.update(section.terms.keys())
    avg = sum(s.length for s in sections) / len(sections) if sections else 0.0
    return Index(tuple(sections), df, avg)


def _index(root: Path) -> Index:
    files = sorted(root.rglob("*.md"))
    signature = tuple((f.as_posix(), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    cached = _cache.get(str(root))
    if cached and cached[0] == signature:
        return cached[1]
    index = _build(root)
    _cache[str(root)] = (signature, index)
    return index


def _bm25(index: Index, section: Section, query: list[str]) -> float:
    n = len(index.sections)
    score = 0.0
    for term in set(query):
        tf = section.terms.get(term, 0)
        if not tf:
            continue
        idf = math.log(1 + (n - index.df[term] + 0.5) / (index.df[term] + 0.5))
        norm = K1 * (1 - B + B * section.length / index.avg_length)
        score += idf * tf * (K1 + 1) / (tf + norm)
    return score


def _snippet(body: str, query: list[str]) -> str:
    wanted = set(query)
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    best = max(range(len(lines)), key=lambda i: len(wanted & set(tokenize(lines[i]))), default=0)
    text = " ".join(lines[best:])
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1].rstrip() + "…"


def search_kb(
    query: str, top_k: int = 3, context: ToolContext | None = None
) -> list[dict[str, Any]]:
    """The ``top_k`` document sections that best match ``query`` (BM25), best first."""
    terms = tokenize(query)
    if not terms:
        raise ValueError(f"The query {query!r} has no searchable words; use a few keywords.")
    index = _index(_references(context))
    scored = [(s, _bm25(index, s, terms)) for s in index.sections]
    scored = [pair for pair in scored if pair[1] > 0]
    scored.sort(key=lambda pair: (-pair[1], pair[0].path))
    return [
        {
            "path": section.path,
            "document": section.doc_title,
            "section": section.title,
            "snippet": _snippet(section.body, terms),
            "score": round(score, 3),
        }
        for section, score in scored[:top_k]
    ]


def _resolve(root: Path, path: str) -> Path:
    raw = path.strip().replace("\\", "/")
    pure = PurePosixPath(raw)
    if not raw or pure.is_absolute() or ".." in pure.parts or ":" in raw:
        raise ValueError(
            f"{path!r} is not a document path; use a path from search_kb or "
            "list_kb_documents, such as references/spindle-overheating.md."
        )
    if pure.parts and pure.parts[0] == root.name:
        pure = PurePosixPath(*pure.parts[1:])
    target = (root / pure).resolve()
    if not target.is_relative_to(root.resolve()) or target.suffix != ".md":
        raise ValueError(f"{path!r} is outside the knowledge base.")
    if not target.is_file():
        known = ", ".join(p.relative_to(root.parent).as_posix() for p in sorted(root.rglob("*.md")))
        raise ValueError(f"No document {path!r}; the documents are: {known}.")
    return target


def get_kb_document(path: str, context: ToolContext | None = None) -> dict[str, Any]:
    """The full text of one document of the knowledge base."""
    root = _references(context)
    target = _resolve(root, path)
    text = target.read_text(encoding="utf-8")
    doc_title, parts = split_sections(text)
    return {
        "path": target.relative_to(root.resolve().parent).as_posix(),
        "title": doc_title,
        "sections": [title for title, _ in parts],
        "content": text,
    }


def list_kb_documents(context: ToolContext | None = None) -> list[dict[str, Any]]:
    """Every document with its title and section titles."""
    root = _references(context)
    out = []
    for file in sorted(root.rglob("*.md")):
        doc_title, parts = split_sections(file.read_text(encoding="utf-8"))
        out.append(
            {
                "path": file.relative_to(root.parent).as_posix(),
                "title": doc_title,
                "sections": [title for title, _ in parts],
            }
        )
    return out

"""A small BM25 over an inverted index (numpy), with a tokenizer that handles CJK text."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

_WORD = re.compile(r"[a-z0-9]+|[\u3400-\u9fff\uf900-\ufaff]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
# Function words, as in the usual English lists (NLTK's), and the pieces contractions leave
# ("I'm" -> i, m): descriptions seldom hold them, so they would weigh as rare words. Not the
# negations: "not working" says what a message is about.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could d did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just ll m ma me more most my myself now o of off on once only or
    other our ours ourselves out over own please re s same she should so some such t than
    that the their theirs them themselves then there these they this those through to too
    under until up us ve very was we were what when where which while who whom why will with
    would y you your yours yourself yourselves""".split()
)


_VOWELS = frozenset("aeiou")


def _consonant(word: str, i: int) -> bool:
    """Porter's consonant: not a vowel, and a ``y`` only after a vowel (or first)."""
    if word[i] in _VOWELS:
        return False
    return word[i] != "y" or i == 0 or not _consonant(word, i - 1)


def _measure(stem: str) -> int:
    """Porter's m: how many vowel-consonant sequences the stem has."""
    forms = "".join("c" if _consonant(stem, i) else "v" for i in range(len(stem)))
    return forms.count("vc") if forms else 0


@lru_cache(maxsize=65536)  # a catalogue's words recur: each is stemmed once
def _stem(word: str) -> str:
    """Plurals and -ed/-ing endings off, as Porter's step 1 does (ponies -> pony, rates ->
    rate, rated -> rate, pricing -> price, hopping -> hop), so that a word and its
    inflections meet; nothing further (no -ion, -al...): a light stemmer for short texts."""
    if len(word) <= 3:
        return word
    if word.endswith(("sses", "ches", "shes", "xes", "zzes")):
        word = word[:-2]
    elif word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("eed"):
        return word[:-1] if _measure(word[:-3]) > 0 else word
    for suffix in ("ed", "ing"):
        stem = word[: -len(suffix)]
        if not word.endswith(suffix) or len(stem) < 3:
            continue
        if not any(not _consonant(stem, i) for i in range(len(stem))):
            continue
        if stem.endswith(("at", "bl", "iz")):
            return stem + "e"
        last = len(stem) - 1
        if stem[-1] == stem[-2] and _consonant(stem, last) and stem[-1] not in "lsz":
            return stem[:-1]
        if _measure(stem) == 1 and _short(stem):
            return stem + "e"
        return stem
    return word


def _short(stem: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (hop, fil): -e comes back."""
    n = len(stem)
    return (
        _consonant(stem, n - 3)
        and not _consonant(stem, n - 2)
        and _consonant(stem, n - 1)
        and stem[-1] not in "wxy"
    )


def tokenize(text: str) -> list[str]:
    """Lower-cased stems of English words; CJK runs become character unigrams and bigrams."""
    tokens: list[str] = []
    for match in _WORD.finditer(text.lower()):
        word = match.group()
        if _CJK.match(word):
            tokens.extend(word)
            tokens.extend(word[i : i + 2] for i in range(len(word) - 1))
        elif word not in STOPWORDS:
            tokens.append(_stem(word))
    return tokens


_LETTERS = re.compile(r"[a-z]+")


def vocabulary(texts: Iterable[str]) -> frozenset[str]:
    """The lower-cased words of ``texts``: the catalogue's words, which ``name_words`` splits
    run-together names into."""
    return frozenset(word for text in texts for word in _LETTERS.findall(text.lower()))


def name_words(name: str, words: frozenset[str]) -> str:
    """A skill name as text for BM25: its kebab-case parts, each followed by the two words of
    ``words`` it runs together when it is not a word itself (``apilayer-weatherstack`` ->
    "apilayer weatherstack weather stack"), so that the name matches "weather" as a reader
    sees it does. The part stays too: a message that names the skill still matches it."""
    found: list[str] = []
    for part in name.lower().split("-"):
        found.append(part)
        found.extend(_compound(part, words))
    return " ".join(found)


def _compound(word: str, words: frozenset[str]) -> tuple[str, ...]:
    """The first split of ``word`` into two known words of three letters or more (neither a
    stop word), or none."""
    if len(word) < 6 or word in words or not word.isalpha():
        return ()
    for i in range(3, len(word) - 2):
        head, tail = word[:i], word[i:]
        if head in words and tail in words and not {head, tail} & STOPWORDS:
            return head, tail
    return ()


class BM25:
    """Okapi BM25 over a fixed list of documents.

    Tuned for skill summaries on both retrieval sets (bench/retrieval_quality.py), each half
    of ToolAlpaca's queries and the labelled set alike: little length normalisation
    (``b=0.2``; a longer description says more about the same skill, it is not a longer
    document in which a match means less) and a slow tf saturation (``k1=1.5``). With the
    stemmer above, against b 0.6: ToolAlpaca recall@1 0.47 -> 0.55, @5 0.757 -> 0.785, the
    labelled set's @5 0.937 -> 0.934 (0.932 with neither). Any b from 0 to 0.2 and k1 from
    1.2 to 2 gives the labelled set that recall@5; b 0 ranks better still at @1 (0.60) but
    makes long descriptions look too sure: ToolAlpaca's no-call routes 22 % of queries, 78 %
    right (b 0.2: 9 %, 89 % right).
    """

    def __init__(self, documents: Sequence[str], k1: float = 1.5, b: float = 0.2) -> None:
        self.size = len(documents)
        tokenized = [tokenize(doc) for doc in documents]
        lengths = np.array([len(t) for t in tokenized], dtype=np.float32)
        average = float(lengths.mean()) if self.size else 0.0
        norm = k1 * (1 - b + b * lengths / (average or 1.0))
        postings: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for doc_id, tokens in enumerate(tokenized):
            for term, tf in Counter(tokens).items():
                postings[term][0].append(doc_id)
                postings[term][1].append(tf)
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._idf: dict[str, float] = {}
        self._unknown_idf = math.log(1 + (self.size + 0.5) / 0.5)
        for term, (ids, tfs) in postings.items():
            id_array = np.array(ids, dtype=np.int32)
            tf_array = np.array(tfs, dtype=np.float32)
            idf = math.log(1 + (self.size - len(ids) + 0.5) / (len(ids) + 0.5))
            weights = idf * tf_array * (k1 + 1) / (tf_array + norm[id_array])
            self._postings[term] = (id_array, weights.astype(np.float32))
            self._idf[term] = idf

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query``."""
        scores = np.zeros(self.size, dtype=np.float32)
        for term in set(tokenize(query)):
            entry = self._postings.get(term)
            if entry is not None:
                scores[entry[0]] += entry[1]  # a term's document ids are unique
        return scores

    def normalized_scores(self, query: str) -> np.ndarray:
        """Scores divided by the query's own idf mass (unknown terms count at the highest
        idf), capped at 1: the share of the query a document matches, comparable across
        corpora of any size."""
        terms = set(tokenize(query))
        ideal = sum(self._idf.get(t, self._unknown_idf) for t in terms)
        if ideal <= 0:
            return np.zeros(self.size, dtype=np.float32)
        return np.minimum(self.scores(query) / ideal, 1.0)

"""references.bib and the claims' sources: every key a notebook's claim names is in the file, every entry can be
found (a DOI or an arXiv id), and every claims.add in a notebook says its kind."""
import ast
import re
from pathlib import Path

import nbformat
import pytest

from gnnbook.course.claims import KINDS, OWN_SOURCES, Claims, source_key

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb")])
KEY = re.compile(r"\b[a-z]+(?:19|20)\d\d[a-z0-9]*\b")      # kipf2017gcn, belady1966, ockerman2025pgti
# venues that give neither a DOI nor an arXiv id: the entry carries the publisher's url and a note saying so
WITHOUT_DOI = {"ho2013ssp", "gandhi2021p3", "ma2019neugraph", "jia2020roc"}


def bib_entries() -> dict[str, str]:
    text = (ROOT / "references.bib").read_text()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"^@\w+\{([^,\s]+),", text, re.M)]
    return {key: text[start:end] for (start, key), (end, _) in zip(starts, [*starts[1:], (len(text), "")])}


def test_every_entry_has_a_doi_or_an_arxiv_id():
    entries = bib_entries()
    assert len(entries) >= 30 and len(set(entries)) == len(entries)
    for key, body in entries.items():
        has_id = re.search(r"^\s*(doi|eprint)\s*=\s*\{[^}]+\}", body, re.M)
        if key in WITHOUT_DOI:
            assert not has_id and re.search(r"^\s*url\s*=", body, re.M) and "no DOI" in body, key
        else:
            assert has_id, f"{key}: give its doi or its arXiv eprint"
        if "eprint" in body:
            assert re.search(r"eprint = \{\d{4}\.\d{4,5}\}, archivePrefix = \{arXiv\}", body), key


def claim_calls(nb_path: Path):
    """(call, source strings) of every claims.add(...) in a notebook's code."""
    cells = [c.source for c in nbformat.read(nb_path, 4).cells if c.cell_type == "code"]
    trees = [ast.parse(src) for src in cells]
    dicts = {}          # NAME = {...}: the string values a claim may take its source from (SOURCE[model])
    arguments = {}      # NAME = dict(kind=..., source=...): a claim's arguments, passed as claims.add(**NAME, ...)
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        dicts[target.id] = node.value
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "dict"):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        arguments[target.id] = {k.arg: k.value for k in node.value.keywords if k.arg}
    for tree in trees:
        for node in ast.walk(tree):
            # claims.add(...) and claims.not_here(...): a claim this run could not test still names its kind and source
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("add", "not_here")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "claims"):
                keywords = {}
                for k in node.keywords:
                    if k.arg is None:       # **NAME: the arguments of a dict(...) assigned to NAME
                        assert isinstance(k.value, ast.Name) and k.value.id in arguments, \
                            f"{nb_path.name}: claims.{node.func.attr}(**...) takes a name assigned dict(kind=..., ...)"
                        keywords.update(arguments[k.value.id])
                    else:
                        keywords[k.arg] = k.value
                source = keywords.get("source")
                if isinstance(source, ast.Subscript) and isinstance(source.value, ast.Name):
                    values = dicts[source.value.id].values                 # SOURCE[model]: each value is a source
                    strings = ["".join(n.value for n in ast.walk(v) if isinstance(n, ast.Constant)) for v in values]
                else:
                    strings = [n.value for n in ast.walk(source)
                               if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                yield node, keywords, strings


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_claim_has_a_kind_and_a_source_in_references_bib(nb_path):
    entries = bib_entries()
    for call, keywords, strings in claim_calls(nb_path):
        where = f"{nb_path.name}, line {call.lineno} of its cell"
        kind = keywords.get("kind")
        assert isinstance(kind, ast.Constant) and kind.value in KINDS, f"{where}: kind= one of {KINDS}"
        assert strings, f"{where}: source= a string (or a dict of strings)"
        text = " ".join(strings)
        unknown = sorted(set(KEY.findall(text)) - set(entries))
        assert not unknown, f"{where}: {unknown} not in references.bib"
        if kind.value == "paper":
            first = strings[0] if not isinstance(keywords["source"], ast.Subscript) else None
            for s in [first] if first is not None else strings:
                assert source_key(s) in entries, f"{where}: a paper claim's source starts with its bib key, not {s!r}"
        else:
            assert text.startswith(OWN_SOURCES) or KEY.match(text), f"{where}: {text[:60]!r}"


def test_the_claims_api_refuses_a_claim_without_kind_or_paper_key():
    claims = Claims("t")
    with pytest.raises(ValueError):
        claims.add("x", kind="theorem", source="our model", published="1", measured="1", holds=True)
    with pytest.raises(ValueError):
        claims.add("x", kind="paper", source="our model: a formula", published="1", measured="1", holds=True)
    with pytest.raises(ValueError):
        claims.add("x", kind="paper", source="Kipf & Welling, ICLR 2017", published="1", measured="1", holds=True)
    assert claims.add("x", kind="paper", source="kipf2017gcn, table 2", published="81.5", measured="81", holds=True)
    assert source_key("kipf2017gcn; hamilton2017graphsage") == "kipf2017gcn"
    assert source_key("our measurement: one process") is None


def test_pgt_i_is_attributed_to_its_authors():
    for path in [*NOTEBOOKS, *ROOT.glob("gnnbook/**/*.py")]:
        assert "Barker et al" not in path.read_text(), path


def test_every_entry_is_cited_by_its_key_and_every_dataset_cites_entries():
    """references.bib holds nothing unused: each key appears in a notebook, the package (a claim's source,
    a docstring) or the dataset registry, and every dataset's references are entries."""
    from gnnbook.data import DATASETS, RATINGS_DATASETS, TRAFFIC_DATASETS
    from gnnbook.data.registry import REFERENCES

    entries = bib_entries()
    assert set(REFERENCES) == {*DATASETS, *TRAFFIC_DATASETS, *RATINGS_DATASETS}
    assert {key for keys in REFERENCES.values() for key in keys} <= set(entries)
    cited: set[str] = set()
    for path in [*NOTEBOOKS, *ROOT.glob("gnnbook/**/*.py")]:
        cited |= set(KEY.findall(path.read_text()))
    unused = sorted(set(entries) - cited)
    assert not unused, f"entries of references.bib no notebook or module cites by key: {unused}"

"""The course's claims record: atomic JSON with every claim of a notebook."""
import json

import pytest

from gnnbook.course.claims import NOT_HERE, Claims, read_claims


def test_claims_round_trip_and_atomic_write(tmp_path):
    claims = Claims("demo")
    assert claims.add("a", kind="paper", source="kipf2017gcn, table 1", published="1.0", measured="0.9", holds=True)
    assert not claims.add("b", kind="model", source="our model: fig. 2", published="2", measured="3", holds=False)
    path = claims.write(tmp_path / "out" / "r.json", {"x": 1.5})
    data = read_claims(path)
    assert data["notebook"] == "demo" and [c["holds"] for c in data["claims"]] == [True, False]
    assert data["measured"] == {"x": 1.5}
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["r.json"]  # no temporary left
    assert list(claims.table().columns) == ["claim", "kind", "source", "published", "measured", "holds"]
    assert [c["kind"] for c in data["claims"]] == ["paper", "model"]
    assert claims.write(None) is None
    json.loads(path.read_text())


def test_a_claim_that_cannot_be_tested_here_says_why_and_neither_holds_nor_fails(tmp_path):
    from gnnbook.course.course_run import NotebookRun, report

    claims = Claims("demo")
    claims.not_here("pipelined / serial <= 0.75", kind="paper", source="kaler2022salient, fig. 1",
                    published="<= 0.75", measured="0.93", because="other processes held 0.8 of 2 cores")
    row = claims.rows[0]
    assert row["holds"] == NOT_HERE and row["measured"].endswith("because other processes held 0.8 of 2 cores")
    with pytest.raises(ValueError, match="measured reason"):
        claims.not_here("x", kind="model", source="our model", published="1", measured="2", because=" ")
    run = NotebookRun("demo", tmp_path / "demo.ipynb", tmp_path / "demo.json", 1.0, claims=claims.rows)
    text, passed = report([run])
    assert passed, "a claim that cannot be tested here does not fail the course"
    assert NOT_HERE in text and "1 cannot be tested on this machine" in text

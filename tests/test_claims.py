"""The course's claims record: atomic JSON with every claim of a notebook."""
import json

from gnnbook.course.claims import Claims, read_claims


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

"""The survey table of GNN systems (gnnbook.ch7_systems.catalogue): every row is complete and every
headline carries its source."""
import re

import pytest

from gnnbook.ch7_systems.catalogue import FIELDS, SETTINGS, SYSTEMS, TRAINING, systems_table


@pytest.mark.parametrize("row", SYSTEMS, ids=[r["name"] for r in SYSTEMS])
def test_every_row_is_complete_and_sourced(row):
    assert set(row) == set(FIELDS)
    assert all(str(row[f]).strip() for f in FIELDS), row
    assert row["setting"] in SETTINGS and row["training"] in TRAINING
    assert 2017 <= row["year"] <= 2024
    assert re.search(r"abstract|section|table|figure", row["source"]), row["source"]
    # a quoted number says where; a qualitative row says so
    if not re.search(r"\d", row["headline"].replace("2D", "").replace("3D", "")):
        assert "qualitative" in row["headline"], row["name"]


def test_names_are_unique_and_cover_the_settings():
    names = [r["name"] for r in SYSTEMS]
    assert len(names) == len(set(names))
    assert {r["setting"] for r in SYSTEMS} == set(SETTINGS)


def test_filter():
    assert set(systems_table(setting="CPU cluster").index) >= {"DistDGL", "DistGNN", "ByteGNN", "AliGraph"}
    assert len(systems_table()) == len(SYSTEMS)
    with pytest.raises(ValueError, match="unknown setting"):
        systems_table(setting="TPU pod")
    with pytest.raises(ValueError, match="unknown training method"):
        systems_table(training="online")

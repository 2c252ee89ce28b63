"""Where every shipped dataset comes from: pinned URL, commit, licence, SHA-256.

Book: 2.4 applications (where each dataset comes from).

Used in: no notebook directly.

This table is the single source of truth; ``data/README.md`` is written from
it (``python -m gnnbook datasets --markdown``).

Example:
    >>> DATASETS["cora"].files["ind.cora.x"][:8]
    '23cfa55d'
"""
from __future__ import annotations

from dataclasses import dataclass, field

PLANETOID_COMMIT = "af6abf468a772cc055bec88c52e4d6f51b7c37e3"
GRAPHDATA_COMMIT = "f8022c26b917346f2a461ffec0ec5ae24b36de68"
TGCN_COMMIT = "219a2346f5bf68d54d91a948e7a41a08f9edc46b"
MOVIELENS_COMMIT = "fcfcbe277da4255f5f3323df824a41ed8b45542f"


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: its raw files (name -> SHA-256) and where to get them."""

    name: str
    folder: str  # sub-folder of a data directory holding the raw files
    format: str  # "planetoid", "graphdata-npz", "traffic-csv" or "movielens-csv"
    url_template: str  # ``{file}`` is replaced by each raw file name
    source: str
    licence: str
    shape: str  # what the raw files hold, as verified
    files: dict[str, str] = field(default_factory=dict)

    def url(self, file: str) -> str:
        return self.url_template.format(file=file)


def _planetoid(name: str, shape: str, sums: dict[str, str]) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        folder=name,
        format="planetoid",
        url_template=f"https://github.com/kimiyoung/planetoid/raw/{PLANETOID_COMMIT}/data/{{file}}",
        source=f"kimiyoung/planetoid @ {PLANETOID_COMMIT[:12]}, data/",
        licence="MIT (c) 2016 Zhilin Yang",
        shape=shape,
        files={f"ind.{name}.{part}": digest for part, digest in sums.items()},
    )


def _graphdata(name: str, file: str, digest: str, shape: str) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        folder="graphdata",
        format="graphdata-npz",
        url_template=f"https://github.com/EdisonLeeeee/GraphData/raw/{GRAPHDATA_COMMIT}/datasets/{{file}}",
        source=f"EdisonLeeeee/GraphData @ {GRAPHDATA_COMMIT[:12]}, datasets/",
        licence="MIT (c) 2020 Jintang Li",
        shape=shape,
        files={file: digest},
    )


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        _planetoid(
            "cora",
            "2708 nodes, 5278 undirected edges, 1433 features, 7 classes, public split 140/500/1000",
            {
                "x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
                "y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
                "tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
                "ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
                "allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
                "ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
                "graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
                "test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
            },
        ),
        _planetoid(
            "citeseer",
            "3327 nodes (15 isolated test-range nodes without label), 4552 undirected edges, "
            "3703 features, 6 classes, public split 120/500/1000",
            {
                "x": "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
                "y": "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
                "tx": "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
                "ty": "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
                "allx": "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
                "ally": "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
                "graph": "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
                "test.index": "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
            },
        ),
        _graphdata(
            "amazon-photo",
            "amazon_photo.npz",
            "bdb98b54cd3125bfa69b23ba0aae84fabcb770c6727175b8f6eb1d64f3be4b2b",
            "7650 nodes, 119081 undirected edges, 745 features, 8 classes",
        ),
        _graphdata(
            "amazon-computers",
            "amazon_cs.npz",
            "a6942db609f196b53503d91b99a02ad8d052d5d9be8ef41db976fb65f66ed1f3",
            "13752 nodes, 245861 undirected edges, 767 features, 10 classes",
        ),
        _graphdata(
            "coauthor-cs",
            "coauthor_cs.npz",
            "7b7b51bf270d341f1c4231834c58a526bb04db003fd76a6d2f51ad7d252005ed",
            "18333 nodes, 81894 undirected edges, 6805 features, 15 classes",
        ),
    ]
}


# Spatio-temporal traffic series (``gnnbook.data.load_traffic``): kept apart from
# DATASETS, whose entries are node-classification graphs (``load_dataset``).
TRAFFIC_DATASETS: dict[str, DatasetSpec] = {
    "los-loop": DatasetSpec(
        name="los-loop",
        folder="los_loop",
        format="traffic-csv",
        url_template=f"https://github.com/lehaifeng/T-GCN/raw/{TGCN_COMMIT}/T-GCN/T-GCN-PyTorch/data/{{file}}",
        source=f"lehaifeng/T-GCN @ {TGCN_COMMIT[:12]}, T-GCN/T-GCN-PyTorch/data/",
        licence="MIT (c) 2021 martinwhl (licence file in that folder)",
        shape="2016 five-minute steps x 207 loop detectors (speeds 1..70 mph), "
              "207x207 symmetric weighted adjacency (1313 edges)",
        files={
            "los_speed.csv": "7b732d86ae32b2930595becba28aff39dacbfb2197e250fc0332e1744ce2cbf4",
            "los_adj.csv": "7a6eb41e10677992b5af50f5ab187c6c05c5c3a92cb973950cfddbf857361e76",
        },
    ),
}


# User-item interactions for recommendation (``gnnbook.data.load_ratings``).
RATINGS_DATASETS: dict[str, DatasetSpec] = {
    "ml-latest-small": DatasetSpec(
        name="ml-latest-small",
        folder="ml-latest-small",
        format="movielens-csv",
        url_template=f"https://github.com/SimplCoder/RecommadationSystems/raw/{MOVIELENS_COMMIT}/ml-latest-small/{{file}}",
        source=f"SimplCoder/RecommadationSystems @ {MOVIELENS_COMMIT[:12]}, ml-latest-small/ (MovieLens, 2016 release)",
        licence="GroupLens terms (README.txt, kept beside the data): redistribution under the same terms, "
                "research and non-commercial use, cite Harper & Konstan, ACM TiiS 2015",
        shape="100004 ratings (0.5..5 stars) by 671 users of 9066 movies",
        files={
            "ratings.csv": "b4239649fbf90ebf405c56c3ae1d929d9e7c86fc1a3a80cbef1c884df593ef73",
            "movies.csv": "43d1736d3c688eb5b7856473c36d86a1c345676cab256c91720c1f6984d263b5",
            "README.txt": "e680cf5bcb2a3c9c6f3c7224e5b8d761071e6b3f866e5d038df087fb47559e11",
        },
    ),
}


# The original data behind each mirror and what is known of its terms.  The ``licence`` above is the licence of the
# repository the course downloads from; the data inside often came from elsewhere.  Where the original authors
# stated no terms, this says so instead of guessing.
ORIGINAL_TERMS: dict[str, str] = {
    "cora": "Cora (McCallum et al., 2000), as prepared by LINQS (Sen et al., 2008) and Planetoid (Yang et al., 2016): "
            "neither LINQS nor the original authors state a licence; the data's own terms are unclear. "
            "Widely used for research; cite the papers",
    "citeseer": "CiteSeer (Giles et al., 1998), as prepared by LINQS (Sen et al., 2008) and Planetoid: no licence "
                "stated; terms unclear. Cite the papers",
    "amazon-photo": "Shchur et al., 2018 (shchur/gnn-benchmark, MIT (c) 2018 its authors), built from McAuley et "
                    "al.'s Amazon co-purchase and review data (SIGIR 2015), which was released for research without a "
                    "stated licence: the original data's terms are unclear",
    "amazon-computers": "as amazon-photo: Shchur et al., 2018 (MIT repository) from McAuley et al.'s Amazon data "
                        "(no stated licence; terms unclear)",
    "coauthor-cs": "Shchur et al., 2018 (MIT repository), built from the Microsoft Academic Graph of the KDD Cup 2016 "
                   "challenge; the terms of that MAG release are not stated in these sources: unclear",
    "los-loop": "T-GCN (Zhao et al., 2019): Los Angeles highway loop-detector speeds, the 207 sensors of METR-LA "
                "(Jagadish et al., 2014; Li et al., DCRNN, 2018); no licence is stated for the original sensor data: "
                "terms unclear",
    "ml-latest-small": "MovieLens by GroupLens (Harper & Konstan, 2015): the terms in its README.txt, as in the "
                       "licence column (no commercial use without permission; redistribute only under the same terms)",
}


# The papers to cite for each dataset, as keys of references.bib (the data table of data/README.md and the
# site's bibliography): who built the data, and who prepared the version the course downloads.
REFERENCES: dict[str, tuple[str, ...]] = {
    "cora": ("sen2008linqs", "yang2016planetoid"),
    "citeseer": ("sen2008linqs", "yang2016planetoid"),
    "amazon-photo": ("mcauley2015amazon", "shchur2018pitfalls"),
    "amazon-computers": ("mcauley2015amazon", "shchur2018pitfalls"),
    "coauthor-cs": ("shchur2018pitfalls",),
    "los-loop": ("li2018dcrnn", "zhao2019tgcn"),
    "ml-latest-small": ("harper2015movielens",),
}

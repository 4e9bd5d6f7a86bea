from __future__ import annotations

import pytest

from otel_assay.analyze.engine import Engine


@pytest.fixture
def open_engine():
    engines = []

    def _open(source, **kw):
        eng = Engine(source, **kw)
        engines.append(eng)
        return eng

    yield _open
    for eng in engines:
        eng.close()


def rows(eng, sql, params=None):
    return eng.query(sql, params).to_pylist()

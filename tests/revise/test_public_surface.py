"""The package root's public surface: light to import, every public name resolves."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import revise
from revise.errors import ConfigError


def test_import_revise_loads_neither_pyspark_nor_pandas() -> None:
    code = ("import sys, revise; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'pandas'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", revise.__all__)
def test_each_public_name_resolves_to_its_module_object(name: str) -> None:
    value = getattr(revise, name)
    assert value is not None
    lazy = revise._LAZY.get(name)
    if lazy is not None:
        module, attr = lazy
        assert value is getattr(importlib.import_module(module), attr)
    assert name in dir(revise)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        revise.nope  # noqa: B018


def test_public_functions_take_options_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        revise.read_sql("SELECT 1", "/nowhere", "spark")  # type: ignore[misc]


def test_read_sql_refuses_an_unknown_engine_and_a_session_for_the_local_one() -> None:
    with pytest.raises(ConfigError, match="engine must be"):
        revise.read_sql("SELECT 1", "/nowhere", engine="duckdb")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="spark= is for"):
        revise.read_sql("SELECT 1", "/nowhere", spark=object())  # type: ignore[arg-type]

"""The error contract: every error a user can see is a SpecdslError, exported, and still the
built-in exception it was before it had a class of its own."""

from __future__ import annotations

import inspect

import pytest

import specdsl
from specdsl import errors


def _error_classes() -> list[type]:
    return [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == errors.__name__]


def test_every_error_is_a_specdsl_error():
    """Each exception class errors.py defines derives from SpecdslError (warnings aside)."""
    strays = [c.__name__ for c in _error_classes()
              if not issubclass(c, (errors.SpecdslError, Warning))]
    assert strays == []


def test_every_error_is_exported():
    """Each class errors.py defines is in errors.__all__ and importable from specdsl."""
    names = sorted(c.__name__ for c in _error_classes())
    assert names == sorted(errors.__all__)
    assert all(getattr(specdsl, name) is getattr(errors, name) for name in names)
    assert set(names) <= set(specdsl.__all__)


@pytest.mark.parametrize("name, builtin", [
    ("PTXSignatureError", ValueError), ("NotASpecError", TypeError),
    ("TemplatesMissingError", RuntimeError), ("CacheDirError", OSError),
    ("CheckingSwitchError", ValueError), ("UnsupportedTargetError", ValueError),
    ("SpecArgumentError", TypeError), ("SpecArgumentError", ValueError),
])
def test_each_error_is_still_its_builtin(name, builtin):
    """Code written against the built-in exception a call raised before still catches it."""
    assert issubclass(getattr(errors, name), builtin)


def test_spec_info_of_a_non_spec():
    """spec_info(3) raises NotASpecError, a TypeError, naming what it got."""
    from specdsl._spec.decorator import spec_info

    with pytest.raises(errors.NotASpecError, match=r"expected a @kernel_spec class or "
                                                   r"request, got int"):
        spec_info(3)


@pytest.mark.parametrize("call", [
    lambda VectorAdd: specdsl.Executor(None, target="sm_90", cache_dir="off").ensure_module(
        VectorAdd),
    lambda VectorAdd: specdsl.derived_key(VectorAdd),
    lambda VectorAdd: specdsl.render(VectorAdd, "sm_90"),
    lambda VectorAdd: specdsl.key_inputs(VectorAdd),
    lambda VectorAdd: specdsl.hand_key(VectorAdd),
    lambda VectorAdd: specdsl.baked_values(VectorAdd),
    lambda VectorAdd: specdsl.launch_values(VectorAdd),
    lambda VectorAdd: specdsl.KeyLedger().prove("k", VectorAdd, "sm_90"),
], ids=["ensure_module", "derived_key", "render", "key_inputs", "hand_key", "baked_values",
        "launch_values", "KeyLedger.prove"])
def test_a_spec_class_where_a_request_is_needed(call):
    """The spec class given for a request is a NotASpecError (a TypeError) that says to make
    a request, in every entry point that takes one, not an error about attrs' descriptors."""
    from specdsl.kernels import VectorAdd

    with pytest.raises(errors.NotASpecError) as info:
        call(VectorAdd)
    assert str(info.value) == "VectorAdd is a spec class; pass a request such as VectorAdd(...)"


def test_parse_entry_of_bad_ptx():
    """A declaration the parser cannot read raises PTXSignatureError quoting it."""
    from specdsl._runtime.signature import parse_entry

    with pytest.raises(errors.PTXSignatureError, match=r"unknown word '\.texref' in "
                                                       r"'\.param \.texref t'"):
        parse_entry(".visible .entry k(.param .texref t)\n{ ret; }\n", "k")


def test_missing_templates(tmp_path, monkeypatch):
    """Without a templates folder, builtin_template_dir raises TemplatesMissingError."""
    from specdsl._templating import environment as templating

    monkeypatch.setattr(templating, "__file__", str(tmp_path / "pkg" / "templating.py"))
    with pytest.raises(errors.TemplatesMissingError, match=r"specdsl's templates are missing "
                                                           r".*: reinstall specdsl"):
        templating.builtin_template_dir()


def test_concepts_page_lists_every_error_with_its_bases():
    """docs/concepts.md's error table names every error class, each with the classes it is
    also (built-ins or specdsl errors), and those claims hold."""
    import builtins
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "concepts.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", page, re.MULTILINE))
    listed = sorted(c.__name__ for c in _error_classes()
                    if issubclass(c, errors.SpecdslError) and c is not errors.SpecdslError)
    assert sorted(rows) == listed
    for name, bases in rows.items():
        for base in re.findall(r"`(\w+)`", bases):
            expected = getattr(errors, base, None) or getattr(builtins, base)
            assert issubclass(getattr(errors, name), expected), (name, base)

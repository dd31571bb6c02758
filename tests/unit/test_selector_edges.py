"""Label selectors at the edges apimachinery draws (issue 40: each test here kills mutants
of core/selector.py the unit tier let survive): the longest key, prefix and value that are
still valid, empty values between separators, `notin` as a key, labels that are not a
mapping."""

from __future__ import annotations

import pytest

from kubectl_flux_plunger.core.selector import Op, SelectorError, parse

pytestmark = pytest.mark.unit

PREFIX_253 = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
assert len(PREFIX_253) == 253


@pytest.mark.parametrize("text", [
    "k" * 63 + "=v",                 # a name part of 63 characters
    f"{PREFIX_253}/k=v",             # a prefix of 253 characters
    "k=" + "v" * 63,                 # a value of 63 characters
    "k in (" + "v" * 63 + ")",
])
def test_the_longest_valid_parts_parse(text) -> None:
    assert str(parse(text)) == text


@pytest.mark.parametrize(("text", "why"), [
    (f"{PREFIX_253}x/k=v", "the prefix must be a DNS subdomain"),  # 254 characters
    ("k" * 64, "the name part must be at most 63"),
])
def test_one_character_more_is_an_error(text, why) -> None:
    with pytest.raises(SelectorError, match=why):
        parse(text)


def test_an_empty_value_before_a_comma() -> None:
    s = parse("a=,b=c")
    assert [(r.key, r.op, r.values) for r in s.requirements] == [
        ("a", Op.EQUALS, ("",)), ("b", Op.EQUALS, ("c",))]
    assert s.matches({"a": "", "b": "c"}) and not s.matches({"a": "x", "b": "c"})


def test_an_empty_value_between_separators_in_a_set() -> None:
    (r,) = parse("a in (x,,y)").requirements
    assert r.values == ("x", "", "y")
    assert r.matches({"a": ""})


@pytest.mark.parametrize("word", ["in", "notin"])
def test_in_and_notin_are_no_keys(word) -> None:
    with pytest.raises(SelectorError, match=f"expected a label key, found '{word}'"):
        parse(word)


@pytest.mark.parametrize("odd", [["app"], "app", 7])
def test_labels_that_are_not_a_mapping_are_no_labels(odd) -> None:
    obj = {"metadata": {"labels": odd}}
    assert not parse("app").matches_object(obj)
    assert parse("!app").matches_object(obj)


@pytest.mark.parametrize(("text", "message"), [
    ("Example.com/a=b", "invalid label selector 'Example.com/a=b': invalid key "
     "'Example.com/a': the prefix must be a DNS subdomain (lower-case alphanumerics, '-' and "
     "'.', at most 253 characters)"),
    ("-a=b", "invalid label selector '-a=b': invalid key '-a': the name part must be at most "
     "63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"),
    ("a=-v", "invalid label selector 'a=-v': invalid value '-v' for 'a': a label value must "
     "be empty or at most 63 alphanumerics, '-', '_' or '.', starting and ending with an "
     "alphanumeric"),
    (" ", "the selector is empty"),
])
def test_the_usage_error_states_the_whole_rule(text, message) -> None:
    """The one line a user gets for a bad -l: what is wrong and what would be right."""
    with pytest.raises(SelectorError) as exc:
        parse(text)
    assert str(exc.value) == message

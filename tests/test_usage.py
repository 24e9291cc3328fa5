"""Usage: counts that add up, one at a time or all at once."""

from __future__ import annotations

from moot.models.base import Usage


def test_sum_of_is_the_same_as_adding_one_by_one() -> None:
    usages = [
        Usage(calls=1, prompt_tokens=10, completion_tokens=3, attempts=2, cached=0),
        Usage(calls=0, prompt_tokens=0, completion_tokens=0, attempts=1, cached=0),
        Usage(calls=1, prompt_tokens=7, completion_tokens=5, attempts=1, cached=1),
    ]
    added = Usage()
    for usage in usages:
        added = added + usage
    assert (
        Usage.sum_of(usages)
        == added
        == Usage(calls=2, prompt_tokens=17, completion_tokens=8, attempts=4, cached=1)
    )
    assert Usage.sum_of(iter(usages)) == added  # any iterable, read once
    assert Usage.sum_of([]) == Usage()

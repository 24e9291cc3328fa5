from __future__ import annotations

import pytest

from moot.bench.parsers import canonical_number, parse_choice, parse_label, parse_number


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        # Requested format, as chat models write it.
        ("First 15*21 = 315, then 3*27 = 81. 12+315+0-81 = 246. The answer is (246).", "246", "marker"),
        ("So the final result is **(246)**", "246", "marker"),
        ("The result is (-120).", "-120", "marker"),
        ("Result: (1,234)", "1234", "marker"),
        ("The answer is \\boxed{18}.", "18", "marker"),
        ("Total cost: \\boxed{\\$18.00}", "18", "marker"),
        ("So she has \\boxed{18 \\text{ dollars}} left.", "18", "marker"),
        ("(1) multiply first (2) then add. The answer is (246).", "246", "marker"),
        ("The answer is (246). Note (this is important) I double checked.", "246", "marker"),
        # The last marker wins, even after an earlier one.
        ("Initially I said (100) but the correct answer is (246)", "246", "marker"),
        # No marker: Du et al.'s rule, the last number.
        ("12 + 315 + 0 - 81 = 246", "246", "last_number"),
        ("The answer is 246.", "246", "last_number"),
        ("20 - 5", "5", "last_number"),
        ("the result = -5", "-5", "last_number"),
        ("It is \u2212836", "-836", "last_number"),
        ("About 0.50 of it", "0.5", "last_number"),
        # A marker without a number is skipped.
        ("The result is (X) where X = 42", "42", "last_number"),
        # Malformed: no number at all is a parse failure.
        ("I am not sure how to do this.", None, "none"),
        ("", None, "none"),
        ("The answer is (X).", None, "none"),
    ],
)
def test_parse_number(text: str, value: str | None, rule: str) -> None:
    parsed = parse_number(text)
    assert (parsed.value, parsed.rule) == (value, rule)
    assert parsed.failed is (value is None)


@pytest.mark.parametrize(
    ("raw", "canon"),
    [
        ("18.00", "18"),
        ("1,200", "1200"),
        ("$5", "5"),
        ("-0", "0"),
        ("12.", "12"),
        ("50%", "50"),
        ("1e5", None),
    ],
)
def test_canonical_number(raw: str, canon: str | None) -> None:
    assert canonical_number(raw) == canon


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("The sky scatters blue light most. The answer is (B).", "B", "marker"),
        ("**(C)**", "C", "marker"),
        ("Options (a) and (b) are wrong, so the answer is (D)", "D", "marker"),
        ("The correct answer is C because ...", "C", "phrase"),
        ("Answer: B", "B", "phrase"),
        ("I would pick option A.", "A", "phrase"),
        ("B", "B", "bare"),
        ("B.", "B", "bare"),
        ("(a) is tempting", None, "none"),  # lower case: an enumeration, not an answer
        ("The answer is a bit unclear.", None, "none"),
        ("A fine question; I don't know.", None, "none"),
        ("The answer is (E).", None, "none"),  # not one of this item's letters
        ("", None, "none"),
    ],
)
def test_parse_choice(text: str, value: str | None, rule: str) -> None:
    parsed = parse_choice(text, "ABCD")
    assert (parsed.value, parsed.rule) == (value, rule)


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("The pasta is praised, so (positive).", "positive", "marker"),
        ("**(Negative)**", "negative", "marker"),
        ("Options (a) and (b) aside, the answer is (neutral)", "neutral", "marker"),
        ("The sentiment is negative because the wait was long.", "negative", "phrase"),
        ("Polarity: positive", "positive", "phrase"),
        ('The answer is "neutral".', "neutral", "phrase"),
        ("Positive.", "positive", "bare"),
        ("neutral", "neutral", "bare"),
        ("The sentiment is not positive at all.", None, "none"),  # no guessing from a stray label word
        ("It was positive for some and negative for others.", None, "none"),
        ("(mixed)", None, "none"),  # not one of the task's labels
        # Real replies of the embedded 135M model (moot bench --task absa):
        (
            'The review sentence expresses a neutral sentiment toward the aspect "service" by stating '
            "that no complaints were made regarding the service.",
            "neutral",
            "phrase",
        ),
        (
            "The sentiment expressed in the given review sentence is positive, indicating that the "
            "reviewer is appreciative of the quality of the product or service.",
            "positive",
            "phrase",
        ),
        (
            'The review sentence expresses a positive sentiment toward the aspect "staff" and is '
            "neutral in terms of sentiment.",
            None,
            "none",
        ),  # two labels: no answer
        (
            'The review sentence expresses a positive sentiment toward the aspect "battery" by stating '
            "that the tablet is lighter. However, it also expresses a negative sentiment towards it.",
            None,
            "none",
        ),
        ("This is not a positive sentiment.", None, "none"),  # negated
        ("It shows a mixed sentiment.", None, "none"),  # a label outside the task's set
        ("", None, "none"),
    ],
)
def test_parse_label(text: str, value: str | None, rule: str) -> None:
    parsed = parse_label(text, ("positive", "negative", "neutral"))
    assert (parsed.value, parsed.rule) == (value, rule)

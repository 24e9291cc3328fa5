"""Parser tables: real reply shapes in both directions (answers read, non-answers refused).

Rows marked "embedded model" are verbatim replies of SmolLM2-135M from
``bench/results`` runs; the others are the shapes larger chat models write.
"""

from __future__ import annotations

import pytest

from moot.bench.parsers import (
    canonical_number,
    lenient_choice,
    lenient_label,
    lenient_number,
    matchable_options,
    parse_choice,
    parse_label,
    parse_number,
)

_NUMBER_ANSWERS = [
    # The requested (X) format, closing the reply.
    ("First 15*21 = 315, then 3*27 = 81. 12+315+0-81 = 246. The answer is (246).", "246", "paren"),
    ("So the final result is **(246)**", "246", "paren"),
    ("The result is (-120).", "-120", "paren"),
    ("Result: (1,234)", "1234", "paren"),
    ("The result of 6+23*11+14-18*27 is (18).", "18", "paren"),  # embedded model
    ("(1) multiply first (2) then add. The answer is (246).", "246", "paren"),
    ("The answer is (246). Note (this is important) I double checked.", "246", "paren"),
    ("Initially I said (100) but the correct answer is (246)", "246", "paren"),
    # Explicit final statements win over every other number, before or after them.
    ("The answer is \\boxed{18}.", "18", "boxed"),
    ("Total cost: \\boxed{\\$18.00}", "18", "boxed"),
    ("So she has \\boxed{18 \\text{ dollars}} left.", "18", "boxed"),
    ("The final answer is $\\boxed{18}$.", "18", "boxed"),
    ("She sold 48 clips in April and 24 in May.\n#### 72", "72", "hashes"),
    ("The final answer is 18. Check: 16-3-4 = 9 eggs, 9*2 = 18, not (20).", "18", "final"),
    ("**Final Answer:** $18", "18", "final"),
    ("The answer is: 1,234,567.", "1234567", "final"),
    ("The answer is 246.", "246", "final"),
    # Embedded model on tests/data/gsm8k_style.jsonl; the copied format sentence is no answer.
    (
        "So, 42 - 42 = 1 rolls are left.\nThe answer is \\boxed{1}.\n\nThe solution is \\boxed{1}.",
        "1",
        "boxed",
    ),
    (
        "This gives us 42 - 30 = 10 rolls.\n\nSo, the baker's final answer is 10 rolls.\n\nThe final answer "
        "is a single number, in the form \\boxed{answer}, at the end of your response.",
        "10",
        "final",
    ),
    (
        "3. Therefore, the number of tulips remaining is 5 - 9 = 1.\n4. The answer is 1.\n\nThe final "
        "answer is a single number, in the form \\boxed{answer}, at the end of the response.",
        "1",
        "final",
    ),
    # A bracketed number inside the reasoning is not the answer: the last number is.
    ("She has 3 boxes (12 eggs each), so 3*12 = 36 eggs.", "36", "last_number"),
    ("Janet has 16 eggs. She eats 3 (breakfast) and bakes 4. 16 - 3 - 4 = 9", "9", "last_number"),
    # No statement: Du et al.'s rule, the last number.
    ("12 + 315 + 0 - 81 = 246", "246", "last_number"),
    ("The answer is 12 + 5 = 17", "17", "last_number"),  # a calculation, not a statement
    ("20 - 5", "5", "last_number"),
    ("the result = -5", "-5", "last_number"),
    ("It is \u2212836", "-836", "last_number"),
    ("About 0.50 of it", "0.5", "last_number"),
    ("The result is (X) where X = 42", "42", "last_number"),
    ("Your final answer goes in \\boxed{answer}. 15 + 3 = 18", "18", "last_number"),  # literal placeholder
]

_NUMBER_REFUSED = [
    ("I am not sure how to do this.", False),
    ("", False),
    ("The answer is (X).", False),
    ("The final answer is \\boxed{answer}.", False),  # the prompt's placeholder, copied
    (  # embedded model, a reply with no number
        "I'm glad you found the answer helpful. I'll make sure to provide more accurate and helpful "
        "responses.\n\nI'm ready to assist you. What's your next question?",
        False,
    ),
    # Cut at the token cap (finish reason 'length'): a number from mid-sentence is no answer.
    (  # embedded model
        "10 + 20*11 + 4 - 6*4 = 10 + 20*11 + 4 - 6*4 = 10 + 20*11 + 4 - 24 = 10 + 20*11 + 4 - 24 = ",
        True,
    ),
    (  # embedded model: "(23)" is inside the reasoning, and the reply is cut
        "First, we calculate the product of each possible value of X by 13: \n(23) * 13 = 262\n"
        "(15*13) = 1890\n(21*13) = 2221\n",
        True,
    ),
    ("So 12+315 = 327, minus 81 gives (246)", True),
]


@pytest.mark.parametrize(("text", "value", "rule"), _NUMBER_ANSWERS)
def test_parse_number_reads_answers(text: str, value: str, rule: str) -> None:
    parsed = parse_number(text)
    assert (parsed.value, parsed.rule) == (value, rule)
    assert not parsed.failed


@pytest.mark.parametrize(("text", "truncated"), _NUMBER_REFUSED)
def test_parse_number_refuses_non_answers(text: str, truncated: bool) -> None:
    parsed = parse_number(text, truncated=truncated)
    assert (parsed.value, parsed.rule) == (None, "none")
    assert parsed.failed


def test_a_truncated_reply_keeps_an_explicit_final_statement() -> None:
    assert parse_number("The final answer is 18. Let me check: 16 - 3", truncated=True).value == "18"
    assert parse_number("So \\boxed{246}. Verifying: 15*21 = 3", truncated=True).rule == "boxed"


def test_lenient_number_reads_what_strict_mode_refuses() -> None:
    assert lenient_number("So 12+315 = 327, minus 81 gives (246)") == "246"
    assert lenient_number("no digits here") is None


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


_CHOICE_ANSWERS = [
    ("The sky scatters blue light most. The answer is (B).", "B", "paren"),
    ("Options (a) and (b) are wrong, so the answer is (D)", "D", "paren"),
    ("Option B is incorrect; the answer is (C).", "C", "paren"),
    ("(A)", "A", "bare"),
    ("**(C)**", "C", "bare"),
    ("B", "B", "bare"),
    ("B.", "B", "bare"),
    ("A) Paris", "A", "mark"),
    ("B) 4 is the right answer since 2+2=4.", "B", "mark"),
    ("A. Paris is the capital of France.", "A", "mark"),
    ("Answer: A", "A", "phrase"),
    ("**Answer:** B", "B", "phrase"),
    ("The correct answer is C because ...", "C", "phrase"),
    ("The correct option is **C**.", "C", "phrase"),
    ("I would pick option A.", "A", "phrase"),
    ("I choose D.", "D", "phrase"),
    ("(A) is tempting but the answer is B.", "B", "phrase"),
    ("the answer is A) Paris, the capital.", "A", "mark"),
    ("A) Paris\nB) London\nC) Berlin\nD) Madrid\n\nThe answer is A) Paris.", "A", "phrase"),
    ("\\boxed{C}", "C", "boxed"),
    # Embedded model on tests/data/mmlu_style.csv:
    ("A) S", "A", "mark"),
    ("A) Venus is the closest planet to the Sun.", "A", "mark"),
    ("A) Venus\n\nThe answer is (A) Venus.", "A", "paren"),
]

_CHOICE_REFUSED = [
    "A) Paris\nB) London\nC) Berlin\nD) Madrid",  # the option list repeated
    "A) S\nB) Na\nC) So\nD) Sd\n",  # embedded model, the same
    "(A) Paris (B) London (C) Berlin (D) Madrid",
    "(a) is tempting",  # lower case: an enumeration, not an answer
    "The answer is a bit unclear.",
    "A fine question; I don't know.",
    "Oranges are rich in vitamin C. Lemons too.",  # a capital letter ending a sentence
    "The answer is (E).",  # not one of this item's letters
    "",
]


@pytest.mark.parametrize(("text", "value", "rule"), _CHOICE_ANSWERS)
def test_parse_choice_reads_answers(text: str, value: str, rule: str) -> None:
    parsed = parse_choice(text, "ABCD")
    assert (parsed.value, parsed.rule) == (value, rule)


@pytest.mark.parametrize("text", _CHOICE_REFUSED)
def test_parse_choice_refuses_non_answers(text: str) -> None:
    assert parse_choice(text, "ABCD").failed


# Real replies of the embedded model to ARC-Challenge validation items (bench/results/public/).
_ICE = (
    "An ice cube melts and then evaporates. The ice cube and the water vapor have the same",
    ["mass.", "density.", "volume.", "temperature."],
)
_CAT = (
    "Which trait would a cat most likely inherit from its parents?",
    ["having a scar", "chasing a toy", "having white fur", "knowing its name"],
)
_OPTION_TEXT = [
    # A reply with no letter that names one option's text: that option, right or wrong.
    (_ICE, "An ice cube melts and then evaporates, resulting in the same mass as the water vapor.", "A"),
    (
        _ICE,
        "One agent response:\n```An ice cube melts and then evaporates, resulting in the same mass as"
        " the water vapor.\n```\n\nThis is the final answer.",
        "A",
    ),
    (_CAT, "A cat would most likely inherit the trait of having a scar from its parents.", "A"),
    (_CAT, "The cat inherits HAVING WHITE FUR!", "C"),
    # Refused: the option list repeated, two options named, a negated option, only the question echoed.
    (_CAT, "A) having a scar\nB) chasing a toy\nC) having white fur\nD) knowing its name", None),
    (_CAT, "Either having a scar or having white fur.", None),
    (_ICE, "It is not the mass of the ice cube that stays.", None),
    (
        (
            "Which gas do plants take in? Oxygen or carbon dioxide",
            ["oxygen", "carbon dioxide", "water", "nitrogen"],
        ),
        "Plants take in oxygen or carbon dioxide.",
        None,
    ),
    # Short or numeric options are never matched by text; a letter answer keeps its own rule.
    (("What is 2 + 2?", ["4", "5", "22", "0"]), "2 + 2 is 4.", None),
    (_ICE, "The answer is (B): density.", "B"),
]


@pytest.mark.parametrize(("case", "text", "value"), _OPTION_TEXT)
def test_parse_choice_reads_an_options_text_without_a_letter(
    case: tuple[str, list[str]], text: str, value: str | None
) -> None:
    parsed = parse_choice(text, "ABCD", matchable_options(*case))
    assert parsed.value == value
    if value is not None:
        assert parsed.rule == ("text" if "(" not in text else "paren")


def test_lenient_choice() -> None:
    assert lenient_choice("A) Paris\nB) London\nC) Berlin\nD) Madrid", "ABCD") == "D"
    assert lenient_choice("A fine question.", "ABCD") is None


_ASPECT_TARGETED = [
    # The asked aspect's statement wins over statements about other aspects (issue 15).
    ("positive toward 'wine' and neutral about 'food'", "wine", "positive"),
    ("positive toward 'wine' and neutral about 'food'", "food", "neutral"),
    (
        'The review expresses a positive sentiment toward "wine" and a neutral sentiment about "food".',
        "food",
        "neutral",
    ),
    ("Sentiment toward wine: positive\nSentiment toward food: neutral", "food", "neutral"),
    ("- wine: positive\n- food: negative", "food", "negative"),
    ("'wine': positive, 'food': negative", "wine", "positive"),
    (
        "The sentiment toward the wine is positive, but the sentiment toward the food is negative.",
        "food",
        "negative",
    ),
    (  # embedded model
        'The review sentence expresses a positive sentiment toward the aspect "laptop" and a neutral '
        'sentiment toward the aspect "presenting."',
        "laptop",
        "positive",
    ),
    (  # embedded model
        'The review sentence expresses a positive sentiment toward the aspect "staff" and a neutral '
        'sentiment toward the aspect "food."',
        "staff",
        "positive",
    ),
    (  # embedded model: a Korean particle attached to the aspect
        'The sentence expresses a positive sentiment toward the aspect "위치는 좋은데" (the quality of being '
        '"the right thing").',
        "위치",
        "positive",
    ),
    (  # embedded model: "does not express a negative or neutral" denies both
        'The review sentence expresses a positive sentiment towards the aspect "Delivery" as it does not '
        'express a negative or neutral sentiment towards the aspect "Delivery".',
        "Delivery",
        "positive",
    ),
    (  # embedded model: a label in brackets after a quoted word of the sentence is about that word
        'The given review sentence expresses a positive sentiment toward the aspect "충전 속도" (positive '
        'sentiment). It also acknowledges the drawbacks, mentioning the "빠르지만" (negative sentiment).',
        "충전 속도",
        "positive",
    ),
    (  # embedded model: "neither positive nor negative" denies both, the neutral statement stands
        "The review sentence expresses a neutral sentiment, indicating that the reviewer is neither positive "
        'nor negative towards the aspect "salad."',
        "salad",
        "neutral",
    ),
]


@pytest.mark.parametrize(("text", "aspect", "value"), _ASPECT_TARGETED)
def test_parse_label_reads_the_asked_aspects_statement(text: str, aspect: str, value: str) -> None:
    parsed = parse_label(text, ("positive", "negative", "neutral"), aspect)
    assert (parsed.value, parsed.rule) == (value, "phrase")


@pytest.mark.parametrize(
    ("text", "value", "rule"),
    [
        ("The pasta is praised, so (positive).", "positive", "paren"),
        ("**(Negative)**", "negative", "paren"),
        ("Options (a) and (b) aside, the answer is (neutral)", "neutral", "paren"),
        ("The sentiment is negative because the wait was long.", "negative", "phrase"),
        ("Polarity: positive", "positive", "phrase"),
        ('The answer is "neutral".', "neutral", "phrase"),
        ("Positive.", "positive", "bare"),
        ("neutral", "neutral", "bare"),
        (  # embedded model
            'The review sentence expresses a neutral sentiment toward the aspect "service" by stating '
            "that no complaints were made regarding the service.",
            "neutral",
            "phrase",
        ),
        (  # embedded model
            "The sentiment expressed in the given review sentence is positive, indicating that the "
            "reviewer is appreciative of the quality of the product or service.",
            "positive",
            "phrase",
        ),
        # Refused: no guessing from a stray label word, no picking between conflicting statements.
        ("The sentiment is not positive at all.", None, "none"),
        ("It was positive for some and negative for others.", None, "none"),
        ("(mixed)", None, "none"),  # not one of the task's labels
        (  # embedded model: two labels for the same aspect
            'The review sentence expresses a positive sentiment toward the aspect "service" and is '
            "neutral in terms of sentiment.",
            None,
            "none",
        ),
        (  # embedded model: "it" is the aspect again, with the opposite label
            'The review sentence expresses a positive sentiment toward the aspect "service" by stating '
            "that the tablet is lighter. However, it also expresses a negative sentiment towards it.",
            None,
            "none",
        ),
        (  # embedded model: the only statement is about another aspect
            'The sentence expresses a positive sentiment towards the aspect "디자인" (디자) and is a '
            "positive example of positive self-talk.",
            None,
            "none",
        ),
        ("This is not a positive sentiment.", None, "none"),  # negated, and nothing else
        ("It is a positive sentiment, or rather not a positive sentiment.", None, "none"),
        ("It shows a mixed sentiment.", None, "none"),  # a label outside the task's set
        ("", None, "none"),
    ],
)
def test_parse_label(text: str, value: str | None, rule: str) -> None:
    parsed = parse_label(text, ("positive", "negative", "neutral"), "service")
    assert (parsed.value, parsed.rule) == (value, rule)


def test_lenient_label_takes_the_last_label_word() -> None:
    assert lenient_label("positive for some and negative for others", ("positive", "negative")) == "negative"
    assert lenient_label("no idea", ("positive", "negative")) is None

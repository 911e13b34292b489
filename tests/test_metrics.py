import pytest

from cfbench.harness.metrics import aggregate, normalize, score


def test_normalize_lowercases_strips_punctuation_and_articles():
    assert normalize("The  Beatles!") == "beatles"
    assert normalize("A Tale of Two Cities.") == "tale of two cities"
    assert normalize("an apple, the pear; a plum") == "apple pear plum"
    # articles only as whole words
    assert normalize("Theatre Anaheim") == "theatre anaheim"


def test_normalize_keeps_non_ascii_letters_and_punctuation():
    assert normalize("Wilhelm Conrad Röntgen") == "wilhelm conrad röntgen"
    # only ASCII punctuation is deleted; unicode dashes and quotes stay (FlashRAG's definition)
    assert normalize("São Paulo – “city”") == "são paulo – “city”"


def test_em_and_cover_em_use_every_alias():
    s = score("Mark Twain", ["Samuel Clemens", "Mark Twain"])
    assert s["em"] == 1.0 and s["cover_em"] == 1.0
    s = score("It was written by Mark Twain in 1876.", ["Samuel Clemens", "mark twain"])
    assert s["em"] == 0.0 and s["cover_em"] == 1.0 and s["sub_em"] == 1.0


def test_cover_em_needs_whole_tokens_but_sub_em_does_not():
    s = score("trust", ["us"])
    assert s["cover_em"] == 0.0
    assert s["sub_em"] == 1.0
    assert score("the us army", ["US"])["cover_em"] == 1.0


def test_cover_em_needs_a_contiguous_run():
    assert score("new big york", ["New York"])["cover_em"] == 0.0
    assert score("in new york city", ["New York"])["cover_em"] == 1.0


def test_empty_prediction_scores_zero_everywhere():
    for pred in ("", "   ", "The", "!!"):
        assert score(pred, ["the", "anything"]) == {"cover_em": 0.0, "em": 0.0, "sub_em": 0.0, "f1": 0.0}


def test_f1_token_overlap_and_yes_no_rule():
    assert score("barack obama", ["obama"])["f1"] == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert score("yes", ["no"])["f1"] == 0.0
    assert score("no way", ["no"])["f1"] == 0.0  # gold is yes/no and differs from the prediction
    assert score("yes", ["Yes."])["f1"] == 1.0


def test_aggregate_means_of_benchmark_means_and_complete_groups_only():
    rows = []
    for bench, values in {"nq": [1, 0], "triviaqa": [1], "popqa": [0, 0, 0, 1]}.items():
        rows += [{"benchmark": bench, "scores": {"cover_em": v, "em": v, "sub_em": v, "f1": v}} for v in values]
    table = aggregate(rows)
    assert table["nq"]["cover_em"] == 0.5 and table["nq"]["n"] == 2
    assert table["single_hop"]["cover_em"] == pytest.approx((0.5 + 1 + 0.25) / 3)
    assert "avg7" not in table and "multi_hop" not in table
    rows += [
        {"benchmark": b, "scores": {"cover_em": 1, "em": 1, "sub_em": 1, "f1": 1}}
        for b in ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
    ]
    table = aggregate(rows)
    assert table["multi_hop"]["cover_em"] == 1.0
    assert table["avg7"]["cover_em"] == pytest.approx((0.5 + 1 + 0.25 + 4) / 7)
    assert table["avg7"]["n"] == 11

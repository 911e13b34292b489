import pytest

from cfbench.harness import protocol
from cfbench.harness.errors import CfbenchError
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers import Hit


def test_prompt_is_search_r1s_and_normalises_the_question():
    text = protocol.user_prompt("  who wrote hamlet ")
    assert text.endswith("Question: who wrote hamlet?\n")
    assert "as many times as your want" in text  # Search-R1's typo, kept byte for byte
    assert protocol.user_prompt("Is it?").endswith("Question: Is it?\n")


def test_first_action_tag_wins_and_content_is_stripped():
    assert protocol.parse_action("<think>x</think><search> capital of France </search>") == ("search", "capital of France")
    assert protocol.parse_action("<answer>\nParis\n</answer><search>q</search>") == ("answer", "Paris")
    assert protocol.parse_action("<search>a</answer>") == ("invalid", "")
    assert protocol.parse_action("Paris is the capital.") == ("invalid", "")


def test_final_answer_is_the_last_answer_in_generated_text():
    assert protocol.final_answer(["<answer>a</answer>", "x <answer> b </answer>"]) == "b"
    assert protocol.final_answer(["no tags here"]) == ""


def test_cut_at_stop_keeps_the_first_stop_string():
    assert protocol.cut_at_stop("<search>q</search>\n\nmore") == "<search>q</search>"
    assert protocol.cut_at_stop("<answer>x</answer></search>") == "<answer>x</answer>"
    assert protocol.cut_at_stop("plain") == "plain"


def test_observation_format_matches_search_r1():
    hits = [Hit("1", '"Paris"\nParis is the capital\nof France.', 3.0), Hit("2", '"Lyon"\nA city.', 1.0)]
    obs = protocol.observation(hits)
    assert obs == (
        '\n\n<information>Doc 1(Title: "Paris") Paris is the capital\nof France.\nDoc 2(Title: "Lyon") A city.</information>\n\n'
    )


@pytest.mark.parametrize("field,value", [("topk", 0), ("max_new_tokens", -1), ("max_searches", -1), ("topk", 1.5)])
def test_knobs_reject_out_of_range_values(field, value):
    with pytest.raises(CfbenchError, match=field):
        Knobs(**{field: value})

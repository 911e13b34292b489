import re

from cfbench.harness import protocol
from cfbench.harness.agent import run_batch
from cfbench.harness.evaluate import trajectory_row
from cfbench.harness.protocol import Knobs
from cfbench.harness.suite import Question
from scripted import ScriptedBackend, question_of

NOBEL = Question("t/nobel", "nq", "who got the first nobel prize in physics", ("Wilhelm Conrad Röntgen",))
KISS = Question("t/kiss", "hotpotqa", "Which 1945 comedy film starred Shirley Temple as Corliss Archer", ("Kiss and Tell",))


def search_then_answer(context: str) -> str:
    """Search once with the question, then answer with the start of the first passage's text."""
    if "<information>Doc" not in context:
        return f"<think>I should look this up.</think><search> {question_of(context)} </search> trailing"
    doc1 = re.search(r'<information>Doc 1\(Title: "[^"]*"\) (.*?)(?:\nDoc 2|</information>|$)', context, re.DOTALL).group(1)
    return f"<think>found it</think><answer> {' '.join(doc1.split()[:20])} </answer>"


def test_search_path_end_to_end_with_a_real_retriever(bm25):
    backend = ScriptedBackend(search_then_answer)
    [nobel, kiss] = run_batch([NOBEL, KISS], backend, bm25, Knobs())
    assert backend.calls == [2, 2]  # lockstep: one generate call per turn for all active trajectories
    first = nobel.turns[0]
    assert first["action"] == "search" and first["query"] == "who got the first nobel prize in physics?"
    assert first["generated"].endswith("</search>")  # cut after the stop string
    assert len(first["doc_ids"]) == 3
    assert first["observation"].startswith("\n\n<information>Doc 1(Title: ")
    assert first["observation"] in nobel.context
    assert nobel.turns[1]["action"] == "answer"
    row = trajectory_row(nobel)
    assert "Röntgen" in row["prediction"]
    assert row["scores"]["cover_em"] == 1.0 and row["scores"]["em"] == 0.0
    assert "Kiss and Tell" in kiss.prediction


def test_observation_is_capped(bm25):
    backend = ScriptedBackend(lambda ctx: "<answer> a </answer>" if "<information>Doc" in ctx else "<search> nobel </search>")
    [traj] = run_batch([NOBEL], backend, bm25, Knobs(max_obs_tokens=40))
    observation = traj.turns[0]["observation"]
    assert len(observation) == 40 and observation.startswith('\n\n<information>Doc 1(Title: "')


def test_invalid_action_costs_budget_and_gets_the_hint(bm25):
    backend = ScriptedBackend(lambda ctx: "I think it is Beijing." if ctx.count("invalid") < 1 else "<answer> x </answer>")
    [traj] = run_batch([NOBEL], backend, bm25, Knobs())
    assert [t["action"] for t in traj.turns] == ["invalid", "answer"]
    assert traj.turns[0]["observation"] == protocol.INVALID_ACTION
    assert protocol.INVALID_ACTION in traj.context
    assert traj.prediction == "x"


def test_budget_exhaustion_ends_without_an_answer(bm25):
    backend = ScriptedBackend(lambda ctx: "<search> nobel prize </search>")
    [traj] = run_batch([NOBEL], backend, bm25, Knobs(max_searches=4))
    actions = [t["action"] for t in traj.turns]
    assert actions == ["search"] * 4 + ["search_over_budget"]  # at most 5 generation calls
    assert traj.turns[-1]["doc_ids"] == [] and "observation" not in traj.turns[-1]
    assert traj.context.count("\n\n<information>Doc 1") == 4
    assert traj.prediction == ""


def test_an_answer_only_in_the_prompt_never_counts(bm25):
    # The instruction's example is "<answer> Beijing </answer>"; a model that never answers gets "".
    question = Question("t/beijing", "nq", "what is the capital of china", ("Beijing",))
    [traj] = run_batch([question], ScriptedBackend(lambda ctx: "Beijing, I believe."), bm25, Knobs())
    assert "<answer> Beijing </answer>" in traj.context
    row = trajectory_row(traj)
    assert row["prediction"] == "" and row["scores"]["cover_em"] == 0.0


def test_finished_trajectories_leave_the_batch(bm25):
    backend = ScriptedBackend(lambda ctx: "<answer> now </answer>" if "nobel" in ctx else "<search> q </search>")
    run_batch([NOBEL, KISS], backend, bm25, Knobs(max_searches=2))
    assert backend.calls == [2, 1, 1]


def test_context_cap_keeps_the_end_of_the_context(bm25):
    seen = []
    backend = ScriptedBackend(lambda ctx: seen.append(ctx) or "<answer> a </answer>")
    run_batch([NOBEL], backend, bm25, Knobs(max_context_tokens=50))
    assert len(seen[0]) == 50 and seen[0].endswith("</user>\n")


def test_training_rollouts_run_in_chunks_of_rollout_rows_with_the_same_trajectories(bm25):
    from cfbench.training.core.rollouts import rollouts

    questions = [NOBEL, KISS] * 3
    whole, chunked = ScriptedBackend(search_then_answer), ScriptedBackend(search_then_answer)
    expected = rollouts(questions, whole, bm25, Knobs(), None)
    assert whole.calls == [6, 6]  # absent: every row at once
    got = rollouts(questions, chunked, bm25, Knobs(), 4)
    assert chunked.calls == [4, 4, 2, 2]  # at most 4 rows decoded at once, chunk after chunk
    assert [t.turns for t in got] == [t.turns for t in expected] and [t.question for t in got] == questions

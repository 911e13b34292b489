"""Servers on loopback that answer what no honest server would: each answer is refused in one line, and nothing that is
not valid JSON, nor any credential from a URL, reaches the run record."""

from __future__ import annotations

import json

import pytest

from cfbench.harness.backends.openai import OpenAIBackend
from cfbench.harness.errors import CfbenchError
from cfbench.harness.evaluate import evaluate
from cfbench.harness.protocol import STOP, Knobs
from cfbench.harness.retrievers.http import HTTPRetriever
from cfbench.harness.suite import load_suite
from openai_stub import openai_stub
from scripted import ScriptedBackend, question_of
from search_r1_server import search_r1_server

MODEL = "smollm2-135m"


def searching(context: str) -> str:
    return f"<search> {question_of(context)} </search>" if "<information>Doc" not in context else "<answer> x </answer>"


def record_files(run) -> dict[str, str]:
    return {p.name: p.read_text() for p in run.iterdir() if p.is_file()}


def assert_valid_json(files: dict[str, str]) -> None:
    """Every file parses as JSON (or JSON lines) under a reader that, unlike Python's default, refuses NaN and Infinity."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    for name, text in files.items():
        for line in text.splitlines() if name.endswith(".jsonl") else [text]:
            json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize(
    "document,score,message",
    [
        ({"id": "1", "contents": None}, 1.0, "query 0 hit 1 has contents None, not text"),
        ({"id": "1", "contents": 7}, 1.0, "query 0 hit 1 has contents 7, not text"),
        ({"id": "1", "contents": '"T"\ntext'}, float("nan"), "query 0 hit 1 has score nan, not a finite number"),
        ({"id": "1", "contents": '"T"\ntext'}, float("inf"), "query 0 hit 1 has score inf, not a finite number"),
    ],
)
def test_a_hit_with_no_text_or_a_score_that_is_no_number_is_refused(tmp_path, document, score, message):
    suite = load_suite("mini")
    with search_r1_server(lambda query, k: [(document, score)]) as url:  # json.dumps sends nan as a bare NaN
        with pytest.raises(CfbenchError, match="retrieval server .* " + message) as refused:
            evaluate(suite, ScriptedBackend(searching), HTTPRetriever(url), Knobs(), tmp_path / "run")
    assert "\n" not in str(refused.value)
    files = record_files(tmp_path / "run")
    assert "trajectories.jsonl" not in files  # the batch in flight is not written
    assert_valid_json(files)


def test_credentials_in_urls_are_sent_but_never_recorded(tmp_path):
    from cfbench.harness.retrievers import Hit

    seen = []

    def search(query, k):
        return [({"id": "1", "contents": '"T"\ntext'}, 1.0)]

    with search_r1_server(search) as url:
        host = url.removeprefix("http://")
        retriever = HTTPRetriever(f"http://alice:s3cret@{host}")
        seen.append(retriever.search(["q"], 1))
        results = evaluate(load_suite("mini"), ScriptedBackend(searching), retriever, Knobs(), tmp_path / "run")
    assert seen == [[[Hit("1", '"T"\ntext', 1.0)]]]
    assert results["retriever"]["url"] == f"http://{host}/retrieve"
    files = record_files(tmp_path / "run")
    assert files and not any("s3cret" in text or "alice" in text for text in files.values())

    with openai_stub(lambda path, body: (200, {"choices": []})) as (url, received):
        engine = OpenAIBackend(url.replace("http://", "http://bob:hunter2@"), "stub-model", tokenizer=MODEL)
        described = json.dumps(engine.describe())
    assert engine.describe()["base_url"] == url and "hunter2" not in described and "bob" not in described


def test_a_model_server_answering_cut_off_json_is_one_line():
    body = json.dumps({"choices": [{"index": 0, "text": "Paris", "finish_reason": "stop"}]}).encode()
    with openai_stub(lambda path, _: (200, body[: len(body) // 2])) as (url, _):
        engine = OpenAIBackend(url, "stub-model", tokenizer=MODEL, retries=0)
        with pytest.raises(CfbenchError, match=r"model server .* answered with a body that is not JSON .*cut off") as refused:
            engine.generate(["hello"], 4, 4096, STOP)
    assert "\n" not in str(refused.value)


def test_serve_model_loads_adapters_only_from_its_adapters_folder(tmp_path, tiny_llama):
    """load_lora_adapter takes a path from an unauthenticated request: outside --adapters (directly, by `..` or by a
    symbolic link) it is 403 and nothing is read; inside, the adapter's own checks apply."""
    import requests

    from servers import cli_server

    (tmp_path / "adapters" / "empty").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "adapters" / "link").symlink_to(tmp_path / "elsewhere")
    with cli_server(["serve-model", "--ckpt", str(tiny_llama), "--name", "tiny", "--adapters", str(tmp_path / "adapters")]) as url:

        def load(path):
            return requests.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": str(path)}, timeout=60)

        for outside in (tmp_path / "elsewhere", tmp_path / "adapters" / ".." / "elsewhere", tmp_path / "adapters" / "link", "/etc"):
            answer = load(outside)
            assert answer.status_code == 403, outside
            assert answer.json()["error"]["message"] == (
                f"lora_path {str(outside)!r} is not under this server's adapters folder (--adapters); save it there"
            )
        inside = load(tmp_path / "adapters" / "empty")
        assert inside.status_code == 400 and "holds no adapter_config.json" in inside.json()["error"]["message"]
        assert requests.get(f"{url}/health", timeout=10).status_code == 200

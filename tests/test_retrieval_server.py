"""A real uvicorn server started on loopback, spoken to by Search-R1's client and by cfbench's."""

import json

import httpx
import pytest
import requests

from cfbench.harness.errors import CfbenchError
from cfbench.harness.evaluate import evaluate
from cfbench.harness.protocol import Knobs
from cfbench.harness.retrievers.http import HTTPRetriever
from cfbench.harness.retrievers.index import default_index
from cfbench.harness.suite import load_suite
from scripted import ScriptedBackend, question_of
from servers import cli_server, free_port


@pytest.fixture(scope="module")
def server(bundled_corpus):
    with cli_server(["retriever", "serve", "--index", str(default_index(bundled_corpus, "bm25"))]) as url:
        yield url


def test_search_r1_client_payload_and_response(server, bm25):
    # Search-R1's generation.py: requests.post(search_url, json={"queries", "topk", "return_scores": True}).json()
    payload = {"queries": ["who got the first nobel prize in physics", "Kiss and Tell 1945 film"], "topk": 3, "return_scores": True}
    answer = requests.post(server + "/retrieve", json=payload).json()
    local = bm25.search(payload["queries"], 3)
    assert [[(d["document"]["id"], d["document"]["contents"], d["score"]) for d in q] for q in answer["result"]] == \
        [[(h.id, h.contents, h.score) for h in hits] for hits in local]
    # Search-R1's _passages2string reads doc_item['document']['contents']
    assert answer["result"][0][0]["document"]["contents"].split("\n")[0] == '"List of Nobel laureates in Physics"'


def test_return_scores_false_gives_bare_documents(server, bm25):
    answer = requests.post(server + "/retrieve", json={"queries": ["nobel prize physics"], "topk": 2, "return_scores": False}).json()
    assert answer["result"] == [[{"id": h.id, "contents": h.contents} for h in bm25.search(["nobel prize physics"], 2)[0]]]


def test_cfbench_client_sends_search_r1s_exact_bytes(server):
    sent = []

    def record(request):
        sent.append(request.content)
        return httpx.Response(200, json={"result": [[{"document": {"id": "1", "contents": '"T"\nx'}, "score": 1.0}]]})

    client = HTTPRetriever(server)
    client._client = httpx.Client(transport=httpx.MockTransport(record))
    client.search(["who wrote \u00e9l\u00e9gie?"], 3)
    reference = requests.Request("POST", server + "/retrieve", json={"queries": ["who wrote \u00e9l\u00e9gie?"], "topk": 3, "return_scores": True}).prepare().body
    assert sent == [reference]


@pytest.mark.parametrize("body,reason", [
    (b'{"queries": ["x"], "topk": 0}', "topk must be between 1 and 1000, got 0"),
    (b'{"queries": ["x"], "topk": -3}', "topk must be between 1 and 1000, got -3"),
    (json.dumps({"queries": ["x" * 9000]}).encode(), "query 0 has 9000 characters; the limit is 8192"),
    (b'{"queries": []}', "queries"),
    (b'{"queries": "not a list"}', "queries"),
    (b'{"queries": ["x"', "bad request: body: Invalid JSON"),
    (b'{"queries": ["caf\xe9"]}', "bad request: body: Invalid JSON"),
])
def test_bad_requests_get_422_and_the_server_keeps_serving(server, body, reason):
    answer = requests.post(server + "/retrieve", data=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    assert reason in json.dumps(answer.json())
    assert requests.post(server + "/retrieve", json={"queries": ["nobel"], "topk": 1}).status_code == 200


def test_eval_through_the_server_equals_in_process(server, bm25, tmp_path):
    def policy(context):
        if "<information>Doc" not in context:
            return f"<search> {question_of(context)} </search>"
        return "<answer> " + context.rsplit('Doc 1(Title: "', 1)[1].split('"', 1)[0] + " </answer>"

    suite = load_suite("mini")
    local = evaluate(suite, ScriptedBackend(policy), bm25, Knobs(), tmp_path / "local")
    remote = evaluate(suite, ScriptedBackend(policy), HTTPRetriever(server), Knobs(), tmp_path / "remote")
    assert remote["scores"] == local["scores"]
    assert (tmp_path / "remote" / "trajectories.jsonl").read_bytes() == (tmp_path / "local" / "trajectories.jsonl").read_bytes()
    assert remote["retriever"]["index_sha256"] == bm25.index_hash


def test_a_server_that_is_down_is_a_clear_error():
    with pytest.raises(CfbenchError, match=r"retrieval server http://127.0.0.1:\d+ is not answering"):
        HTTPRetriever(f"http://127.0.0.1:{free_port()}", timeout=2)


def test_a_server_that_fails_is_retried_then_reported(server):
    calls = []

    def flaky(request):
        calls.append(1)
        return httpx.Response(503)

    client = HTTPRetriever(server, retries=2, backoff=0.01)
    client._client = httpx.Client(transport=httpx.MockTransport(flaky))
    with pytest.raises(CfbenchError, match="failed 3 times \\(last: HTTP 503\\)"):
        client.search(["x"], 3)
    assert len(calls) == 3


def test_a_run_record_replays_its_exact_observations(tmp_path, bm25, bundled_corpus):
    from cfbench.harness.retrievers.replay import ReplayRetriever

    def policy(context):
        if "<information>Doc" not in context:
            return f"<search> {question_of(context)} </search>"
        return "<answer> x </answer>"

    suite = load_suite("mini")
    evaluate(suite, ScriptedBackend(policy), bm25, Knobs(), tmp_path / "original")
    replay = ReplayRetriever(tmp_path / "original", bundled_corpus)
    evaluate(suite, ScriptedBackend(policy), replay, Knobs(), tmp_path / "replayed")
    assert (tmp_path / "replayed" / "trajectories.jsonl").read_bytes() == (tmp_path / "original" / "trajectories.jsonl").read_bytes()
    with pytest.raises(CfbenchError, match="was never made in"):
        replay.search(["a query nobody made"], 3)


def test_an_empty_query_is_answered_not_refused(server, bm25):
    answer = requests.post(server + "/retrieve", json={"queries": [""], "topk": 3, "return_scores": True}).json()
    assert [d["document"]["id"] for d in answer["result"][0]] == [h.id for h in bm25.search([""], 3)[0]]


def test_a_server_answering_nothing_is_an_error_not_an_empty_result(server):
    client = HTTPRetriever(server)
    client._client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"result": [[]]})))
    with pytest.raises(CfbenchError, match="unexpected form \\(no passages for query 0\\)"):
        client.search(["x"], 3)

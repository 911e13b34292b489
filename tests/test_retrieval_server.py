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
from search_r1_server import search_r1_server
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
    assert [[(d["document"]["id"], d["document"]["contents"], d["score"]) for d in q] for q in answer["result"]] == [
        [(h.id, h.contents, h.score) for h in hits] for hits in local
    ]
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
    reference = (
        requests.Request("POST", server + "/retrieve", json={"queries": ["who wrote \u00e9l\u00e9gie?"], "topk": 3, "return_scores": True})
        .prepare()
        .body
    )
    assert sent == [reference]


@pytest.mark.parametrize(
    "body,reason",
    [
        (b'{"queries": ["x"], "topk": 0}', "topk must be between 1 and 1000, got 0"),
        (b'{"queries": ["x"], "topk": -3}', "topk must be between 1 and 1000, got -3"),
        (json.dumps({"queries": ["x" * 9000]}).encode(), "query 0 has 9000 characters; the limit is 8192"),
        (b'{"queries": []}', "queries"),
        (b'{"queries": "not a list"}', "queries"),
        (b'{"queries": ["x"', "bad request: body: Invalid JSON"),
        (b'{"queries": ["caf\xe9"]}', "bad request: body: Invalid JSON"),
        (b'{"queries": ["x"], "topk": "3"}', "bad request: topk: Input should be a valid integer"),
        (b'{"queries": ["x"], "topk": true}', "bad request: topk: Input should be a valid integer"),
        (b'{"queries": ["x"], "return_scores": 1}', "bad request: return_scores: Input should be a valid boolean"),
        (b'{"queries": ["x"], "top_k": 3}', "bad request: top_k: Extra inputs are not permitted"),
        (json.dumps({"queries": ["x"] * 2731, "topk": 3}).encode(), "2731 queries x topk 3 = 8193 passages; the limit is 8192 per request"),
    ],
)
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
    # as the in-process retriever answers it (protocol v1): a model's `<search></search>` must not stop a server-backed run
    answer = requests.post(server + "/retrieve", json={"queries": [""], "topk": 3, "return_scores": True}).json()
    assert [d["document"]["id"] for d in answer["result"][0]] == [h.id for h in bm25.search([""], 3)[0]]


def test_a_server_answering_nonsense_is_an_error(server):
    client = HTTPRetriever(server)
    client._client = httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, json={"result": [None]})))
    with pytest.raises(CfbenchError, match="unexpected form"):
        client.search(["x"], 3)


def search_r1_observation(docs: list[dict]) -> str:
    """Search-R1's client: _passages2string over doc['document']['contents'], then <information>{...strip()}</information>."""
    passages = ""
    for i, doc in enumerate(docs):
        lines = doc["document"]["contents"].split("\n")
        passages += f"Doc {i + 1}(Title: {lines[0]}) {chr(10).join(lines[1:])}\n"
    return f"\n\n<information>{passages.strip()}</information>\n\n"


def test_zero_hits_and_documents_without_ids_from_search_r1s_server_are_observations(tmp_path, bm25):
    """Search-R1's BM25 server answers [] for a query with no hits (an empty <search></search> is enough) and, over
    raw stored documents, documents without an id: the run goes on, as under Search-R1's client."""
    import hashlib

    from search_r1_server import raw_document

    def search(query, k):
        return [] if not query.strip() else [(raw_document(h.contents), h.score) for h in bm25.search([query], k)[0]]

    def policy(context):
        if "<information></information>" not in context:
            return "<search></search>"
        if "<information>Doc" not in context:
            return f"<search> {question_of(context)} </search>"
        return "<answer> x </answer>"

    suite = load_suite("mini")
    with search_r1_server(search) as url:
        results = evaluate(suite, ScriptedBackend(policy), HTTPRetriever(url), Knobs(), tmp_path / "run")
        expected = requests.post(
            url + "/retrieve", json={"queries": [suite.questions[0].question], "topk": 3, "return_scores": True}
        ).json()
    assert results["stats"]["searches_per_question"] == 2.0
    first = json.loads((tmp_path / "run" / "trajectories.jsonl").read_text().splitlines()[0])
    empty, found = first["turns"][0], first["turns"][1]
    assert (empty["query"], empty["doc_ids"], empty["observation"]) == ("", [], "\n\n<information></information>\n\n")
    assert found["observation"] == ScriptedBackend(policy).truncate(search_r1_observation(expected["result"][0]), Knobs().max_obs_tokens)
    contents = [d["document"]["contents"] for d in expected["result"][0]]
    assert found["doc_ids"] == ["derived-sha256:" + hashlib.sha256(c.encode()).hexdigest() for c in contents]


@pytest.fixture(scope="module")
def small_server(bundled_corpus):
    args = ["retriever", "serve", "--index", str(default_index(bundled_corpus, "bm25")), "--max-results", "20", "--max-body-bytes", "2000"]
    with cli_server(args) as url:
        yield url


def test_limits_are_reported_and_the_cli_defaults_are_the_servers(small_server):
    from cfbench.harness.cli import retriever_serve
    from cfbench.harness.retrieval_server import Limits

    assert requests.get(small_server + "/health").json()["limits"] == {"max_results": 20, "max_body_bytes": 2000, "deadline_s": 60.0}
    defaults = {p.name: p.default for p in retriever_serve.params}
    assert Limits() == Limits(defaults["max_results"], defaults["max_body_bytes"], defaults["deadline"])


def test_a_body_over_the_limit_is_413_whether_declared_or_streamed(small_server):
    over = json.dumps({"queries": ["x" * 2100]}).encode()
    answer = requests.post(small_server + "/retrieve", data=over, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and answer.json()["detail"] == f"the body has {len(over)} bytes; the limit is 2000 (--max-body-bytes)"
    streamed = requests.post(small_server + "/retrieve", data=iter([over[:1000], over[1000:]]))  # chunked: no Content-Length
    assert streamed.status_code == 413 and "more than 2000 bytes" in streamed.json()["detail"]
    assert requests.post(small_server + "/retrieve", json={"queries": ["x"] * 6, "topk": 3}).status_code == 200
    assert requests.post(small_server + "/retrieve", json={"queries": ["x"] * 7, "topk": 3}).status_code == 422


def test_a_declared_huge_body_is_refused_without_being_sent(small_server):
    import http.client
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(small_server)
    with socket.create_connection((where.hostname, where.port), timeout=10) as s:
        s.sendall(b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000000\r\n\r\n{"qu')
        answer = http.client.HTTPResponse(s)  # answered with only 4 of the 200 MB sent
        answer.begin()
        assert answer.status == 413
        assert json.loads(answer.read())["detail"] == "the body has 200000000 bytes; the limit is 2000 (--max-body-bytes)"


class Gated:
    """A retriever whose searches wait for the test's go-ahead, recording each batch it is asked for."""

    def __init__(self) -> None:
        import threading

        self.calls: list[list[str]] = []
        self.started = threading.Semaphore(0)
        self.go = threading.Semaphore(0)

    def search(self, queries, k):
        self.calls.append(queries)
        self.started.release()
        self.go.acquire()
        return [[] for _ in queries]

    def describe(self):
        return {"kind": "gated"}


def test_a_small_search_takes_its_turn_between_the_chunks_of_a_big_one():
    from cfbench.harness.round_robin import RoundRobinSearcher

    gated = Gated()
    searcher = RoundRobinSearcher(gated, chunk=4)
    big = searcher.submit([f"big {i}" for i in range(12)], 3)
    gated.started.acquire()  # the big request's first chunk is running
    small = searcher.submit(["small"], 3)
    for _ in range(4):
        gated.go.release()
    assert small.result(timeout=10) == [[]] and big.result(timeout=10) == [[]] * 12
    assert gated.calls == [[f"big {i}" for i in range(4)], ["small"], [f"big {i}" for i in range(4, 8)], [f"big {i}" for i in range(8, 12)]]


def test_a_search_past_its_deadline_is_503_and_its_remaining_chunks_are_dropped():
    from fastapi.testclient import TestClient

    from cfbench.harness.retrieval_server import Limits, make_app

    gated = Gated()
    with TestClient(make_app(gated, limits=Limits(deadline_s=0.2))) as client:
        answer = client.post("/retrieve", json={"queries": [f"q{i}" for i in range(40)]})  # three chunks of 16
        assert answer.status_code == 503
        assert answer.json()["detail"].startswith("the search did not finish within the 0.2 s deadline (--deadline)")
        gated.go.release()  # let the first chunk finish: the cancelled request must not get a second one
        gated.go.release()
        assert client.post("/retrieve", json={"queries": ["after"], "topk": 3}).json() == {"result": [[]]}
    assert gated.calls == [[f"q{i}" for i in range(16)], ["after"]]


def test_a_server_claiming_the_local_index_hash_cannot_poison_local_lookups(tmp_path, monkeypatch, bm25, bundled_corpus):
    from cfbench.harness.retrievers.choose import retriever_for

    index = default_index(bundled_corpus, "bm25")
    monkeypatch.setenv("CFBENCH_CACHE", str(tmp_path))  # a fresh result cache
    query = "who got the first nobel prize in physics"
    fake = {"id": bm25.search([query], 1)[0][0].id, "contents": '"Forged"\nthe server made this up'}
    claim = {"status": "ok", "retriever": {"kind": "bm25", "index_sha256": bm25.index_hash}}
    with search_r1_server(lambda q, k: [(fake, 99.0)] * k, health=claim) as url:
        remote = retriever_for(url)
        assert remote.search([query], 3)[0][0].contents == fake["contents"]
        assert remote.describe()["index_sha256"] == bm25.index_hash  # recorded as the server reports it
    local = retriever_for(str(index))
    assert local.search([query], 3) == bm25.search([query], 3)
    assert local.misses == 1
    (index_copy := tmp_path / "ix").mkdir()  # a manifest edited to claim another index's hash is refused
    for part in index.iterdir():
        (index_copy / part.name).symlink_to(part)
    manifest = json.loads((index / "manifest.json").read_text())
    (index_copy / "manifest.json").unlink()
    (index_copy / "manifest.json").write_text(json.dumps({**manifest, "index_sha256": "0" * 64}))
    with pytest.raises(CfbenchError, match="index_sha256 0000000000000000 is not the hash of its kind, corpus and parameters"):
        retriever_for(str(index_copy))

"""A real browser (headless Chromium, Debian's `chromium`) as the client: the timeline page, and serve itself.

They run where Chromium is installed; `.ci/run` installs it, so CI always runs them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner
from framed import messages

from sse_tape import Cassette, Chunk, Interaction, Request, Response, bundled_cassettes, serve
from sse_tape.cli import cli
from sse_tape.framing import SSE
from sse_tape.matching import framing_of
from sse_tape.server import run_in_thread

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")


FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-extensions", "--disable-background-networking",
]  # fmt: skip


def rendered(url: str, profile: Path) -> str:
    """The DOM Chromium renders for `url`, once its scripts have run."""
    assert CHROMIUM is not None
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Sections(HTMLParser):
    """Per `<section class="interaction">`: its title, its marks by kind, and the answer text it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[dict[str, object]] = []
        self._into: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "section" and "interaction" in classes:
            self.sections.append({"title": "", "marks": {}, "text": ""})
        elif self.sections and tag == "line" and "mark" in classes:
            marks = self.sections[-1]["marks"]
            assert isinstance(marks, dict)
            kind = next(c for c in classes if c != "mark")
            marks[kind] = marks.get(kind, 0) + 1
        elif self.sections and tag == "h2":
            self._into = "title"
        elif self.sections and tag == "pre" and "text" in classes:
            self._into = "text"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "pre"):
            self._into = None

    def handle_data(self, data: str) -> None:
        if self._into is not None:
            self.sections[-1][self._into] = str(self.sections[-1][self._into]) + data


def test_the_timeline_page_shows_every_interaction_its_text_and_one_mark_per_event(tmp_path: Path) -> None:
    page = tmp_path / "tape.html"
    result = CliRunner().invoke(cli, ["show", "--html", str(page), "cassettes/"])
    assert result.output == f"wrote {page} (33 interactions)\n"
    parser = Sections()
    parser.feed(rendered(page.as_uri(), tmp_path / "profile"))
    expected, where = [], []
    for path in bundled_cassettes():
        for n, interaction in enumerate(Cassette.load(path), 1):
            where.append((path.stem, n))
            events = len(messages(interaction))  # in its framing: an Ollama line is one mark
            sse = (framing_of(interaction) or SSE) is SSE  # an event stream's binary headers are no comments
            comments = sum(line.startswith(b":") for line in interaction.response.body.splitlines()) if sse else 0
            expected.append((f"#{n} {interaction.request.method} {interaction.request.path}", events, comments))
    got = [
        (str(s["title"]), s["marks"].get("event", 0), s["marks"].get("comment", 0))  # type: ignore[attr-defined]
        for s in parser.sections
    ]
    assert got == expected
    texts = {str(s["title"]): str(s["text"]) for s in parser.sections}
    assert texts["#1 POST /v1/chat/completions"] == "Hi there! How can I help you today?"
    assert "18°C with light rain" in str(parser.sections[where.index(("openai-chat", 3))]["text"])


def test_the_page_needs_no_network(tmp_path: Path) -> None:
    page = tmp_path / "tape.html"
    CliRunner().invoke(cli, ["show", "--html", str(page), "cassettes/openai-chat.toml"])
    text = page.read_text()
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in text
    assert "<script src" not in text
    assert "<link" not in text


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>chat</title></head><body>
<p id="out"></p>
<script>
async function read() {
  const response = await fetch("URL/v1/chat/completions", {
    method: "POST",
    headers: {"content-type": "application/json"},
    body: JSON.stringify({model: "local-model", messages: [{role: "user", content: "Hello!"}], stream: true}),
  });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "", text = "", chunks = 0;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\\n\\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const delta = JSON.parse(line.slice(6)).choices[0].delta;
        text += delta.content || "";
        chunks += 1;
        document.getElementById("out").textContent = text;
      }
    }
  }
  return chunks;
}
read().then(
  (chunks) => ({rendered: document.getElementById("out").outerHTML, chunks}),
  (error) => ({error: String(error)}),
).then((result) => fetch("/result", {method: "POST", body: JSON.stringify(result)}));
</script></body></html>"""


class PageServer:
    """Serves one page from its own loopback origin, and takes what the page reports back at /result."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.url = ""
        self.result: dict[str, object] | None = None
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> PageServer:
        async def page(_: web.Request) -> web.Response:
            return web.Response(text=self.page, content_type="text/html")

        async def result(request: web.Request) -> web.Response:
            self.result = await request.json()
            return web.Response(text="thanks")

        app = web.Application()
        app.router.add_get("/", page)
        app.router.add_post("/result", result)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://localhost:{self._runner.addresses[0][1]}/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def visit(pages: PageServer, profile: Path) -> None:
    """Open the page in Chromium, and wait until it reports back (a minute at most, whatever the machine's load)."""
    assert CHROMIUM is not None
    browser = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", pages.url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(1200):
            if pages.result is not None or browser.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        browser.terminate()
        browser.wait(timeout=30)


def test_a_page_from_another_origin_reads_a_chat_stream_with_fetch(tmp_path: Path) -> None:
    # At the recorded pace: the page reads a real stream, chunk by chunk, from another origin.
    with serve() as server, run_in_thread(PageServer(PAGE.replace("URL", server.url))) as pages:
        assert not pages.url.startswith(server.url)  # localhost, not 127.0.0.1, and another port
        visit(pages, tmp_path / "profile")
    assert pages.result == {"rendered": '<p id="out">Hi there! How can I help you today?</p>', "chunks": 12}


def test_recorded_text_cannot_break_the_page(tmp_path: Path) -> None:
    said = "<!-- a comment --> </script><script>document.title = 'owned'</script> & done"
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": said}, "finish_reason": "stop"}],
    }
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
    stream = Interaction(
        Request("POST", "/v1/chat/completions", body=b"{}"),
        Response(200, (("content-type", "text/event-stream"),), (Chunk(0.1, body),)),
    )
    cassette = Cassette([stream]).save(tmp_path / "odd.toml")
    page = tmp_path / "odd.html"
    CliRunner().invoke(cli, ["show", "--html", str(page), str(cassette)])
    dom = rendered(page.as_uri(), tmp_path / "profile")
    parser = Sections()
    parser.feed(dom)
    assert [str(s["text"]) for s in parser.sections] == [said]
    assert "<title>owned</title>" not in dom


EVENTSOURCE = """<!doctype html><html><head><meta charset="utf-8"><title>feed</title></head><body>
<script>
const source = new EventSource("URL/events");
const seen = [];
let opens = 0;
source.onopen = () => { opens += 1; };
for (const kind of ["deploy", "alert"]) {
  source.addEventListener(kind, (e) => {
    seen.push([e.lastEventId, e.type, JSON.parse(e.data).status || JSON.parse(e.data).level]);
    if (seen.length === 5) {
      source.close();
      fetch("/result", {method: "POST", body: JSON.stringify({seen, opens})});
    }
  });
}
</script></body></html>"""


def test_an_eventsource_reconnects_after_a_drop_and_resumes_where_it_was(tmp_path: Path) -> None:
    feed = next(p for p in bundled_cassettes() if p.stem == "events")
    # The bundled feed, its connection dropped after two events: the browser waits the feed's retry (1 s),
    # reconnects with Last-Event-ID, and gets the rest.
    with (
        serve(feed, pace="instant", faults=["disconnect:after=2,times=1"]) as server,
        run_in_thread(PageServer(EVENTSOURCE.replace("URL", server.url))) as pages,
    ):
        visit(pages, tmp_path / "profile")
        resumed = [e.resumed for e in server.journal if e.kind == "matched"]
    assert pages.result == {
        "seen": [
            ["1", "deploy", "started"],
            ["2", "deploy", "healthy"],
            ["3", "alert", "warning"],
            ["4", "deploy", "started"],
            ["5", "deploy", "healthy"],
        ],
        "opens": 2,
    }
    assert resumed == [None, "after event id '2'"]

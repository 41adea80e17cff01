"""`python -m sse_tape` and the `sse-tape` script: the command line, in a process of its own."""

import gc
import signal
import sys


def main() -> None:
    """Run the command line; the collector rests while it is imported.

    Everything importing makes (modules, classes, functions) lives as long as
    the process, so a collection then walks it for nothing, in young and
    middle collections before `serve` answers (the cold start, measured by
    `bench/peers_bench.py --only cold`). Once imported, it is frozen, out of
    every later collection's way.

    Ctrl-C (SIGINT) stops any command at any moment: a server that listens
    says `stopped` and exits 0 (see `cli`); before that, and any other
    command, says `interrupted` and exits 130, never a traceback. SIGINT is
    heard from the start even in a process started with it ignored (a shell
    script's `sse-tape serve &`): a server obeys it once it listens whatever
    it inherited (asyncio's signal handler replaces the disposition), and a
    `kill -INT` that came a moment too soon must not leave it running.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        gc.disable()
        try:
            from .cli import main as run
        finally:
            gc.freeze()
            gc.enable()
        run()
    except KeyboardInterrupt:  # while importing: the command line says the same once it runs
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while saying so is no traceback either
        sys.stderr.write("sse-tape: interrupted\n")
        sys.exit(130)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: a Ctrl-C now has nothing left to stop


if __name__ == "__main__":
    main()
